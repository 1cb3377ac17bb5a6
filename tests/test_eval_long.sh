#!/bin/sh
# test_eval_long.sh: the long suite through the CLI. `ocellus scene --suite long` writes items with
# their grounding cells; `ocellus eval --suite long` runs items end to end (on the demo model: it
# was not trained on these items, so only the plumbing is checked, not accuracy) and writes the
# same numbers as JSON; bad options are refused with a message and status 2.
. tests/support/testlib.sh

if run_target ./ocellus scene --suite long -o "$tmp_dir/items" --items 2 >/dev/null &&
   [ "$(wc -l <"$tmp_dir/items/items.jsonl")" -eq 2 ] &&
   grep -q '"grid":[0-9]*,"grounding":\[\[' "$tmp_dir/items/items.jsonl"; then
  pass scene_long_jsonl
else
  fail scene_long_jsonl "ocellus scene --suite long did not write 2 items with grounding cells"
fi

# The runs through the model take 7.5 minutes under qemu (CI's aarch64 configuration, tests/run.sh's
# OC_TEST_SLOW=2): the native configurations run them; under an emulator only the scene writer and
# the option checks run (the model's kernels and parity are checked there by the C tests).
if [ "${OC_TEST_SLOW:-0}" = 2 ]; then
  skip eval_long_runs "under an emulator; the native configurations run it"
else
if run_target ./ocellus eval --suite long -m examples/demo/ocellus-demo.gguf --mmproj examples/demo/ocellus-demo-mmproj.gguf \
     --items 2 --max-images 8 --types detail,code -t 2 --verbose --json "$tmp_dir/r.json" >"$tmp_dir/out" 2>/dev/null &&
   grep -q '^overall  *[0-9]  *2 ' "$tmp_dir/out" && grep -q 'KV cache per item: .* at the end of prefill' "$tmp_dir/out" &&
   grep -q '"items":2,' "$tmp_dir/r.json" && grep -q '"list":{"correct":0,"total":0}' "$tmp_dir/r.json"; then
  pass eval_long_runs
else
  sed 's/^/# /' "$tmp_dir/out" | head -20
  fail eval_long_runs "ocellus eval --suite long did not report 2 items of the chosen types"
fi

# decode speed and the KV cache at both ends, as text and JSON (the table of issue 19's must-show 3
# comes from eval runs alone: examples/plans/measure_long.sh): one-token forward passes after
# prefill over their time (at least one per item: the pass that produces the stop token); the
# JSON's tok/s is decode_tokens / decode_ms, and the KV bytes are positive
if grep -Eq '^decode: [0-9.]+ tok/s \([1-9][0-9]* one-token passes' "$tmp_dir/out" &&
   grep -Eq '"mean_kv_bytes_prefill":[1-9][0-9]*,' "$tmp_dir/r.json" && grep -Eq '"mean_kv_bytes_end":[1-9][0-9]*,' "$tmp_dir/r.json" &&
   awk '{ if (!match($0, /"decode_tokens":[0-9]+/)) exit 1; n = substr($0, RSTART + 16, RLENGTH - 16) + 0
          if (!match($0, /"decode_ms":[0-9.]+/)) exit 1; ms = substr($0, RSTART + 12, RLENGTH - 12) + 0
          if (!match($0, /"decode_tok_per_s":[0-9.]+/)) exit 1; r = substr($0, RSTART + 19, RLENGTH - 19) + 0
          want = ms > 0 ? 1000 * n / ms : 0; d = r - want; if (d < 0) d = -d
          exit !(n >= 2 && d <= 0.01 + 1e-3 * want) }' "$tmp_dir/r.json"; then
  pass eval_long_decode_speed_and_kv
else
  grep -E '^decode|^KV' "$tmp_dir/out" | sed 's/^/# /'; sed 's/^/# /' "$tmp_dir/r.json"
  fail eval_long_decode_speed_and_kv "eval --suite long did not report decode tok/s and the KV cache at both ends"
fi

# --first I: items I.. of the same stream, so processes can split one evaluation: item 1 alone
# is the second line of the two-item run above (question, expected and generated answer)
E="./ocellus eval --suite long -m examples/demo/ocellus-demo.gguf --mmproj examples/demo/ocellus-demo-mmproj.gguf --max-images 8 --types detail,code -t 2 --verbose"
if run_target $E --first 1 --items 1 --json "$tmp_dir/f.json" >"$tmp_dir/one" 2>/dev/null &&
   [ -n "$(sed -n 2p "$tmp_dir/out")" ] && [ "$(sed -n 2p "$tmp_dir/out")" = "$(sed -n 1p "$tmp_dir/one")" ] &&
   grep -q '"first":1,' "$tmp_dir/f.json"; then
  pass eval_long_first
else
  sed 's/^/# /' "$tmp_dir/out" "$tmp_dir/one" | head -8
  fail eval_long_first "--first 1 --items 1 did not give the second item of the stream"
fi

# every method's plan runs on the long suite (issue 19: the long model's must-show 3 needs them):
# SparseMM, ZipVL and Q-Cache alone (written here for the demo's shape), BlindSight and MMInference
# (the example plans); each reports a KV cache and exits 0
head='ocellus-plan 1
shape decoder layers 6 heads 4 kv-heads 2 head-dim 64'
printf '%s\ndecoder layer all kv-budget 64 96\n' "$head" >"$tmp_dir/sparsemm.plan"
printf '%s\ndecoder layer all zipvl-tau 0.95\n' "$head" >"$tmp_dir/zipvl.plan"
printf '%s\ndecoder lazy-group 1-2 mode vla\ndecoder lazy-group 3-5 mode gla\n' "$head" >"$tmp_dir/qcache.plan"
# (on the scalar-only build, tests/run.sh's OC_TEST_SLOW=1, ZipVL's alone: it is the one that changes prefill)
plans="$tmp_dir/sparsemm.plan $tmp_dir/zipvl.plan $tmp_dir/qcache.plan examples/plans/demo-blindsight.plan
       examples/plans/demo-mminference.plan"
