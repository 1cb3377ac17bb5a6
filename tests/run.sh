#!/bin/sh
# run.sh TARGET_EXEC TEST...: runs every test program (under TARGET_EXEC when cross compiling) and
# every test script (*.sh, with sh; they read config.mk themselves), prints each test's failures and
# skips with their reasons as it ends, and ends with exactly one line
#   N passed, N failed[, N skipped]
# Tests run OC_TEST_JOBS at a time (default: one per core, at most 8: the largest process of a CI
# run peaked at 800 MB), the scripts first: they are the longest
# natively, and starting the longest first leaves no long tail. Each test's lines print together
# when it ends, so the log reads the same as a serial run's, in the order the tests finish. Every
# test keeps its files in its own mktemp directory, so they cannot collide.
#
# run.sh --one TARGET_EXEC RESULT_DIR TEST: one test (what each xargs worker runs).
if [ "$1" = --one ]; then
  exec_prefix=$2; dir=$3; t=$4
  name=$(basename "$t")
  out="$dir/$name.out"
  start=$(date +%s)
  # shellcheck disable=SC2086
  case $t in
    *.sh) sh "$t" >"$out" 2>&1 ;;
    *) $exec_prefix "$t" >"$out" 2>&1 ;;
  esac
  rc=$?
  p=$(grep -c '^PASS ' "$out"); f=$(grep -c '^FAIL ' "$out"); s=$(grep -c '^SKIP ' "$out")
  f_cases=$(grep '^FAIL ' "$out" | sed 's/:.*//' | sort -u | wc -l)
  {
    if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then
      echo "FAIL $name: exited with status $rc and reported no failing case; last output:"
      tail -n 20 "$out" | sed 's/^/    /'
      f_cases=1
    fi
    grep -E '^(FAIL|SKIP) ' "$out" | sed "s/^/[$name] /"
    echo "$name: $p passed, $f_cases failed, $s skipped ($(( $(date +%s) - start )) s)"
  } >"$dir/$name.report"
  echo "$p $f_cases $s" >"$dir/$name.count"
  cat "$dir/$name.report"
  exit 0
fi

exec_prefix=$1; shift
# A slow target: OC_TEST_SLOW=1 with scalar kernels only, 2 under an emulator (qemu). Tests that
# would take minutes there run fewer model items or random cases (test_long.c, test_eval_long.sh;
# under an emulator the C tests that call check_emulated(), tests/check.h); the native SIMD
# configurations run them all.
OC_TEST_SLOW=0
[ -f config.mk ] && ! grep -q '^HAVE_\(AVX2\|NEON\) = 1' config.mk && OC_TEST_SLOW=1
[ -n "$exec_prefix" ] && OC_TEST_SLOW=2
export OC_TEST_SLOW
if [ -n "${OC_TEST_JOBS:-}" ]; then
  case $OC_TEST_JOBS in
    *[!0-9]*|0*) echo "run.sh: OC_TEST_JOBS=$OC_TEST_JOBS: want a whole number of tests at once, 1 or more" >&2; exit 2 ;;
  esac
  jobs=$OC_TEST_JOBS
else
  jobs=$(nproc 2>/dev/null || echo 1)
  [ "$jobs" -gt 8 ] && jobs=8
fi
dir=$(mktemp -d) || exit 1
trap 'rm -rf "$dir"' EXIT INT TERM
{
  for t in "$@"; do case $t in *.sh) echo "$t" ;; esac; done
  for t in "$@"; do case $t in *.sh) ;; *) echo "$t" ;; esac; done
} | xargs -P "$jobs" -n 1 sh "$0" --one "$exec_prefix" "$dir"

pass=0; fail=0; skip=0
for t in "$@"; do
  name=$(basename "$t")
  if [ -f "$dir/$name.count" ]; then
    read -r p f s <"$dir/$name.count"
  else
    echo "FAIL $name: did not run"; p=0; f=1; s=0
  fi
  pass=$((pass + p)); fail=$((fail + f)); skip=$((skip + s))
done
if [ "$skip" -gt 0 ]; then
  echo "$pass passed, $fail failed, $skip skipped"
else
  echo "$pass passed, $fail failed"
fi
[ "$fail" -eq 0 ]
