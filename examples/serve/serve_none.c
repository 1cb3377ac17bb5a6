/* serve_none.c: `ocellus serve` in a build without libmicrohttpd (configure found none, or
 * --disable-server): says how to get the server. */
#include <stdio.h>

int cmd_serve(int argc, char **argv);

int cmd_serve(int argc, char **argv) {
    (void)argc;
    (void)argv;
    fprintf(stderr, "ocellus serve: this build has no server: install libmicrohttpd (Debian: libmicrohttpd-dev) "
                    "and run ./configure again (it says 'server yes')\n");
    return 1;
}
