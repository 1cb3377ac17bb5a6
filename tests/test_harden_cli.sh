#!/bin/sh
# test_harden_cli.sh: what the tools' inputs and outputs did with hostile files and paths (issue 40,
# second hardening round). Each case failed on the code before its fix:
#  - calibrate --data decoded a folder's images at full size, outside the limits `ask` applies
#    (a PNG bomb: peak RSS far above the printed memory; a progressive JPEG: its whole coefficient
#    buffer); now oc_ask decodes them within the context, and the run prints its peak RSS;
#  - calibrate --data with items.jsonl a FIFO, and convert with model.safetensors.index.json a FIFO,
#    hung in fopen;
#  - eval --json / calibrate -o / plan -o to a path that cannot be written failed after the run;
#  - an unknown image format printed the file's first bytes (through a symlink: a file the user
#    could not read);
#  - options that did nothing exited 0: bench attention --only zz, plan --kv-budget without -o,
#    bench vlm --type outside --synth (and the same kind: scene --side with --suite long, calibrate
#    --seed with --data, --device without an OpenCL backend).
# The bombs are written at run time by test_harden --write-bomb (libpng/libjpeg), never committed.
# `timeout` turns a hang into a failure.
. tests/support/testlib.sh
# shellcheck disable=SC2086  # $demo, $cal and $target_exec are word lists on purpose
bin=${OC_CLI_BIN:-./ocellus}
[ -x "$bin" ] || { skip harden_cli "no ./ocellus"; exit 0; }
writer=build/tests/test_harden
demo="-m examples/demo/ocellus-demo.gguf --mmproj examples/demo/ocellus-demo-mmproj.gguf"
emu=0; [ "${OC_TEST_SLOW:-0}" = 2 ] && emu=1
limit=60; [ $emu = 1 ] && limit=300   # an emulator runs each command 10-50x slower

# expect NAME RC_WANTED PATTERN CMD...: the command exits with RC_WANTED (or any non-zero for "nz")
# within $limit s and its output holds PATTERN
expect() {
  name=$1; want=$2; pat=$3; shift 3
  out=$(timeout $limit $target_exec "$@" 2>&1 </dev/null); rc=$?
  if [ "$rc" -eq 124 ]; then fail "$name" "$* did not finish in $limit s"; return; fi
  if { [ "$want" = nz ] && [ "$rc" -ne 0 ]; } || [ "$rc" = "$want" ]; then
    if printf '%s\n' "$out" | grep -q -- "$pat"; then pass "$name"; return; fi
  fi
  fail "$name" "$*: exit status $rc, output: $(printf '%s' "$out" | tail -n 2 | head -c 300)"
}

# ---- finding 2: calibrate --data decodes within ask's limits ----
# one item of one image; --side 1008 sizes the context for the 1280 tokens an image may take
mkdir -p "$tmp_dir/d"
printf '{"images":["a.png"],"question":"What color is the square?","answer":"red"}\n' > "$tmp_dir/d/items.jsonl"
cal="calibrate $demo --data $tmp_dir/d --items 1 --max-images 1 --side 1008 --methods blindsight -t 2 -o $tmp_dir/d.plan"
if [ $emu = 1 ]; then
  skip calibrate_data_png_bomb "under an emulator; the native configurations run it"
else
  run_target $writer --write-bomb png "$tmp_dir/d/a.png" 8192 8192; wrc=$?
  if [ $wrc -eq 77 ]; then skip calibrate_data_png_bomb "built without libpng"
  else
    # shellcheck disable=SC2086
    out=$(timeout 300 $target_exec $bin $cal 2>&1); rc=$?
    line=$(printf '%s\n' "$out" | grep 'peak RSS')
    peak=$(printf '%s\n' "$line" | sed -n 's/.*peak RSS \([0-9.]*\) MiB.*/\1/p')
    stated=$(printf '%s\n' "$line" | sed -n 's/.*stated: \([0-9.]*\) MiB.*/\1/p')
    printf '# 8192x8192 PNG in a --data folder: %s\n' "$line"
    if [ "$rc" -eq 0 ] && [ -n "$peak" ] && awk "BEGIN { exit !($peak <= $stated) }"; then
      pass calibrate_data_png_bomb
    else
      fail calibrate_data_png_bomb "exit status $rc, peak '$peak' MiB, stated '$stated' MiB: $(printf '%s' "$out" | tail -n 1)"
    fi
  fi
fi
if [ $emu = 1 ]; then
  skip calibrate_data_progressive_jpeg "under an emulator; the native configurations run it"
