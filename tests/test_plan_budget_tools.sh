#!/bin/sh
# test_plan_budget_tools.sh: the long model's budgeted search tools (examples/plans/budget/) on
# synthetic eval logs, no model run: pair.py counts eval's "(wrong)" marks (not the raw strings: a
# code answered in lower case is right), pick.py takes per family the most aggressive candidate
# within the budget (at most one answer fewer than dense, margin within 1%), search.py's merge turns
# ZipVL's Alg. 1 lines into "prefill heads" when head patterns join, and frontier.py draws every
# candidate with the chosen ones ringed.
. tests/support/testlib.sh

if ! command -v python3 >/dev/null 2>&1; then
  skip plan_budget_tools "no python3"
else
d="$tmp_dir/val"
mkdir -p "$d"
# log CONFIG RIGHT...: one item line per answer (1 right, 0 wrong: eval's mark), ids 0..
log() {
  c=$1; shift
  i=0
  for r in "$@"; do
    if [ "$r" = 1 ]; then g='12x'; else g='13x  (wrong)'; fi
    printf '  %3d count_all   8 x 224 px How many? | expected 12X | got %s | margin %s\n' "$i" "$g" 5.000 >> "$d/$c.f0.log"
    i=$((i + 1))
  done
}
# json CONFIG KEPT SKIPPED KV_BYTES: the slice's eval --json fields the tools read
json() {
  printf '{"items":10,"prefill_attn_flops_kept":%s,"prefill_attn_flops_skipped":%s,"mean_kv_bytes_end":%s}\n' \
    "$2" "$3" "$4" > "$d/$1.f0.json"
}
log dense 1 1 1 1 1 1 1 1 0 1;     json dense 100 0 1000
log mminf-b 1 1 1 1 1 0 0 1 0 1;   json mminf-b 50 50 1000
log mminf-a 1 1 1 1 1 1 0 1 0 1;   json mminf-a 55 45 1000
log smm-500 0 0 1 1 1 1 1 1 0 1;   json smm-500 100 0 100
log smm-700 0 1 1 1 1 1 1 1 0 1;   json smm-700 100 0 150
log zipvl-mix 1 1 1 1 1 1 1 1 0 1; json zipvl-mix 88 12 900
out=$(python3 examples/plans/budget/pick.py "$d" 2>"$tmp_dir/err")
if [ "$(python3 examples/plans/ablation/pair.py "$d" | grep '^| dense ' | cut -d'|' -f4 | tr -d ' ')" = 9 ] &&
   echo "$out" | grep -qx 'mminference mminf-a' && echo "$out" | grep -qx 'sparsemm smm-700' &&
   echo "$out" | grep -qx 'zipvl zipvl-mix'; then
  pass plan_budget_pick
else
  printf '%s\n' "$out" | sed 's/^/# /'; sed 's/^/# /' "$tmp_dir/err"
  fail plan_budget_pick "pair.py / pick.py did not pick mminf-a, smm-700 and zipvl-mix"
fi

p="$tmp_dir/plans"
mkdir -p "$p"
h='ocellus-plan 4
shape decoder layers 12 heads 8 kv-heads 2 head-dim 64
sink-fraction 0.1
kv-window 32
decoder default dense'
printf '%s\ndecoder layer 2 heads 0-1 sink\n' "$h" > "$p/bs.plan"
printf '%s\ndecoder layer 2 zipvl-tau 0.975\ndecoder layer 3 zipvl-tau 0.975 prefill heads\n' "$h" > "$p/zv.plan"
if (cd examples/plans/budget && python3 -c "import search; search.merge('$p', 'm', ['bs', 'zv'], True)") &&
   grep -qx 'decoder layer 2 zipvl-tau 0.975 prefill heads' "$p/m.plan" &&
   grep -qx 'decoder layer 3 zipvl-tau 0.975 prefill heads' "$p/m.plan" &&
   grep -qx 'decoder layer 2 heads 0-1 sink' "$p/m.plan" && run_target ./ocellus plan "$p/m.plan" >"$tmp_dir/plan" 2>&1 &&
   grep -q 'composed' "$tmp_dir/plan"; then
  pass plan_budget_merge
else
  sed 's/^/# /' "$p/m.plan" "$tmp_dir/plan" 2>/dev/null
  fail plan_budget_merge "the merged plan does not compose the patterns with ZipVL"
fi

if python3 examples/plans/budget/frontier.py "$d" "$tmp_dir/f.svg" mminf-a,smm-700 &&
   grep -q '^<svg ' "$tmp_dir/f.svg" && [ "$(grep -c 'r="8"' "$tmp_dir/f.svg")" -eq 2 ] &&
   grep -q '<title>mminf-b: 50.0%, 70.0% right</title>' "$tmp_dir/f.svg"; then
  pass plan_budget_frontier
else
  head -20 "$tmp_dir/f.svg" 2>/dev/null | sed 's/^/# /'
  fail plan_budget_frontier "frontier.py did not draw the candidates with the chosen two ringed"
fi

# a frontier table (examples/plans/budget/long-greedy-frontier.tsv): the rows marked 'pick' ringed
# where they save on an axis (BlindSight and MMInference on the left, SparseMM on the right); the
# shipped drawing is the one the table gives
t=examples/plans/budget/long-greedy-frontier.tsv
if python3 examples/plans/budget/frontier.py $t "$tmp_dir/t.svg" && [ "$(grep -c 'r="8"' "$tmp_dir/t.svg")" -eq 3 ] &&
   grep -q '<title>mminf-b: 50.6%, 95.0% right</title>' "$tmp_dir/t.svg" && cmp -s "$tmp_dir/t.svg" examples/plans/long-greedy-frontier.svg; then
  pass plan_budget_frontier_table
else
  fail plan_budget_frontier_table "frontier.py did not draw $t with its three picks ringed, or examples/plans/long-greedy-frontier.svg differs"
fi
fi
