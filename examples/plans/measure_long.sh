#!/bin/sh
# measure_long.sh: dense attention and each plan given through `ocellus eval --suite long` on the
# same items, each run split across P processes (`--first I --items K`: items I..I+K-1 of one seed's
# stream, so the split changes no item), the per-process JSON merged, and one markdown table:
#   plan | score/N | per-type counts | prefill / decode attention FLOPs skipped | KV cache at the end
#   of prefill (mean) | decode tok/s | prefill time (mean)
# Decode tok/s is each process's own: one-token forward passes over their time, summed over the
# processes (not the machine's throughput); with P processes of T threads sharing the machine, keep
# P x T at or below the cores and compare rows of one invocation only (the runs go one after the
# other, dense first, each with all P processes). POSIX sh + awk; no other tools.
#
# usage: examples/plans/measure_long.sh [options] PLAN...
#   -m FILE            text model (default examples/long/ocellus-long.gguf)
#   --mmproj FILE      vision encoder (default examples/long/ocellus-long-mmproj.gguf)
#   --items N          items (default 50)
#   --seed S           item stream (default 1000001: never used in training)
#   --procs P          processes per run (default: online CPUs / T, at most N)
#   -t T               threads per process (default 1)
#   --max-images N     images per item 8..N (default: eval's, 32)
#   --prefill-chunk X  passed to eval (default: eval's)
#   --types A,B        question types (default all)
#   --out DIR          keep each process's JSON and log there (default: a temporary folder, removed)
#   --ocellus BIN      the ocellus binary (default ./ocellus of this checkout)
#   --no-dense         only the plans (the table then has no "% of dense")
set -u

root=$(cd "$(dirname "$0")/../.." && pwd)
text="$root/examples/long/ocellus-long.gguf"
mmproj="$root/examples/long/ocellus-long-mmproj.gguf"
items=50 seed=1000001 procs='' threads=1 max_images='' chunk='' types='' out='' bin="$root/ocellus" dense=1
plans=''

die() { echo "measure_long.sh: $*" >&2; exit 2; }
need() { [ $# -ge 2 ] || die "option $1 needs a value"; }
is_count() { case $1 in '' | *[!0-9]*) return 1 ;; *) [ "$1" -ge 1 ] ;; esac; }

while [ $# -gt 0 ]; do
  case $1 in
    -h | --help) sed -n '2,/^set -u/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    -m) need "$@"; text=$2; shift 2 ;;
    --mmproj) need "$@"; mmproj=$2; shift 2 ;;
    --items) need "$@"; items=$2; shift 2 ;;
    --seed) need "$@"; seed=$2; shift 2 ;;
    --procs) need "$@"; procs=$2; shift 2 ;;
    -t) need "$@"; threads=$2; shift 2 ;;
    --max-images) need "$@"; max_images=$2; shift 2 ;;
    --prefill-chunk) need "$@"; chunk=$2; shift 2 ;;
    --types) need "$@"; types=$2; shift 2 ;;
    --out) need "$@"; out=$2; shift 2 ;;
    --ocellus) need "$@"; bin=$2; shift 2 ;;
    --no-dense) dense=0; shift ;;
    --) shift; break ;;
    -*) die "unknown option $1 (--help lists them)" ;;
    *) break ;;
  esac
done
for p in "$@"; do
  [ -f "$p" ] || die "no plan file $p"
  case $p in *[[:space:]]*) die "plan paths with spaces are not supported: $p" ;; esac
done
plans="$*"
[ $dense = 1 ] || [ -n "$plans" ] || die "nothing to run: no plan and --no-dense"
is_count "$items" || die "--items needs a positive count"
is_count "$threads" || die "-t needs a positive count"
[ -x "$bin" ] || die "no ocellus binary at $bin (make, or --ocellus BIN)"
if ! [ -f "$text" ] || ! [ -f "$mmproj" ]; then die "model files not found: $text, $mmproj"; fi
if [ -z "$procs" ]; then
  cpus=$(getconf _NPROCESSORS_ONLN 2>/dev/null || echo 1)
  is_count "$cpus" || cpus=1
  procs=$((cpus / threads))
  [ "$procs" -ge 1 ] || procs=1
fi
is_count "$procs" || die "--procs needs a positive count"
[ "$procs" -le "$items" ] || procs=$items

if [ -n "$out" ]; then
  mkdir -p "$out" || die "cannot make $out"
  keep=1
else
  out=$(mktemp -d "${TMPDIR:-/tmp}/measure_long.XXXXXX") || die "cannot make a temporary folder"
  keep=0
  trap 'rm -rf "$out"' EXIT
  trap 'exit 130' INT TERM
fi

