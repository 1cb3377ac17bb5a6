#!/bin/sh
# test_bench_compare_llama.sh: `ocellus bench vlm --compare-llama DIR` parses llama.cpp's output.
# llama.cpp is not here, so DIR holds two stand-in scripts that print what llama-mtmd-cli and
# llama-bench -o csv print (timing lines copied in their format, numbers made up for the test and
# never reported anywhere else); the bench must put those numbers next to its own, with the ratios.
. tests/support/testlib.sh

if [ -n "$target_exec" ]; then
  # the stand-ins are host shell scripts that the target binary would start through popen
  skip compare_llama "cross build run under '$target_exec': popen would start host scripts from an emulated process"
  exit 0
fi

dir="$tmp_dir/llama"
mkdir -p "$dir"
cat >"$dir/llama-mtmd-cli" <<'EOS'
#!/bin/sh
n=0; for a in "$@"; do [ "$a" = --image ] && n=$((n + 1)); done
i=0; while [ $i -lt $n ]; do
  echo "encoding image slice..."; echo "image slice encoded in 1000 ms"
  echo "decoding image batch 1/1, n_tokens_batch = 256"; echo "image decoded (batch 1/1) in 500 ms"
  i=$((i + 1)); done
echo "llama_perf_context_print: prompt eval time =    2000.00 ms /   300 tokens (    6.67 ms per token,   150.00 tokens per second)"
echo "llama_perf_context_print:        eval time =     100.00 ms /     1 runs   (  100.00 ms per token,    10.00 tokens per second)"
EOS
cat >"$dir/llama-bench" <<'EOS'
#!/bin/sh
echo 'build_commit,build_number,cpu_info,model_filename,n_threads,n_prompt,n_gen,test_time,avg_ns,stddev_ns,avg_ts,stddev_ts'
echo '"abc","1","Some CPU, 2 cores","m.gguf","2","64","0","2026","1","0","64.500000","0.1"'
echo '"abc","1","Some CPU, 2 cores","m.gguf","2","0","128","2026","1","0","12.250000","0.1"'
EOS
chmod +x "$dir/llama-mtmd-cli" "$dir/llama-bench"

out=$(cd "$tmp_dir" && run_target "$OLDPWD/ocellus" bench vlm -m "$OLDPWD/examples/demo/ocellus-demo.gguf" \
      --mmproj "$OLDPWD/examples/demo/ocellus-demo-mmproj.gguf" --images 1 --pp 64 -n 2 -t 1 \
      --compare-llama "$dir" 2>&1); rc=$?
printf '%s\n' "$out" | grep '^| ' | grep -E 'vision encode|first token|decode|prefill' | sed 's/^/# /'
if [ $rc -ne 0 ]; then fail compare_llama "bench vlm exited with $rc"
elif ! printf '%s\n' "$out" | grep -q '^| 1 image 448x448 | vision encode | 1000 ms | [0-9]* ms | time [0-9.]* |$'; then
  fail compare_llama "no vision row with llama.cpp's 1000 ms"
elif ! printf '%s\n' "$out" | grep -q '^| 1 image 448x448 | time to first token | 3000 ms |'; then
  fail compare_llama "no time-to-first-token row (1000 ms encode + 2000 ms prompt eval)"
elif ! printf '%s\n' "$out" | grep -q '^| 1 image 448x448 | decode | 10.00 tok/s |'; then
  fail compare_llama "no decode row from llama_perf's eval time"
elif ! printf '%s\n' "$out" | grep -q '^| text pp64 | prefill (llama-bench pp64) | 64.5 tok/s | .* | speed [0-9.]* |$'; then
  fail compare_llama "no pp row from llama-bench's csv (quoted fields with commas)"
elif ! printf '%s\n' "$out" | grep -q '^| text pp64 | decode (llama-bench tg128) | 12.25 tok/s |'; then
  fail compare_llama "no tg row from llama-bench's csv"
elif ls "$tmp_dir"/ocellus-bench-image-*.ppm >/dev/null 2>&1; then
  fail compare_llama "the image files were left behind"
else
  pass compare_llama
fi
exit $failed
