#!/bin/sh
# test_bench_compare_llama.sh: `ocellus bench vlm --compare-llama DIR` parses llama.cpp's output.
# llama.cpp is not here, so DIR holds two stand-in scripts that print what llama-mtmd-cli (-lv 4) and
# llama-bench -o csv print (timing lines in the formats of llama.cpp's tools as of 2026-11, numbers
# made up for the test and never reported anywhere else); the bench must put those numbers next to
# its own, with the ratios. LLAMA_FORMAT=old: an older CLI that logs each slice's encode and whose
# prompt eval time leaves the encodes out.
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
n=0; lv=0; prev=
for a in "$@"; do
  [ "$a" = --image ] && n=$((n + 1))
  [ "$prev" = -lv ] && lv=$a
  prev=$a
done
for f in ocellus-bench-image-*.ppm; do [ -f "$f" ] || { echo "no image file" >&2; exit 1; }; done
i=0; while [ $i -lt $n ]; do
  if [ "$LLAMA_FORMAT" = old ]; then
    echo "encoding image slice..."; echo "image slice encoded in 1000 ms"
  else
    echo "0.01.000.000 I encoding mtmd batch, n_chunks = 1 (done = 1, total = 3)"
    echo "0.02.000.000 I mtmd batch encoding done in 1000 ms"
  fi
  echo "decoding image batch 1/1, n_tokens_batch = 64"; echo "image decoded (batch 1/1) in 500 ms"
  i=$((i + 1)); done
[ "$lv" -ge 4 ] || exit 0   # libllama's INFO lines (llama_perf) only show at verbosity 4
if [ "$LLAMA_FORMAT" = old ]; then t=2000.00; else t=$((2000 + 1000 * n)).00; fi
echo "0.05.000.000 I llama_perf_context_print: prompt eval time =    $t ms /   300 tokens (    6.67 ms per token,   150.00 tokens per second)"
echo "0.05.000.000 I llama_perf_context_print:        eval time =     100.00 ms /     1 runs   (  100.00 ms per token,    10.00 tokens per second)"
EOS
cat >"$dir/llama-bench" <<'EOS'
#!/bin/sh
echo 'build_commit,build_number,cpu_info,model_filename,n_threads,n_prompt,n_gen,test_time,avg_ns,stddev_ns,avg_ts,stddev_ts'
echo '"abc","1","Some CPU, 2 cores","m.gguf","2","64","0","2026","1","0","64.500000","0.1"'
echo '"abc","1","Some CPU, 2 cores","m.gguf","2","0","128","2026","1","0","12.250000","0.1"'
EOS
chmod +x "$dir/llama-mtmd-cli" "$dir/llama-bench"

demo="$PWD/examples/demo"
for format in new old; do
  out=$(cd "$tmp_dir" && LLAMA_FORMAT=$format run_target "$OLDPWD/ocellus" bench vlm -m "$demo/ocellus-demo.gguf" \
        --mmproj "$demo/ocellus-demo-mmproj.gguf" --images 1,2@56 --pp 64 -n 2 -t 1 --compare-llama "$dir" 2>&1); rc=$?
  printf '%s\n' "$out" | grep '^| ocellus-demo' | sed "s/^/# $format: /"
  row='^| ocellus-demo.gguf | '
  if [ $rc -ne 0 ]; then fail compare_llama_$format "bench vlm exited with $rc"
  elif ! printf '%s\n' "$out" | grep -q "${row}1 image 448x448 | vision encode ([^|]*) | 1000 ms | [0-9]* ms | time [0-9.]* | "; then
    fail compare_llama_$format "no vision row with llama.cpp's 1000 ms"
  elif ! printf '%s\n' "$out" | grep -q "${row}2 images 56x56 | vision encode ([^|]*) | 2000 ms | "; then
    fail compare_llama_$format "no vision row for the 2 images of 56x56 (2 x 1000 ms)"
  elif ! printf '%s\n' "$out" | grep -q "${row}1 image 448x448 | time to first token | 3000 ms |"; then
    fail compare_llama_$format "no time-to-first-token row (1000 ms encode + 2000 ms of text model)"
  elif ! printf '%s\n' "$out" | grep -q "${row}2 images 56x56 | time to first token | 4000 ms |"; then
    fail compare_llama_$format "no time-to-first-token row for 2 images (2000 ms encode + 2000 ms)"
  elif ! printf '%s\n' "$out" | grep -q "${row}1 image 448x448 | prefill after the encode | 150.0 tok/s |"; then
    fail compare_llama_$format "no prefill row (300 tokens in 2000 ms)"
  elif ! printf '%s\n' "$out" | grep -q "${row}1 image 448x448 | decode | 10.00 tok/s |"; then
    fail compare_llama_$format "no decode row from llama_perf's eval time"
  elif ! printf '%s\n' "$out" | grep -q "${row}text pp64 | prefill (llama-bench pp64) | 64.5 tok/s | .* | speed [0-9.]* | "; then
    fail compare_llama_$format "no pp row from llama-bench's csv (quoted fields with commas)"
  elif ! printf '%s\n' "$out" | grep -q "${row}text pp64 | decode (llama-bench tg128) | 12.25 tok/s |"; then
    fail compare_llama_$format "no tg row from llama-bench's csv"
  elif ls "$tmp_dir"/ocellus-bench-image-*.ppm >/dev/null 2>&1; then
    fail compare_llama_$format "the image files were left behind"
  else
    pass compare_llama_$format
  fi
done
exit $failed
