#!/bin/sh
# run-long.sh: the long fuzzing campaign (issue 21: every target >= 10^7 executions, 0 crashes), run
# by `make fuzz-long` and by the bundle `make fuzz-bundle` packs (run.sh there). POSIX sh only, no
# clang needed: it runs libFuzzer binaries that are already built.
#
#   tests/fuzz/run-long.sh BIN_DIR SEED_DIR OUT_DIR
#
# BIN_DIR holds the fuzz_* binaries, SEED_DIR/NAME the seed corpus of each, OUT_DIR receives, per
# target, corpus/ (what the workers found), worker-N.log, any crash-/leak-/oom-/timeout- input, and
# summary.txt (one line per target). Environment:
#   FUZZ_RUNS=10000000     executions per target, split evenly over the workers
#   FUZZ_JOBS=1            parallel workers per target (independent libFuzzer processes sharing the
#                          corpus directory, as libFuzzer's -jobs does; their executions are summed)
#   FUZZ_LONG_SECONDS=0    cap on each target's time (0: none)
#   FUZZ_TARGETS=""        space-separated names (default: every fuzz_* in BIN_DIR)
#   FUZZ_EXTRA=""          more libFuzzer flags for every worker (e.g. -rss_limit_mb=4096)
#   FUZZ_LOADER=""         a command put before each binary (the bundle's own glibc loader)
# Exit status: 1 if any worker of any target crashed (or failed to start), else 0. A target that
# ends below FUZZ_RUNS (a time cap) is marked "short" in the summary but is not a failure.
set -u
if [ $# -ne 3 ]; then
    echo "usage: $0 BIN_DIR SEED_DIR OUT_DIR" >&2
    exit 2
fi
bin_dir=$1
seed_dir=$2
out_dir=$3
runs=${FUZZ_RUNS:-10000000}
jobs=${FUZZ_JOBS:-1}
cap=${FUZZ_LONG_SECONDS:-0}
targets=${FUZZ_TARGETS:-}
extra=${FUZZ_EXTRA:-}
loader=${FUZZ_LOADER:-}
case $jobs in '' | *[!0-9]* | 0) echo "FUZZ_JOBS must be a positive integer" >&2; exit 2 ;; esac
case $runs in '' | *[!0-9]*) echo "FUZZ_RUNS must be a non-negative integer" >&2; exit 2 ;; esac
case $cap in '' | *[!0-9]*) echo "FUZZ_LONG_SECONDS must be a non-negative integer" >&2; exit 2 ;; esac
if [ -z "$targets" ]; then
    for f in "$bin_dir"/fuzz_*; do
        [ -x "$f" ] && targets="$targets ${f##*/}"
    done
fi
mkdir -p "$out_dir" || exit 2
summary=$out_dir/summary.txt
per=$(( (runs + jobs - 1) / jobs ))
printf '%-18s %14s %8s %8s %5s  %s\n' target executions crashes seconds jobs status >"$summary"
cat "$summary"
any_crash=0
for name in $targets; do
    bin=$bin_dir/$name
    dir=$out_dir/$name
    mkdir -p "$dir/corpus"
    seeds=$seed_dir/$name
    [ -d "$seeds" ] || seeds=
    start=$(date +%s)
    pids=
    i=0
    while [ $i -lt "$jobs" ]; do
        # shellcheck disable=SC2086 (loader and extra are word lists)
        $loader "$bin" -runs="$per" -max_total_time="$cap" -print_final_stats=1 \
            -artifact_prefix="$dir/" $extra "$dir/corpus" $seeds >"$dir/worker-$i.log" 2>&1 &
        pids="$pids $!"
        i=$((i + 1))
    done
    failed=0
    for p in $pids; do
        wait "$p" || failed=$((failed + 1))
    done
    seconds=$(( $(date +%s) - start ))
    total=0
    i=0
    while [ $i -lt "$jobs" ]; do
        log=$dir/worker-$i.log
        n=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n 1)
        # a worker that died before its final stats: its last "#N" status line
        [ -n "$n" ] || n=$(sed -n 's/^#\([0-9][0-9]*\).*/\1/p' "$log" | tail -n 1)
        total=$((total + ${n:-0}))
        i=$((i + 1))
    done
    artifacts=$(find "$dir" -maxdepth 1 \( -name 'crash-*' -o -name 'leak-*' -o -name 'oom-*' \
        -o -name 'timeout-*' \) | wc -l)
    crashes=$failed
    [ "$artifacts" -gt "$crashes" ] && crashes=$artifacts
    status=ok
    [ "$total" -lt "$runs" ] && status=short
    if [ "$crashes" -gt 0 ]; then
        status=CRASH
        any_crash=1
    fi
    line=$(printf '%-18s %14s %8s %8s %5s  %s' "$name" "$total" "$crashes" "$seconds" "$jobs" "$status")
    echo "$line" >>"$summary"
    echo "$line"
    if [ "$crashes" -gt 0 ]; then
        for f in "$dir"/crash-* "$dir"/leak-* "$dir"/oom-* "$dir"/timeout-*; do
            [ -e "$f" ] && echo "  input: $f"
        done
        i=0
        while [ $i -lt "$jobs" ]; do
            if grep -q -E 'ERROR: (AddressSanitizer|UndefinedBehaviorSanitizer|LeakSanitizer|libFuzzer)|runtime error:|invariant failed' \
                "$dir/worker-$i.log"; then
                echo "  $dir/worker-$i.log:"
                grep -E -A 12 'ERROR: |runtime error:|invariant failed' "$dir/worker-$i.log" | head -n 30 | sed 's/^/    /'
            fi
            i=$((i + 1))
        done
    fi
done
echo "summary: $summary"
exit $any_crash
