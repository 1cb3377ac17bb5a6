#!/bin/sh
# test_quickstart.sh: the C a newcomer copies first builds and answers. include/ocellus.h opens with
# a quick start that is a whole program (between its "quick start >>>" and "<<< quick start"
# markers), and README.md shows the same program (its first ```c block). Each is compiled here
# against this tree with the flags `make -s print-libs` prints (the README's in-tree route) and
# run on the demo model and examples/demo/shapes.ppm, where it must answer "green".
. tests/support/testlib.sh

sed -n '/quick start >>>/,/<<< quick start/p' include/ocellus.h | sed '1d;$d' >"$tmp_dir/header.c"
awk '/^```c$/ { if (!done) on = 1; next } on && /^```$/ { on = 0; done = 1; next } on' README.md >"$tmp_dir/readme.c"

# the header opens with it: the block stands before the first declaration
first_block=$(grep -n 'quick start >>>' include/ocellus.h | head -1 | cut -d: -f1)
first_decl=$(grep -n '^#ifndef OCELLUS_H' include/ocellus.h | cut -d: -f1)
if [ -n "$first_block" ] && [ -n "$first_decl" ] && [ "$first_block" -lt "$first_decl" ]; then
  pass quickstart_first
else
  fail quickstart_first "the quick start is not at the top of include/ocellus.h"
fi
if cmp -s "$tmp_dir/header.c" "$tmp_dir/readme.c"; then
  pass quickstart_readme_same
else
  diff "$tmp_dir/header.c" "$tmp_dir/readme.c" | head -10 | sed 's/^/# /'
  fail quickstart_readme_same "README.md's first C block differs from include/ocellus.h's quick start"
fi

# MAKEFLAGS would hand the jobserver of the make running this test to a make it cannot reach.
flags=$(env -u MAKEFLAGS -u MFLAGS "${MAKE:-make}" -s print-libs 2>"$tmp_dir/flags.log")
case $flags in
  *libocellus.a*) pass print_libs ;;
  *) sed 's/^/# /' "$tmp_dir/flags.log"; fail print_libs "make -s print-libs printed '$flags'" ;;
esac

q="What color is the circle in image 1?"
for name in header readme; do
  n=$(wc -l <"$tmp_dir/$name.c")
  # shellcheck disable=SC2086
  if ! $(cfg CC) -std=c11 $(cfg WARN_CFLAGS) $(cfg SAN_FLAGS) "$tmp_dir/$name.c" -o "$tmp_dir/$name" $flags \
       >"$tmp_dir/$name.log" 2>&1; then
    sed 's/^/# /' "$tmp_dir/$name.log" | tail -20
    fail "quickstart_${name}_runs" "the $n-line program does not compile"
    continue
  fi
  out=$(run_target "$tmp_dir/$name" examples/demo/ocellus-demo.gguf examples/demo/ocellus-demo-mmproj.gguf \
        examples/demo/shapes.ppm "$q" 2>&1); rc=$?
  printf '%s\n' "$out" | sed 's/^/# /'
  if [ "$rc" -eq 0 ] && [ "$out" = green ]; then
    pass "quickstart_${name}_runs"
  else
    fail "quickstart_${name}_runs" "exit status $rc, expected 0 and the answer 'green' ($n lines)"
  fi
done
exit $failed
