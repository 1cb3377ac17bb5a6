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
   grep -q '"items":1,"reps":2,' "$tmp_dir/p.json" && [ "$(grep -o '"plan":' "$tmp_dir/p.json" | wc -l)" -eq 3 ]; then
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

if run_target ./ocellus bench plans --reps 0 >/dev/null 2>"$tmp_dir/e1"; then rc1=0; else rc1=$?; fi
if run_target ./ocellus bench plans --plan >/dev/null 2>"$tmp_dir/e2"; then rc2=0; else rc2=$?; fi
if [ "$rc1" -eq 2 ] && grep -q 'bad option or value: --reps 0' "$tmp_dir/e1" && [ "$rc2" -eq 2 ] &&
   grep -q 'needs a value' "$tmp_dir/e2"; then
  pass bench_plans_bad_options
else
  fail bench_plans_bad_options "bad options were not refused with status 2 and a message ($rc1, $rc2)"
fi
exit $failed
