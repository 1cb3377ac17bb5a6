#!/bin/sh
# run.sh TARGET_EXEC TEST...: runs every test program (under TARGET_EXEC when cross compiling) and
# every test script (*.sh, with sh; they read config.mk themselves), prints failures and skips with
# their reasons, and ends with exactly one line
#   N passed, N failed[, N skipped]
exec_prefix=$1; shift
# A slow target: OC_TEST_SLOW=1 with scalar kernels only, 2 under an emulator (qemu). Tests that
# would take minutes there run fewer model items (test_long.c, test_eval_long.sh, test_kv_runtime.c);
# the native SIMD configurations run them all.
OC_TEST_SLOW=0
[ -f config.mk ] && ! grep -q '^HAVE_\(AVX2\|NEON\) = 1' config.mk && OC_TEST_SLOW=1
[ -n "$exec_prefix" ] && OC_TEST_SLOW=2
export OC_TEST_SLOW
pass=0; fail=0; skip=0
out=$(mktemp) || exit 1
trap 'rm -f "$out"' EXIT INT TERM
for t in "$@"; do
  name=$(basename "$t")
  start=$(date +%s)
  # shellcheck disable=SC2086
  case $t in
    *.sh) sh "$t" >"$out" 2>&1 ;;
    *) $exec_prefix "$t" >"$out" 2>&1 ;;
  esac
  rc=$?
  p=$(grep -c '^PASS ' "$out"); f=$(grep -c '^FAIL ' "$out"); s=$(grep -c '^SKIP ' "$out")
  f_cases=$(grep '^FAIL ' "$out" | sed 's/:.*//' | sort -u | wc -l)
  if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then
    echo "FAIL $name: exited with status $rc and reported no failing case; last output:"
    tail -n 20 "$out" | sed 's/^/    /'
    f_cases=1
  fi
  grep -E '^(FAIL|SKIP) ' "$out" | sed "s/^/[$name] /"
  echo "$name: $p passed, $f_cases failed, $s skipped ($(( $(date +%s) - start )) s)"
  pass=$((pass + p)); fail=$((fail + f_cases)); skip=$((skip + s))
done
if [ "$skip" -gt 0 ]; then
  echo "$pass passed, $fail failed, $skip skipped"
else
  echo "$pass passed, $fail failed"
fi
[ "$fail" -eq 0 ]
