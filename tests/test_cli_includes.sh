#!/bin/sh
# test_cli_includes.sh: the CLI's front end (examples/cli/main.c, examples/cli/cmd_ask.c, examples/cli/cli.h) is a user of the
# library like any embedder: it includes ocellus.h, the commands' header (examples/tools/tools.h), cli.h and
# system headers, nothing else. The commands that need internals (benches, tokenizer, plans,
# converter: examples/cli/cmd_*.c, examples/cli/bench_*.c) are reached through tools.h. A header counts as internal
# when the repo has a file of that name under src/, port/, opencl/, examples/tools/, examples/cli/, examples/ or
# include/ (other than the allowed ones), or it is config.h, however it is spelled ("..." or <...>).
. tests/support/testlib.sh

# bad_includes FILE...: prints "FILE: NAME" for each include the rule forbids
bad_includes() {
  for f in "$@"; do
    sed -n 's/^[[:space:]]*#[[:space:]]*include[[:space:]]*\(["<][^">]*[">]\).*/\1/p' "$f" |
    while IFS= read -r inc; do
      name=${inc#?}; name=${name%?}
      case "$name" in ocellus.h | tools/tools.h) continue ;; esac
      case "$inc" in \"cli.h\") continue ;; esac
      internal=0
      [ "$name" = config.h ] && internal=1
      for dir in src port opencl tools cli examples include .; do [ -f "$dir/$name" ] && internal=1; done
      case "$inc" in \"*) internal=1 ;; esac   # a quoted name that is none of the above
      [ "$internal" = 1 ] && echo "$f: $inc"
    done
  done
}

# The check has teeth: an internal header, quoted or bracketed, and config.h are caught; system
# headers and the allowed ones are not.
probe="$tmp_dir/probe.c"
printf '#include "ocellus.h"\n#include "tools/tools.h"\n#include "cli.h"\n#include <stdio.h>\n' >"$probe"
printf '#include "core/f16.h"\n#include <kernels/matmul.h>\n#include "config.h"\n# include "port.h"\n' >>"$probe"
n_probe=$(bad_includes "$probe" | wc -l)
if [ "$n_probe" -eq 4 ]; then pass cli_includes_check_catches; else
  fail cli_includes_check_catches "expected 4 forbidden includes in the probe, found $n_probe: $(bad_includes "$probe" | tr '\n' ' ')"
fi

front="examples/cli/main.c examples/cli/cmd_ask.c examples/cli/cli.h"
# shellcheck disable=SC2086
bad=$(bad_includes $front)
echo "# front end: $front"
if [ -z "$bad" ]; then pass cli_includes_public_only; else
  fail cli_includes_public_only "the CLI's front end includes internal headers: $(printf '%s' "$bad" | tr '\n' ' ')"
fi

# tools.h is the boundary, so it too may include only ocellus.h and standard headers.
tools_bad=$(sed -n 's/^[[:space:]]*#[[:space:]]*include[[:space:]]*"\([^"]*\)".*/\1/p' examples/tools/tools.h | grep -vx 'ocellus.h')
if [ -z "$tools_bad" ]; then pass tools_header_public_only; else
  fail tools_header_public_only "examples/tools/tools.h includes $(printf '%s' "$tools_bad" | tr '\n' ' ')"
fi
exit $failed
