#!/bin/sh
# run.sh: the item-paired runs of docs/sparsity-findings.md: `ocellus eval --suite long` for each
# CONFIG (dense, or a plan NAME.plan in PLAN_DIR) on the same items, in slices of PER items, all
# slices of all configs as one queue of 1-thread processes (as many at a time as online CPUs).
# The queue goes slice by slice, so a run cut short by LIMIT_S leaves every config the same items.
# Each process writes its --verbose log (one line per item: expected, got, first-token margin) and
# its --json into OUT_DIR as CONFIG.fFIRST.{log,json}; pair.py reads them.
#
# usage: examples/plans/ablation/run.sh OUT_DIR PLAN_DIR SEED SLICES PER TYPES LIMIT_S CONFIG...
#   TYPES: a comma list for --types, or all.  Run from the repository root after make.
set -u
[ $# -ge 8 ] || { sed -n '2,/^set -u/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 2; }
out=$1 plans=$2 seed=$3 slices=$4 per=$5 types=$6 lim=$7
shift 7
[ "$types" = all ] && types=''
mkdir -p "$out" || exit 1
jobs="$out/jobs"
: > "$jobs"
s=0
while [ $s -lt "$slices" ]; do
  for c in "$@"; do echo "$c $((s * per))" >> "$jobs"; done
  s=$((s + 1))
done
cpus=$(getconf _NPROCESSORS_ONLN 2>/dev/null || echo 1)
export out plans seed per types
# shellcheck disable=SC2016
timeout "$lim" xargs -P "$cpus" -L 1 sh -c '
  c=$0 f=$1
  if [ "$c" = dense ]; then pl=""; else pl="--plan $plans/$c.plan"; fi
  ./ocellus eval --suite long -m examples/long/ocellus-long.gguf --mmproj examples/long/ocellus-long-mmproj.gguf \
    --seed "$seed" --first "$f" --items "$per" ${types:+--types "$types"} --prefill-chunk all -t 1 --verbose $pl \
    --json "$out/$c.f$f.json" > "$out/$c.f$f.log" 2>&1' < "$jobs"
echo "run.sh: queue done (rc $?)"