else
  run_target $writer --write-bomb progressive "$tmp_dir/d/a.png" 6144 6144; wrc=$?
  if [ $wrc -eq 77 ]; then skip calibrate_data_progressive_jpeg "built without libjpeg"
  else
    # shellcheck disable=SC2086
    expect calibrate_data_progressive_jpeg 1 "progressive 6144x6144 image keeps" $bin $cal
  fi
fi

# ---- finding 3: FIFOs are refused, never waited on ----
mkdir -p "$tmp_dir/f" "$tmp_dir/hf"
if mkfifo "$tmp_dir/f/items.jsonl" "$tmp_dir/hf/model.safetensors.index.json" 2>/dev/null; then
  for f in config.json tokenizer_config.json preprocessor_config.json; do   # a checkpoint up to its weights
    cp "tests/data/models/qwen2vl/hf/$f" "$tmp_dir/hf/" 2>/dev/null
  done
  expect calibrate_data_fifo 1 "not a regular file" \
    $bin calibrate $demo --data "$tmp_dir/f" --items 1 -t 1 -o "$tmp_dir/f.plan"
  expect convert_index_fifo nz "model.safetensors: cannot open" $bin convert "$tmp_dir/hf" -o "$tmp_dir/hf/out"
else
  skip calibrate_data_fifo "mkfifo failed"
  skip convert_index_fifo "mkfifo failed"
fi

# ---- finding 6: outputs checked before the run ----
expect eval_json_unwritable 1 "--json /proc/nope/x.json: cannot write" \
  $bin eval --suite long $demo --items 1 --json /proc/nope/x.json
expect calibrate_out_unwritable 1 "-o /proc/nope/x.plan: cannot write" \
  $bin calibrate --suite demo --items 1 -o /proc/nope/x.plan
expect calibrate_report_unwritable 1 "--report /proc/nope/r.txt: cannot write" \
  $bin calibrate --suite demo --items 1 -o "$tmp_dir/ok.plan" --report /proc/nope/r.txt
expect ask_dump_unwritable 1 "--dump-logits /proc/nope/l.bin: cannot write" \
  $bin ask $demo --dump-logits /proc/nope/l.bin "hi"
[ -e "$tmp_dir/ok.plan" ] && fail calibrate_out_not_created "the check left $tmp_dir/ok.plan behind"

# ---- finding 9: an unknown format names the file and the formats, never its bytes ----
printf 'root:x:0:0:root:/root:/bin/sh\n' > "$tmp_dir/secret"
ln -s "$tmp_dir/secret" "$tmp_dir/link.png"
out=$(timeout $limit $target_exec $bin ask $demo -i "$tmp_dir/link.png" "What is in image 1?" 2>&1); rc=$?
if [ "$rc" -ne 0 ] && printf '%s\n' "$out" | grep -q "link.png: image: not an image file of a known format (expected PNM, JPEG or PNG)" &&
   ! printf '%s\n' "$out" | grep -q -e '72 6f' -e 'root:'; then
  pass unknown_format_no_bytes
else
  fail unknown_format_no_bytes "exit status $rc: $(printf '%s' "$out" | tail -n 1)"
fi

# ---- findings 4 and 8 through the CLI ----
expect ask_image_ref_without_image 1 "refers to image 1, but no image was given" $bin ask $demo "What color is image 1?"
expect ask_context_clamped_warns 0 "above the model's context length: using 4096" $bin ask $demo -c 100000 -n 1 "hi"

# ---- finding 7: options that did nothing ----
expect bench_attention_only_bad 2 "--only wants letters" $bin bench attention --only zz
expect plan_kv_budget_without_out 2 "--kv-budget needs -o" $bin plan examples/plans/demo-calibrated-all.plan --kv-budget 100
expect plan_out_without_kv_budget 2 "give --kv-budget" $bin plan examples/plans/demo-calibrated-all.plan -o "$tmp_dir/p.plan"
expect bench_vlm_type_without_synth 2 "--type does nothing without --synth" $bin bench vlm $demo --type q2
expect scene_side_with_long_suite 2 "--side does nothing with --suite long" $bin scene --suite long --side 112 -o "$tmp_dir/sc"
expect calibrate_seed_with_data 2 "--seed does nothing with --data" $bin calibrate --data "$tmp_dir/d" --seed 3 -o "$tmp_dir/x.plan"
expect ask_device_without_opencl 2 "--device picks an OpenCL device" $bin ask $demo --device 0 "hi"
# finding 8: a kv budget too large is said in the option's terms
expect plan_kv_budget_too_large 1 "--kv-budget 16777216 gives some kv head more than" \
  $bin plan examples/plans/demo-calibrated-all.plan --kv-budget 16777216 -o "$tmp_dir/p.plan"
exit $failed