[ "${OC_TEST_SLOW:-0}" != 0 ] && plans="$tmp_dir/zipvl.plan"
for plan in $plans; do
  name=$(basename "$plan" .plan)
  if run_target ./ocellus eval --suite long -m examples/demo/ocellus-demo.gguf --mmproj examples/demo/ocellus-demo-mmproj.gguf \
       --items 1 --max-images 8 --types detail -t 2 --plan "$plan" >"$tmp_dir/out" 2>&1 &&
     grep -q '^overall  *[0-9]  *1 ' "$tmp_dir/out" && grep -q 'KV cache per item: .* at the end of prefill' "$tmp_dir/out"; then
    pass "eval_long_plan_$name"
  else
    sed 's/^/# /' "$tmp_dir/out" | tail -5
    fail "eval_long_plan_$name" "ocellus eval --suite long --plan $plan did not run"
  fi
  # ZipVL's prefill over its important set T counts the causal pairs it left out as skipped
  if [ "$name" = zipvl ]; then
    if grep -Eq 'decoder prefill [1-9][0-9.]*% of' "$tmp_dir/out"; then
      pass eval_long_zipvl_counts_skipped
    else
      sed 's/^/# /' "$tmp_dir/out" | tail -5
      fail eval_long_zipvl_counts_skipped "ZipVL's prefill reported no skipped decoder-prefill FLOPs"
    fi
  fi
done

# MMInference heads over the whole prompt in one prefill call (--prefill-chunk all), as calibrate sees them
if run_target ./ocellus eval --suite long -m examples/demo/ocellus-demo.gguf --mmproj examples/demo/ocellus-demo-mmproj.gguf \
     --items 1 --max-images 8 -t 2 --prefill-chunk all --plan examples/plans/demo-mminference.plan >"$tmp_dir/out" 2>/dev/null &&
   grep -Eq 'skipped [1-9][0-9.e+]* \(' "$tmp_dir/out"; then
  pass eval_long_prefill_chunk_all
else
  sed 's/^/# /' "$tmp_dir/out" | head -20
  fail eval_long_prefill_chunk_all "the long suite did not run a vertical-slash plan with the prompt in one call"
fi

# examples/plans/measure_long.sh: dense and a plan, each split over 2 processes with --first, merged
# into one table: the row's score is the sum of the processes' items, and a split run scores as one
# process does (the same items)
M="sh examples/plans/measure_long.sh -m examples/demo/ocellus-demo.gguf --mmproj examples/demo/ocellus-demo-mmproj.gguf
   --items 3 --max-images 8 --types detail,code -t 1"
if [ -n "$target_exec" ]; then
  skip measure_long_table "cross build: the script runs ./ocellus natively"
elif [ "${OC_TEST_SLOW:-0}" != 0 ]; then   # shell and eval plumbing only: nothing kernel-specific
  skip measure_long_table "scalar-only build (2.5 minutes there); the SIMD configurations run it"
elif $M --procs 2 --out "$tmp_dir/m2" "$tmp_dir/zipvl.plan" >"$tmp_dir/m2.md" 2>"$tmp_dir/m2.err" &&
     $M --procs 1 --no-dense "$tmp_dir/zipvl.plan" >"$tmp_dir/m1.md" 2>>"$tmp_dir/m2.err" &&
     [ -s "$tmp_dir/m2/dense.0.json" ] && [ -s "$tmp_dir/m2/dense.1.json" ] && ! [ -e "$tmp_dir/m2/dense.2.json" ] &&
     grep -Eq '^\| dense \| [0-3]/3 \| [0-3]/[0-3] \| ' "$tmp_dir/m2.md" &&
     grep -Eq '^\| zipvl \| [0-3]/3 \|.*\| [0-9.]+% \| [0-9.]+% \| [0-9.]+ MiB \([0-9.]+%\) \| [0-9.]+ \([0-9.]+x\) \| [0-9]+ ms \|$' "$tmp_dir/m2.md" &&
     [ "$(grep '^| zipvl' "$tmp_dir/m2.md" | cut -d'|' -f3-9)" = "$(grep '^| zipvl' "$tmp_dir/m1.md" | cut -d'|' -f3-9)" ]; then
  pass measure_long_table
else
  sed 's/^/# /' "$tmp_dir/m2.md" "$tmp_dir/m1.md" "$tmp_dir/m2.err" 2>/dev/null | tail -20
  fail measure_long_table "measure_long.sh did not merge two processes into the one-process table"
fi
fi
run_target ./ocellus eval --suite long -m x --mmproj y --prefill-chunk 0 >/dev/null 2>&1
rc=$?
if [ "$rc" -eq 2 ]; then pass eval_long_bad_prefill_chunk; else fail eval_long_bad_prefill_chunk "rc $rc"; fi
run_target ./ocellus eval --suite long -m x --mmproj y --types nosuch >/dev/null 2>"$tmp_dir/err"
rc=$?
if [ "$rc" -eq 2 ] && [ "$(wc -l <"$tmp_dir/err")" -eq 1 ]; then pass eval_long_bad_type; else fail eval_long_bad_type "rc $rc"; fi
run_target ./ocellus eval --suite long -m x --mmproj y --max-images 33 >/dev/null 2>&1
rc=$?
if [ "$rc" -eq 2 ]; then pass eval_long_bad_max_images; else fail eval_long_bad_max_images "rc $rc"; fi
exit $failed
