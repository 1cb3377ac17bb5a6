#!/bin/sh
# test_quickstart.sh: include/ocellus.h opens with a quick start that is examples/embed/embed.c's
# main, line for line (between the "quick start >>>" and "<<< quick start" markers of both files).
# make check compiles and runs embed.c (test_embed.sh), so the header's quick start cannot drift
# into code that does not build or does not answer.
. tests/support/testlib.sh

# between FILE: the lines strictly between the two markers
between() { sed -n '/quick start >>>/,/<<< quick start/p' "$1" | sed '1d;$d'; }
between include/ocellus.h >"$tmp_dir/header"
between examples/embed/embed.c >"$tmp_dir/embed"
n=$(wc -l <"$tmp_dir/embed")
if [ "$n" -ge 10 ] && cmp -s "$tmp_dir/header" "$tmp_dir/embed"; then
  echo "# $n lines, the same in both files"
  pass quickstart_matches_embed
else
  diff "$tmp_dir/header" "$tmp_dir/embed" | head -10 | sed 's/^/# /'
  fail quickstart_matches_embed "include/ocellus.h's quick start differs from examples/embed/embed.c ($n lines there)"
fi
# the header opens with it: the block stands before the first declaration
first_block=$(grep -n 'quick start >>>' include/ocellus.h | head -1 | cut -d: -f1)
first_decl=$(grep -n '^#ifndef OCELLUS_H' include/ocellus.h | cut -d: -f1)
if [ -n "$first_block" ] && [ -n "$first_decl" ] && [ "$first_block" -lt "$first_decl" ]; then
  pass quickstart_first
else
  fail quickstart_first "the quick start is not at the top of include/ocellus.h"
fi
exit $failed
