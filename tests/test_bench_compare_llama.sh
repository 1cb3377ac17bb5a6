#!/bin/sh
# test_bench_compare_llama.sh: `ocellus bench vlm --compare-llama DIR` parses llama.cpp's output and
# prints a ratio only where both programs did the same work. llama.cpp is not here, so DIR holds two
# stand-in scripts that print what llama-mtmd-cli (-lv 4) and llama-bench -o csv print (timing lines in
# the formats of llama.cpp's tools as of 2026-11, numbers made up for the test and never reported
# anywhere else); the bench must put those numbers next to its own, with the ratios.
# The stand-ins act as the real tools do where the bench's honesty depends on it:
#  - llama-mtmd-cli counts the images' tokens from the PPM sizes (Qwen2-VL: one per 28x28), but only
#    where -p holds one <__media__> line per image; without markers it merges image pairs into video
#    frames (half the tokens), as the real CLI does for Qwen2-VL. Its prompt tokens are the image tokens
#    plus PROMPT_TEXT (ocellus's own count for one image, less the image tokens) plus, per further
#    image, its vision_start / vision_end and its marker line's newline. As the CLI of 2026-08 does, it
#    formats with plain ChatML: no system message unless -sys gives one (Qwen2-VL's default, 11 tokens,
#    is in ocellus's prompt), and with -sys one newline more (the next message starts with its own).
#  - llama-bench prints an n_depth column and honours -d; LLAMA_FORMAT=old: an older llama-bench
#    without -d (fails on it, no n_depth column), and an older CLI that logs each slice's encode and
#    whose prompt eval time leaves the encodes out.
#  - LLAMA_BUSY=1 (the new format's run): llama-bench's tg run leaves a busy loop running beside it for
#    two seconds, in a process that is not its child (as another user's job would be): that row must be
#    marked busy.
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
n=0; lv=0; prev=; prompt=; sys=
for a in "$@"; do
  [ "$a" = --image ] && n=$((n + 1))
  [ "$prev" = -lv ] && lv=$a
  [ "$prev" = -p ] && prompt=$a
  [ "$prev" = -sys ] && sys=$a
  prev=$a
done
for f in ocellus-bench-image-*.ppm; do [ -f "$f" ] || { echo "no image file" >&2; exit 1; }; done
# one marker per image, each alone on its line, and no marker elsewhere
lines=$(printf '%s\n' "$prompt" | grep -c '^<__media__>$')
all=$(printf '%s\n' "$prompt" | grep -o '<__media__>' | wc -l)
if [ "$LLAMA_MERGE" != 1 ] && [ "$lines" -eq "$n" ] && [ "$all" -eq "$n" ]; then merge=1; else merge=2; fi
img_tok=0; i=0
while [ $i -lt $n ]; do
  px=$(sed -n 2p ocellus-bench-image-$i.ppm | cut -d' ' -f1)
  img_tok=$((img_tok + (px / 28) * (px / 28) / merge))
  i=$((i + 1))
done
i=0; while [ $i -lt $n ]; do
  if [ "$LLAMA_FORMAT" = old ]; then
    echo "encoding image slice..."; echo "image slice encoded in 1000 ms"
  else
    echo "0.01.000.000 I encoding mtmd batch, n_chunks = 1 (done = 1, total = 3)"
    echo "0.02.000.000 I mtmd batch encoding done in 1000 ms"
  fi
  echo "decoding image batch 1/1, n_tokens_batch = $((img_tok / n))"; echo "image decoded (batch 1/1) in 500 ms"
  i=$((i + 1)); done
[ "$lv" -ge 4 ] || exit 0   # libllama's INFO lines (llama_perf) only show at verbosity 4
if [ "$LLAMA_FORMAT" = old ]; then t=2000.00; else t=$((2000 + 1000 * n)).00; fi
tok=$((${PROMPT_TEXT:-40} + img_tok + 3 * (n - 1)))   # each image's vision_start/end, each marker line's newline
if [ "$sys" = "You are a helpful assistant." ]; then tok=$((tok + 1)); else tok=$((tok - 11)); fi
echo "0.05.000.000 I llama_perf_context_print: prompt eval time =    $t ms /   $tok tokens (    6.67 ms per token,   150.00 tokens per second)"
echo "0.05.000.000 I llama_perf_context_print:        eval time =     100.00 ms /     1 runs   (  100.00 ms per token,    10.00 tokens per second)"
EOS
cat >"$dir/llama-bench" <<'EOS'
#!/bin/sh
p=; g=; d=; prev=
for a in "$@"; do
  case $prev in -p) p=$a ;; -n) g=$a ;; -d) d=$a ;; esac
  prev=$a
