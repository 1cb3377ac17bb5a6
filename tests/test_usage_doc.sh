#!/bin/sh
# test_usage_doc.sh: docs/usage.md documents every command and every option the CLI's --help
# texts print, so the page cannot drift from the program: each command `ocellus --help` lists has
# a row in the page's command table, each command with options has its "### ocellus CMD" section,
# and every option token (-x, --long-name) of each --help appears on the page as a word.
. tests/support/testlib.sh
doc=docs/usage.md
[ -f "$doc" ] || { fail usage_doc "$doc is missing"; exit $failed; }

missing=
for c in $(run_target ./ocellus --help 2>&1 | sed -n 's/^  \([a-z][a-z]*\)  .*/\1/p'); do
  grep -q "^| \[*\`$c\`" "$doc" || missing="$missing $c"
done
if [ -z "$missing" ]; then pass usage_doc_commands; else fail usage_doc_commands "not in $doc's command table:$missing"; fi

n=0
missing=
cmds='ask|eval|eval --suite long|scene|calibrate|plan|convert|quantize|info|tokenize|bench matmul|bench attention|bench vlm|bench kernels|bench plans'
# serve is built only where libmicrohttpd was found
grep -q '^HAVE_SERVER = 1' config.mk 2>/dev/null && cmds="$cmds|serve"
IFS='|'
for cmd in $cmds; do
  unset IFS
  grep -q "^### ocellus $cmd\$" "$doc" || missing="$missing [section: $cmd]"
  # shellcheck disable=SC2086
  for opt in $(run_target ./ocellus $cmd --help 2>&1 | grep -oE '(^|[ [(,|])--?[a-z][a-z0-9-]*' | sed 's/^[ [(,|]//' | sort -u); do
    n=$((n + 1))
    grep -qE -- "(^|[^a-z0-9-])$opt([^a-z0-9-]|\$)" "$doc" || missing="$missing $cmd:$opt"
  done
done
echo "# $n options checked"
if [ "$n" -ge 100 ] && [ -z "$missing" ]; then pass usage_doc_options; else fail usage_doc_options "not in $doc:$missing"; fi
exit $failed
