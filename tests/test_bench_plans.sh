#!/bin/sh
# test_bench_plans.sh: `ocellus bench plans` runs dense and each plan on the same long-suite items in
# one process (on the demo model: only the plumbing is checked, not speed) and reports, per plan,
# the phases' times, the ideal and achieved speedups and where the prefill time went: the attention
# calls, MMInference's index estimation (a plan with Vertical-Slash heads), SparseMM / ZipVL scoring
# and selection (a plan with KV budgets and ZipVL thresholds), as text and JSON. Bad options are
# refused with status 2.
. tests/support/testlib.sh

if [ "${OC_TEST_SLOW:-0}" = 2 ]; then
  skip bench_plans_runs "under an emulator; the native configurations run it"
else
B="./ocellus bench plans -m examples/demo/ocellus-demo.gguf --mmproj examples/demo/ocellus-demo-mmproj.gguf --items 1 --reps 2 --max-images 8 -t 2"
# shellcheck disable=SC2086  # B is a command line
if run_target $B --plan examples/plans/demo-mminference.plan --plan examples/plans/demo-calibrated-all.plan \
     --json "$tmp_dir/p.json" >"$tmp_dir/out" 2>"$tmp_dir/err" &&
   grep -q '^dense  *[0-9.]*%  *[0-9.]*ms  *1.00x  *1.00x  *1.00x  *1.00x' "$tmp_dir/out" &&
   grep -q '^demo-mminference ' "$tmp_dir/out" && grep -q '^demo-calibrated-all ' "$tmp_dir/out" &&
   grep -q '"items":1,"reps":2,' "$tmp_dir/p.json" && [ "$(grep -o '"plan":' "$tmp_dir/p.json" | wc -l)" -eq 3 ] &&
   grep -q '^decode: 32 greedy steps per item after its answer' "$tmp_dir/out" && grep -q '"decode_steps":32,' "$tmp_dir/p.json" &&
   [ "$(grep -o '"decode_cpu_speedup":1.0000,' "$tmp_dir/p.json" | wc -l)" -ge 1 ]; then
  pass bench_plans_runs
else
  sed 's/^/# /' "$tmp_dir/out" "$tmp_dir/err" | head -30
  fail bench_plans_runs "bench plans did not report dense and the two plans"
fi

# The breakdown: config k's value of a JSON key (k = 1 dense, 2 mminference, 3 all).
val() { tr '{' '\n' <"$tmp_dir/p.json" | grep '"plan":' | sed -n "${1}p" | sed "s/.*\"$2\":\([-0-9.e]*\).*/\1/"; }
if awk -v da="$(val 1 prefill_attn_ms)" -v de="$(val 1 prefill_estimate_ms)" -v ds="$(val 1 prefill_score_ms)" \
       -v me="$(val 2 prefill_estimate_ms)" -v ma="$(val 2 prefill_attn_ms)" \
       -v as="$(val 3 prefill_score_ms)" -v al="$(val 3 prefill_select_ms)" -v ap="$(val 3 prefill_ms)" \
       -v aa="$(val 3 prefill_attn_ms)" -v ki="$(val 2 prefill_flops_kept_share)" -v id="$(val 2 prefill_attn_ideal_speedup)" \
       'BEGIN { exit !(da > 0 && de == 0 && ds == 0 && me > 0 && me <= ma && as > 0 && al > 0 &&
                      aa + as + al <= ap && ki > 0 && ki < 1 && id > 1 && (id * ki - 1) * (id * ki - 1) < 1e-4) }'; then
  pass bench_plans_breakdown
else
  sed 's/^/# /' "$tmp_dir/p.json"
  fail bench_plans_breakdown "the estimation / scoring / selection times or the ideal speedup are not where the plans put them"
fi
fi