# run NAME [PLAN]: P processes over the items, then their JSON files out/NAME.K.json
run() {
  name=$1 plan=${2:-}
  pids='' k=0
  while [ $k -lt "$procs" ]; do
    first=$((k * items / procs)) end=$(((k + 1) * items / procs))
    if [ $end -gt $first ]; then
      set -- eval --suite long -m "$text" --mmproj "$mmproj" --seed "$seed" --first "$first" \
        --items $((end - first)) -t "$threads" --json "$out/$name.$k.json"
      [ -n "$max_images" ] && set -- "$@" --max-images "$max_images"
      [ -n "$chunk" ] && set -- "$@" --prefill-chunk "$chunk"
      [ -n "$types" ] && set -- "$@" --types "$types"
      [ -n "$plan" ] && set -- "$@" --plan "$plan"
      rm -f "$out/$name.$k.json"
      "$bin" "$@" >"$out/$name.$k.log" 2>&1 </dev/null &
      pids="$pids $!"
    fi
    k=$((k + 1))
  done
  bad=0
  for pid in $pids; do wait "$pid" || bad=1; done
  if [ $bad = 1 ]; then
    for f in "$out/$name".*.log; do
      if ! [ -s "${f%.log}.json" ]; then echo "measure_long.sh: $name: $(tail -n 3 "$f")" >&2; fi
    done
    die "$name: an eval process failed (logs in $out$([ $keep = 1 ] || echo ', removed on exit'))"
  fi
  echo "$name" >>"$out/runs"
  echo "measure_long.sh: $name done ($procs processes)" >&2
}

: >"$out/runs"
start=$(date +%s)
[ $dense = 1 ] && run dense
i=0
for p in $plans; do
  i=$((i + 1))
  base=$(basename "$p" .plan)
  run "$i-$base" "$p"
done

echo "Items $items of seed $seed (\`ocellus eval --suite long\`$([ -n "$max_images" ] && echo " --max-images $max_images")$([ -n "$types" ] && echo " --types $types")), $procs processes x $threads threads each per run, $(uname -m), $(($(date +%s) - start)) s in all."
echo
# the merge: sums over each run's processes; means are per item, weighted by the items of each
# process; the first run is the reference of the "% of dense" columns when it is dense
while read -r name; do
  for f in "$out/$name".*.json; do printf '%s ' "$name"; cat "$f"; done
done <"$out/runs" | awk -v dense="$dense" '
function num(key,   re) {
  re = "\"" key "\":-?[0-9.eE+]+"
  if (!match($0, re)) { print "measure_long.sh: no " key " in a JSON line" > "/dev/stderr"; exit 3 }
  return substr($0, RSTART + length(key) + 3, RLENGTH - length(key) - 3) + 0
}
{
  name = $1
  if (!(name in seen)) { seen[name] = 1; order[++n_runs] = name }
  it = num("items")
  items[name] += it; correct[name] += num("correct")
  pk[name] += num("prefill_attn_flops_kept"); ps[name] += num("prefill_attn_flops_skipped")
  dk[name] += num("decode_attn_flops_kept"); ds[name] += num("decode_attn_flops_skipped")
  kvp[name] += num("mean_kv_bytes_prefill") * it
  pre_ms[name] += num("mean_prefill_ms") * it
  dtok[name] += num("decode_tokens"); dms[name] += num("decode_ms")
  rest = $0
  while (match(rest, /"[a-z_]+":\{"correct":[0-9]+,"total":[0-9]+\}/)) {
    m = substr(rest, RSTART, RLENGTH); rest = substr(rest, RSTART + RLENGTH)
    t = m; sub(/^"/, "", t); sub(/".*/, "", t)
    if (!(t in tseen)) { tseen[t] = 1; torder[++n_types] = t }
    c = m; sub(/.*"correct":/, "", c); sub(/,.*/, "", c)
    tt = m; sub(/.*"total":/, "", tt); sub(/\}.*/, "", tt)
    tc[name, t] += c; tn[name, t] += tt
  }
}
function pct(a, b) { return b > 0 ? sprintf("%.1f%%", 100 * a / b) : "-" }
END {
  if (!n_runs) exit 3
  ref = order[1]
  head = "| plan | score | "
  rule = "|---|---|"
  for (j = 1; j <= n_types; j++) { head = head torder[j] " | "; rule = rule "---|" }
  head = head "prefill FLOPs skipped | decode FLOPs skipped | KV end of prefill (mean) | decode tok/s | prefill (mean) |"
  rule = rule "---|---|---|---|---|"
  print head; print rule
  for (r = 1; r <= n_runs; r++) {
    name = order[r]; N = items[name]
    label = name; sub(/^[0-9]+-/, "", label)
    line = "| " label " | " correct[name] "/" N " | "
    for (j = 1; j <= n_types; j++) line = line tc[name, torder[j]] "/" tn[name, torder[j]] " | "
    kv = kvp[name] / N
    kvs = sprintf("%.2f MiB", kv / 1048576)
    if (dense == 1 && r > 1 && kvp[ref] > 0) kvs = kvs sprintf(" (%.1f%%)", 100 * kv / (kvp[ref] / items[ref]))
    tps = dms[name] > 0 ? 1000 * dtok[name] / dms[name] : 0
    tpss = sprintf("%.2f", tps)
    if (dense == 1 && r > 1 && dms[ref] > 0) tpss = tpss sprintf(" (%.2fx)", tps / (1000 * dtok[ref] / dms[ref]))
    line = line pct(ps[name], pk[name] + ps[name]) " | " pct(ds[name], dk[name] + ds[name]) " | " kvs " | " tpss " | " sprintf("%.0f ms", pre_ms[name] / N) " |"
    print line
  }
}'
rc=$?
[ $rc = 0 ] || die "could not merge the JSON in $out"
[ $keep = 1 ] && echo && echo "Per-process JSON and logs: $out"
exit 0
