#!/bin/sh
# queue.sh: `ocellus eval --suite long --prefill-chunk all -t 1 --verbose` for each CONFIG (dense, or
# PLAN_DIR/CONFIG.plan) on slices of one seed's stream, every slice of every config one job in one
# queue of PROCS processes. The queue goes slice by slice, so a run stopped at DEADLINE (seconds
# since the epoch: no job starts after it and none outlives it) leaves every config the same
# items, but for the slices in flight. Each job writes OUT_DIR/CONFIG.fFIRST.{log,json}
# (examples/plans/ablation/pair.py reads them). EVAL_ARGS (environment) goes to every eval, e.g.
# "--backend opencl --device NVIDIA".
#
# usage: queue.sh OUT_DIR PLAN_DIR SEED SLICES PER TYPES PROCS DEADLINE CONFIG...
#   TYPES: a comma list for --types, or all. Run from the repository root after make.
set -u
[ $# -ge 9 ] || { sed -n '2,/^set -u/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 2; }
out=$1 plans=$2 seed=$3 slices=$4 per=$5 types=$6 procs=$7 deadline=$8
shift 8
[ "$types" = all ] && types=''
mkdir -p "$out" || exit 1
jobs=$(mktemp) || exit 1
s=0
while [ "$s" -lt "$slices" ]; do
  for c in "$@"; do echo "$c $((s * per))" >> "$jobs"; done
  s=$((s + 1))
done
EVAL_ARGS=${EVAL_ARGS:-}
export out plans seed per types deadline EVAL_ARGS
# shellcheck disable=SC2016
xargs -P "$procs" -L 1 sh -c '
  c=$0 f=$1 now=$(date +%s)
  [ "$now" -lt "$deadline" ] || exit 0
  if [ "$c" = dense ]; then pl=""; else pl="--plan $plans/$c.plan"; fi
  timeout $((deadline - now)) ./ocellus eval --suite long -m examples/long/ocellus-long.gguf \
    --mmproj examples/long/ocellus-long-mmproj.gguf --seed "$seed" --first "$f" --items "$per" \
    ${types:+--types "$types"} --prefill-chunk all -t 1 --verbose $EVAL_ARGS $pl \
    --json "$out/$c.f$f.json" > "$out/$c.f$f.log" 2>&1
  exit 0' < "$jobs"
rm -f "$jobs"
