#!/bin/sh
# test_embed.sh: the embedding example (examples/embed/embed.c, built by make check against the
# public header and the static library) answers a question about its in-memory image with the
# model in OC_EMBED_MODEL (the Makefile's EMBED_MODEL: the demo model, which must say "red") and gives every allocated byte back, also
# when the model cannot be opened.
. tests/support/testlib.sh
bin=${OC_EMBED_BIN:-build/examples/embed/embed}
model=${OC_EMBED_MODEL:-examples/demo/ocellus-demo.gguf examples/demo/ocellus-demo-mmproj.gguf}

# shellcheck disable=SC2086
out=$(run_target "$bin" $model 2>&1); rc=$?
printf '%s\n' "$out" | sed 's/^/# /'
if [ "$rc" -eq 0 ] && printf '%s\n' "$out" | grep -q '^answer: red$' &&
   printf '%s\n' "$out" | grep -q ', 0 bytes not freed$'; then
  pass embed_answers
else
  fail embed_answers "exit status $rc, expected 0, the answer 'red' and '0 bytes not freed'"
fi

out=$(run_target "$bin" "$tmp_dir/missing.gguf" "$tmp_dir/missing-mmproj.gguf" 2>&1); rc=$?
printf '%s\n' "$out" | sed 's/^/# /'
if [ "$rc" -eq 1 ] && printf '%s\n' "$out" | grep -q 'missing.gguf' &&
   printf '%s\n' "$out" | grep -q ', 0 bytes not freed$'; then
  pass embed_missing_model
else
  fail embed_missing_model "exit status $rc, expected 1, a message naming the file and '0 bytes not freed'"
fi
exit $failed
