/* posix_serve.c: what a server needs from the OS beyond threads and files (port.h "serving"):
 * real paths for --allow-files, stop signals waited for in one thread, a peer-closed test for a
 * socket, and the current resident set. POSIX; the /proc read is Linux's and reports 0 elsewhere. */
#define _POSIX_C_SOURCE 200809L
#define _DEFAULT_SOURCE
#include "port.h"

#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

int oc_port_real_path(const char *path, char *out, size_t out_bytes) {
    char buf[PATH_MAX];
    if (!realpath(path, buf)) return errno ? errno : ENOENT;
    size_t n = strlen(buf);
    if (n + 1 > out_bytes) return ENAMETOOLONG;
    memcpy(out, buf, n + 1);
    return 0;
}

static sigset_t stop_set(void) {
    sigset_t s;
    sigemptyset(&s);
    sigaddset(&s, SIGINT);
    sigaddset(&s, SIGTERM);
    return s;
}

int oc_port_stop_signals_block(void) {
    /* a write to a socket the peer closed must fail with EPIPE, not end the process */
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = SIG_IGN;
    if (sigaction(SIGPIPE, &sa, NULL) != 0) return errno;
    sigset_t s = stop_set();
    return pthread_sigmask(SIG_BLOCK, &s, NULL);
}

int oc_port_stop_signal_wait(int timeout_ms) {
    sigset_t s = stop_set();
    struct timespec ts = { timeout_ms / 1000, (long)(timeout_ms % 1000) * 1000000L };
    int sig = sigtimedwait(&s, NULL, &ts);
    return sig > 0 ? sig : 0;
}

int oc_port_socket_peer_closed(int fd) {
    struct pollfd p = { fd, POLLIN, 0 };
    if (poll(&p, 1, 0) <= 0) return 0;
    if (p.revents & (POLLERR | POLLNVAL)) return 1;
    if (!(p.revents & (POLLIN | POLLHUP))) return 0;
    char c;
    ssize_t r = recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);
    return r == 0 || (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
}

uint64_t oc_port_rss_bytes(void) {
    FILE *f = fopen("/proc/self/statm", "r");
    if (!f) return 0;
    unsigned long size = 0, resident = 0;
    int ok = fscanf(f, "%lu %lu", &size, &resident) == 2;
    fclose(f);
    long page = sysconf(_SC_PAGESIZE);
    return ok && page > 0 ? (uint64_t)resident * (uint64_t)page : 0;
}

#include <arpa/inet.h>
#include <netinet/in.h>

int oc_port_sockaddr(const char *host, int port, void *out, size_t out_bytes, size_t *n_bytes, int *is_ipv6) {
    struct sockaddr_in v4;
    struct sockaddr_in6 v6;
    memset(&v4, 0, sizeof v4);
    memset(&v6, 0, sizeof v6);
    if (port < 0 || port > 65535) return EINVAL;
    if (inet_pton(AF_INET, host, &v4.sin_addr) == 1) {
        if (out_bytes < sizeof v4) return ENOSPC;
        v4.sin_family = AF_INET;
        v4.sin_port = htons((uint16_t)port);
        memcpy(out, &v4, sizeof v4);
        *n_bytes = sizeof v4;
        *is_ipv6 = 0;
        return 0;
    }
    if (inet_pton(AF_INET6, host, &v6.sin6_addr) == 1) {
        if (out_bytes < sizeof v6) return ENOSPC;
        v6.sin6_family = AF_INET6;
        v6.sin6_port = htons((uint16_t)port);
        memcpy(out, &v6, sizeof v6);
        *n_bytes = sizeof v6;
        *is_ipv6 = 1;
        return 0;
    }
    return EINVAL;
}