done
if [ "$LLAMA_FORMAT" = old ]; then
  [ -n "$d" ] && { echo "error: invalid parameter for argument: -d" >&2; exit 1; }
  echo 'build_commit,build_number,cpu_info,model_filename,n_threads,n_prompt,n_gen,test_time,avg_ns,stddev_ns,avg_ts,stddev_ts'
  [ "$p" -gt 0 ] && echo "\"abc\",\"1\",\"Some CPU, 2 cores\",\"m.gguf\",\"2\",\"$p\",\"0\",\"2026\",\"1\",\"0\",\"64.500000\",\"0.1\""
  [ "$g" -gt 0 ] && echo "\"abc\",\"1\",\"Some CPU, 2 cores\",\"m.gguf\",\"2\",\"0\",\"$g\",\"2026\",\"1\",\"0\",\"13.000000\",\"0.1\""
  exit 0
fi
if [ "$LLAMA_BUSY" = 1 ] && [ -n "$d" ]; then   # a busy loop that is not our child: other load
  ( sh -c 'while :; do :; done' & echo $! >busy.pid )
  sleep 2
  kill "$(cat busy.pid)"; rm -f busy.pid
fi
echo 'build_commit,build_number,cpu_info,model_filename,n_threads,n_prompt,n_gen,n_depth,test_time,avg_ns,stddev_ns,avg_ts,stddev_ts'
[ "$p" -gt 0 ] && echo "\"abc\",\"1\",\"Some CPU, 2 cores\",\"m.gguf\",\"2\",\"$p\",\"0\",\"${d:-0}\",\"2026\",\"1\",\"0\",\"64.500000\",\"0.1\""
[ "$g" -gt 0 ] && echo "\"abc\",\"1\",\"Some CPU, 2 cores\",\"m.gguf\",\"2\",\"0\",\"$g\",\"${d:-0}\",\"2026\",\"1\",\"0\",\"12.250000\",\"0.1\""
exit 0
EOS
chmod +x "$dir/llama-mtmd-cli" "$dir/llama-bench"

demo="$PWD/examples/demo"
bench() {   # bench ARGS...: the demo model's bench vlm with -n 3 (2 decode steps) from $tmp_dir
  (cd "$tmp_dir" && run_target "$OLDPWD/ocellus" bench vlm -m "$demo/ocellus-demo.gguf" \
     --mmproj "$demo/ocellus-demo-mmproj.gguf" -n 3 -t 1 "$@" 2>&1)
}
# ocellus's own prompt for one 448x448 image: PROMPT_TEXT = its tokens less the 256 image tokens
out=$(bench --images 1 --pp 0); rc=$?
ptok=$(printf '%s\n' "$out" | sed -n 's/^| 1 image 448x448 | 1 (256 tok) | \([0-9]*\) |.*/\1/p')
if [ $rc -ne 0 ] || [ -z "$ptok" ]; then
  fail compare_llama "bench vlm without llama.cpp: rc $rc, no prompt token count"
  exit 1
fi
export PROMPT_TEXT=$((ptok - 256))

row='^| ocellus-demo.gguf | '
ratio='[^|]* | [^|]* |'   # the ratio cell, then the other-load cell and llama.cpp's cpu
for format in new old; do
  busy=0; [ $format = new ] && busy=1   # the new llama-bench's tg run also checks the busy mark
  out=$(LLAMA_FORMAT=$format LLAMA_BUSY=$busy bench --images 1,2@56 --pp 64 --compare-llama "$dir"); rc=$?
  printf '%s\n' "$out" | grep '^| ocellus-demo' | sed "s/^/# $format: /"
  [ $format = new ] && busy_out=$out
  if [ $rc -ne 0 ]; then fail compare_llama_$format "bench vlm exited with $rc"
  elif ! printf '%s\n' "$out" | grep -q "${row}1 image 448x448 | vision encode (256 tok) | 1000 ms | [0-9]* ms | time [0-9.]*$ratio"; then
    fail compare_llama_$format "no vision row with llama.cpp's 1000 ms and a ratio (same 256 image tokens)"
  elif ! printf '%s\n' "$out" | grep -q "${row}2 images 56x56 | vision encode (8 tok) | 2000 ms | [0-9]* ms | time [0-9.]*$ratio"; then
    fail compare_llama_$format "no vision row for the 2 images of 56x56 (2 x 1000 ms, 2 x 4 tokens)"
  elif ! printf '%s\n' "$out" | grep -q "${row}1 image 448x448 | time to first token (llama.cpp $((ptok + 1)) tok, ocellus $ptok) | 3000 ms | [0-9]* ms | time [0-9.]*$ratio"; then
    fail compare_llama_$format "no time-to-first-token row with a ratio (1000 ms encode + 2000 ms of text model, the same prompt with the system message, one newline more)"
  elif ! printf '%s\n' "$out" | grep -q "${row}2 images 56x56 | time to first token (llama.cpp [0-9]* tok, ocellus [0-9]*) | 4000 ms | [0-9]* ms | time [0-9.]*$ratio"; then
    fail compare_llama_$format "no time-to-first-token row for 2 images (2000 ms encode + 2000 ms), ratio kept for one newline more"
  elif ! printf '%s\n' "$out" | grep -q "${row}1 image 448x448 | prefill after the encode (llama.cpp $((ptok + 1)) tok, ocellus $ptok) | $(awk "BEGIN { printf \"%.1f\", ($ptok + 1) / 2 }") tok/s | [0-9.]* tok/s | speed [0-9.]*$ratio"; then
    fail compare_llama_$format "no prefill row ($ptok + 1 tokens in 2000 ms) with its ratio"
  elif ! printf '%s\n' "$out" | grep -q "${row}1 image 448x448 | decode (llama.cpp 1 tok, ocellus 2) | 10.00 tok/s |"; then
    fail compare_llama_$format "no decode row from llama_perf's eval time"
  elif ! printf '%s\n' "$out" | grep -q "${row}text pp64 | prefill (llama-bench pp64; ocellus 64 tok) | 64.5 tok/s | [0-9.]* tok/s | speed [0-9.]*$ratio"; then
    fail compare_llama_$format "no pp row from llama-bench's csv (quoted fields with commas)"
  elif [ $format = new ] && ! printf '%s\n' "$out" | grep -q "${row}text pp64 | decode after 64 tok (llama-bench tg2 -d 64; ocellus 2 tok) | 12.25 tok/s | [0-9.]* tok/s | speed [0-9.]*$ratio"; then
    fail compare_llama_$format "no tg row after the same 64 tokens of context (llama-bench -d), with its ratio"
  elif [ $format = old ] && ! printf '%s\n' "$out" | grep -q "${row}text pp64 | decode: llama.cpp from an empty context (llama-bench tg2, no -d), ocellus after 64 tok | 13.00 tok/s | [0-9.]* tok/s | none: llama.cpp's context was empty"; then
    fail compare_llama_$format "a llama-bench without -d: its tg from an empty context must be labelled so, with no ratio"
  elif ls "$tmp_dir"/ocellus-bench-image-*.ppm >/dev/null 2>&1; then
    fail compare_llama_$format "the image files were left behind"
  else
    pass compare_llama_$format
  fi
