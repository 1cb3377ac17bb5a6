#!/bin/sh
# test_quantize.sh: `ocellus quantize IN OUT --type T`. On the demo mmproj (F16): every key copied
# with its type and value but the file type (7 for q8_0, 2 for q4_0) and quantization_version; the
# matrices with whole 32-element rows in the new type, the patch kernels and 1-D tensors as they
# were; tensors already quantized are not quantized again (a Q8_0 file gives back the same tensor
# bytes). Errors: an unknown type and the output naming the input are usage errors (2), a file that
# is no GGUF fails (1) with a message and leaves no output. test_vision_q8 checks the encoder's
# output error with such files.
. tests/support/testlib.sh

in=examples/demo/ocellus-demo-mmproj.gguf
keys() { run_target ./ocellus info "$1" | grep -E '^  [a-z]' | grep -v 'general.file_type\|general.quantization_version\|tensor data'; }
tensors() { run_target ./ocellus info "$1" | grep -E '^ +[0-9]+ '; }
for t in q8_0 q4_0; do
  out="$tmp_dir/m-$t.gguf"
  msg=$(run_target ./ocellus quantize "$in" "$out" --type $t 2>&1); rc=$?
  ft=7; [ $t = q4_0 ] && ft=2
  if [ $rc -ne 0 ]; then fail quantize_$t "exit $rc: $msg"
  elif [ "$(keys "$in")" != "$(keys "$out")" ]; then fail quantize_$t "keys differ from the input's"
  elif ! run_target ./ocellus info "$out" | grep -q "general.file_type  *u32  *$ft$"; then fail quantize_$t "file_type is not $ft"
  elif [ "$(tensors "$out" | grep -c " $t ")" -ne "$(tensors "$in" | grep -E '\[[0-9]+, [0-9]+\]' | grep -v patch_embd | grep -cE '(\.weight) +f16 ')" ]; then
    fail quantize_$t "not every 2-D f16 matrix but the patch kernels became $t"
  elif [ "$(tensors "$out" | grep -cE 'patch_embd\.weight(\.1)? +f16 ')" -ne 2 ]; then fail quantize_$t "the patch kernels changed type"
  elif tensors "$out" | grep -E '\[[0-9]+\] ' | grep -vq ' f32 '; then fail quantize_$t "a 1-D tensor changed type"
  else pass quantize_$t
  fi
done

# already quantized: nothing changes (the Q8_0 file's tensors are copied, not rounded again)
msg=$(run_target ./ocellus quantize "$tmp_dir/m-q8_0.gguf" "$tmp_dir/again.gguf" --type q8_0 2>&1); rc=$?
if [ $rc -ne 0 ]; then fail quantize_idempotent "exit $rc: $msg"
elif ! printf '%s\n' "$msg" | grep -q ": 0 of [0-9]* tensors quantized"; then fail quantize_idempotent "it quantized again: $msg"
elif ! cmp -s "$tmp_dir/m-q8_0.gguf" "$tmp_dir/again.gguf"; then fail quantize_idempotent "the file changed"
else pass quantize_idempotent
fi

printf 'not a gguf file at all\n' >"$tmp_dir/bad.gguf"
msg=$(run_target ./ocellus quantize "$tmp_dir/bad.gguf" "$tmp_dir/bad-out.gguf" 2>&1); rc=$?
msg2=$(run_target ./ocellus quantize "$in" "$tmp_dir/x.gguf" --type q5_0 2>&1); rc2=$?
msg3=$(run_target ./ocellus quantize "$in" "$in" 2>&1); rc3=$?
if [ $rc -ne 1 ] || [ -z "$msg" ] || [ -e "$tmp_dir/bad-out.gguf" ]; then fail quantize_errors "bad input: exit $rc, '$msg'"
elif [ $rc2 -ne 2 ] || ! printf '%s\n' "$msg2" | grep -q "q8_0 or q4_0, not 'q5_0'"; then fail quantize_errors "--type q5_0: exit $rc2, '$msg2'"
elif [ $rc3 -ne 2 ] || ! printf '%s\n' "$msg3" | grep -q "another file than the input"; then fail quantize_errors "same file: exit $rc3, '$msg3'"
else pass quantize_errors
fi
exit $failed