# --context: the language model alone at a long synthetic prompt (the tiny 2-layer test model: 4 heads,
# 2 kv heads of 16), dense and a plan of each method: MMInference's estimate shows, SparseMM holds its
# budget's share of the cache, BlindSight keeps part of the attention FLOPs.
T=tests/data/models/qwen2vl/text.gguf
printf 'ocellus-plan 2\nshape decoder layers 2 heads 4 kv-heads 2 head-dim 16\ndecoder default vertical-slash(vertical=30,slash=4)\n' >"$tmp_dir/vs.plan"
printf 'ocellus-plan 1\nshape decoder layers 2 heads 4 kv-heads 2 head-dim 16\nsink-fraction 0.1\ndecoder default intra-image+sink\n' >"$tmp_dir/bs.plan"
printf 'ocellus-plan 1\nshape decoder layers 2 heads 4 kv-heads 2 head-dim 16\nkv-window 32\ndecoder layer all kv-budget 102 102\n' >"$tmp_dir/kv.plan"
if run_target ./ocellus bench plans --context 1024,2048 -m "$T" --reps 2 -n 3 -t 2 --plan "$tmp_dir/vs.plan" \
     --plan "$tmp_dir/bs.plan" --plan "$tmp_dir/kv.plan" --json "$tmp_dir/c.json" >"$tmp_dir/cout" 2>"$tmp_dir/cerr" &&
   grep -q '^1024 prompt tokens (3 images of 256 tokens)' "$tmp_dir/cout" && grep -q '^2048 prompt tokens' "$tmp_dir/cout" &&
   grep -q '^| dense | [0-9.]* | 1.00x | 1.00x | 1.00x | 0.0% | 0.0% | 100.0% |' "$tmp_dir/cout" &&
   grep -q '^| dense | [0-9.]* | 1.00x | [0-9.]* | 1.00x |$' "$tmp_dir/cout" &&
   [ "$(grep -o '"plan":' "$tmp_dir/c.json" | wc -l)" -eq 8 ] &&
   [ "$(grep -o '"decode_cpu_speedup":' "$tmp_dir/c.json" | wc -l)" -eq 8 ]; then
  pass bench_plans_context_runs
else
  sed 's/^/# /' "$tmp_dir/cout" "$tmp_dir/cerr" | head -30
  fail bench_plans_context_runs "bench plans --context did not report dense and the three plans at both lengths"
fi
# row k of the JSON (1-4: 1024 tokens, dense, vs, bs, kv), key
cval() { tr '{' '\n' <"$tmp_dir/c.json" | grep '"plan":' | sed -n "${1}p" | sed "s/.*\"$2\":\([-0-9.e]*\).*/\1/"; }
if awk -v ve="$(cval 2 prefill_estimate_share)" -v de="$(cval 1 prefill_estimate_share)" \
       -v bk="$(cval 3 prefill_flops_kept_share)" -v ks="$(cval 4 kv_share_of_dense)" -v kd="$(cval 4 decode_flops_kept_share)" \
       -v ss="$(cval 4 prefill_score_select_share)" -v vk="$(cval 2 kv_share_of_dense)" \
       'BEGIN { exit !(ve > 0 && de == 0 && bk > 0 && bk < 1 && ks > 0.09 && ks < 0.15 && kd < 0.2 && ss > 0 && vk == 1) }'; then
  pass bench_plans_context_breakdown
else
  sed 's/^/# /' "$tmp_dir/c.json"
  fail bench_plans_context_breakdown "the estimate, kept FLOPs or KV shares are not where the plans put them"
fi
if run_target ./ocellus bench plans --context 12 -m "$T" >/dev/null 2>"$tmp_dir/e3"; then rc3=0; else rc3=$?; fi
if run_target ./ocellus bench plans --context 1024 >/dev/null 2>"$tmp_dir/e4"; then rc4=0; else rc4=$?; fi
if run_target ./ocellus bench plans -n 4 >/dev/null 2>"$tmp_dir/e5"; then rc5=0; else rc5=$?; fi
if [ "$rc3" -eq 2 ] && grep -q "bad --context list '12'" "$tmp_dir/e3" && [ "$rc4" -eq 2 ] &&
   grep -q -- '--context needs -m' "$tmp_dir/e4" && [ "$rc5" -eq 2 ] && grep -q -- '-n (decode steps) needs --context' "$tmp_dir/e5"; then
  pass bench_plans_context_bad_options
else
  fail bench_plans_context_bad_options "bad --context uses were not refused with status 2 and a message ($rc3, $rc4, $rc5)"
fi

if run_target ./ocellus bench plans --reps 0 >/dev/null 2>"$tmp_dir/e1"; then rc1=0; else rc1=$?; fi
if run_target ./ocellus bench plans --plan >/dev/null 2>"$tmp_dir/e2"; then rc2=0; else rc2=$?; fi
if run_target ./ocellus bench plans --decode-steps 129 >/dev/null 2>"$tmp_dir/e6"; then rc6=0; else rc6=$?; fi
if run_target ./ocellus bench plans --decode-steps 4 --context 1024 -m "$T" >/dev/null 2>"$tmp_dir/e7"; then rc7=0; else rc7=$?; fi
if [ "$rc1" -eq 2 ] && grep -q 'bad option or value: --reps 0' "$tmp_dir/e1" && [ "$rc2" -eq 2 ] &&
   grep -q 'needs a value' "$tmp_dir/e2" && [ "$rc6" -eq 2 ] && grep -q 'bad option or value: --decode-steps 129' "$tmp_dir/e6" &&
   [ "$rc7" -eq 2 ] && grep -q -- '--decode-steps is for the suite' "$tmp_dir/e7"; then
  pass bench_plans_bad_options
else
  fail bench_plans_bad_options "bad options were not refused with status 2 and a message ($rc1, $rc2, $rc6, $rc7)"
fi
exit $failed