done

# Token counts that differ give no ratio: a CLI that merges the images (LLAMA_MERGE=1: as if it had
# seen no marker lines) encodes half the tokens; a prompt 5 tokens longer than ocellus's (6 with the
# -sys newline).
out=$(LLAMA_MERGE=1 bench --images 2 --pp 0 --compare-llama "$dir"); rc=$?
printf '%s\n' "$out" | grep '^| ocellus-demo' | sed "s/^/# merged: /"
if [ $rc -ne 0 ]; then fail compare_llama_token_mismatch "bench vlm exited with $rc"
elif ! printf '%s\n' "$out" | grep -q "${row}2 images 448x448 | vision encode (llama.cpp 256 tok, ocellus 512) | 2000 ms | [0-9]* ms | none: image tokens 256 vs 512"; then
  fail compare_llama_token_mismatch "the vision row of 256 against 512 image tokens printed a ratio or no reason"
elif printf '%s\n' "$out" | grep "${row}2 images" | grep -q "| time [0-9]\|| speed [0-9]"; then
  fail compare_llama_token_mismatch "a row of the mismatched case printed a ratio"
else
  out=$(PROMPT_TEXT=$((PROMPT_TEXT + 5)) bench --images 1 --pp 0 --compare-llama "$dir"); rc=$?
  printf '%s\n' "$out" | grep '^| ocellus-demo' | sed "s/^/# longer prompt: /"
  if [ $rc -ne 0 ]; then fail compare_llama_token_mismatch "bench vlm exited with $rc (longer prompt)"
  elif ! printf '%s\n' "$out" | grep -q "${row}1 image 448x448 | vision encode (256 tok) | 1000 ms | [0-9]* ms | time [0-9.]*"; then
    fail compare_llama_token_mismatch "the vision row lost its ratio though the image tokens agree"
  elif ! printf '%s\n' "$out" | grep -q "${row}1 image 448x448 | time to first token (llama.cpp $((ptok + 6)) tok, ocellus $ptok) | 3000 ms | [0-9]* ms | none: prompt tokens $((ptok + 6)) vs $ptok"; then
    fail compare_llama_token_mismatch "the time to first token of prompts 5 tokens apart printed a ratio or no reason"
  else
    pass compare_llama_token_mismatch
  fi
fi

# Other load: where the OS reports it (/proc/stat), the row whose llama.cpp run had a busy loop beside
# it (the new format's tg run above) is marked busy.
if [ -r /proc/stat ]; then
  if ! printf '%s\n' "$busy_out" | grep -q "${row}text pp64 | decode after .*, busy | [^|]* / [0-9.]*% \*\*busy\*\* |"; then
    fail compare_llama_busy "the decode row run beside a busy loop is not marked busy"
  else
    pass compare_llama_busy
  fi
else
  skip compare_llama_busy "no /proc/stat: other load is not measured here"
fi
exit $failed
