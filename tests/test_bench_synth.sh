#!/bin/sh
# test_bench_synth.sh: `ocellus bench vlm --synth DIR --type T` writes the Qwen2-VL-2B-shaped random
# model in each type the llama.cpp comparison uses. Here q4_0 with --layers 1 (the full files are
# 1.3-4.5 GB): every matrix Q4_0 (llama-quantize --pure), patch kernels F16, 1-D tensors F32,
# file_type 2 (llama.cpp's MOSTLY_Q4_0), the layer count in the names and the keys; the pair must run
# through bench vlm; an unknown type is a usage error.
. tests/support/testlib.sh

if [ -n "$target_exec" ]; then
  # 190 MB of random weights and a bench run (its roofline probes included) under emulation take
  # minutes; this is portable C that the host's run covers
  skip synth_q4_0 "cross build run under '$target_exec': minutes under emulation, the host run covers it"
  exit 0
fi

dir="$tmp_dir/synth"
tok="$PWD/tests/data/models/qwen2vl/text.gguf"
out=$(run_target ./ocellus bench vlm --synth "$dir" --type q4_0 --layers 1 --tokenizer "$tok" 2>&1); rc=$?
text="$dir/qwen2vl-2b-q4_0-1l.gguf"; mmproj="$dir/mmproj-qwen2vl-2b-q4_0-1l.gguf"
if [ $rc -ne 0 ]; then fail synth_q4_0 "exit $rc: $out"
elif [ ! -f "$text" ] || [ ! -f "$mmproj" ]; then fail synth_q4_0 "no $text / $mmproj"
else
  ti=$(run_target ./ocellus info "$text"); vi=$(run_target ./ocellus info "$mmproj")
  if ! printf '%s\n' "$ti" | grep -q 'general.file_type  *u32  *2$'; then fail synth_q4_0 "text file_type is not 2 (MOSTLY_Q4_0)"
  elif ! printf '%s\n' "$ti" | grep -q 'qwen2vl.block_count  *u32  *1$'; then fail synth_q4_0 "text block_count is not 1"
  elif printf '%s\n' "$ti" | grep -E '^ +[0-9]+ ' | grep -E '\[[0-9]+, [0-9]+\]' | grep -vq ' q4_0 '; then
    fail synth_q4_0 "a text matrix is not q4_0: $(printf '%s\n' "$ti" | grep -E '\[[0-9]+, [0-9]+\]' | grep -v ' q4_0 ' | head -1)"
  elif [ "$(printf '%s\n' "$ti" | grep -cE '^ +[0-9]+ .* q4_0 ')" -ne 8 ]; then
    fail synth_q4_0 "expected 8 q4_0 text matrices (token_embd and one layer's 7)"
  elif printf '%s\n' "$ti" | grep -E '^ +[0-9]+ ' | grep -E '\[[0-9]+\] ' | grep -vq ' f32 '; then fail synth_q4_0 "a 1-D text tensor is not f32"
  elif [ "$(printf '%s\n' "$vi" | grep -cE '^ +[0-9]+ v\.patch_embd\.weight(\.1)? +f16 ')" -ne 2 ]; then
    fail synth_q4_0 "the patch kernels are not f16"
  elif [ "$(printf '%s\n' "$vi" | grep -cE '^ +[0-9]+ (v\.blk\.0|mm)\.[^ ]*weight +q4_0 ')" -ne 8 ]; then
    fail synth_q4_0 "expected 8 q4_0 vision matrices (q, k, v, out, up, down, mm.0, mm.2)"
  else
    out=$(cd "$tmp_dir" && run_target "$OLDPWD/ocellus" bench vlm -m "$text" --mmproj "$mmproj" --images 1@56 --pp 32 -n 2 -t 1 2>&1); rc=$?
    if [ $rc -ne 0 ]; then fail synth_q4_0 "bench vlm on the q4_0 pair: exit $rc: $(printf '%s\n' "$out" | tail -3)"
    elif ! printf '%s\n' "$out" | grep -q '^| 1 image 56x56 | 1 (4 tok) |' || ! printf '%s\n' "$out" | grep -q '^| text pp32 | 0 (0 tok) | 32 |'; then
      fail synth_q4_0 "bench vlm on the q4_0 pair printed no image or text row"
    else
      pass synth_q4_0
    fi
  fi
fi

out=$(run_target ./ocellus bench vlm --synth "$dir" --type q5_0 2>&1); rc=$?
if [ $rc -eq 2 ] && printf '%s\n' "$out" | grep -q "f16, q8_0 or q4_0, not 'q5_0'"; then pass synth_bad_type
else fail synth_bad_type "exit $rc: $out"; fi
exit $failed
