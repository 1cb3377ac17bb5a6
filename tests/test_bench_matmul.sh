#!/bin/sh
# test_bench_matmul.sh: `ocellus bench matmul --cpu-time` on a small model shape (--shape kv: 512 x
# 1536 x 256) prints what its BENCHMARKS.md rows are read from: the micro-kernels' own ceiling
# (float and int8, each with a ratio to the FMA peak loop run next to it), the shape's GEMM with
# its paired ratio, and the GEMV with its ratio to the read-only pass next to it; every ratio a
# positive number. --help lists the shapes. Timings are not checked (a shared machine).
. tests/support/testlib.sh

if [ -n "$target_exec" ]; then
  skip bench_matmul "cross build run under '$target_exec': the roofline probes take minutes under emulation"
  exit 0
fi

out=$(run_target ./ocellus bench matmul --cpu-time --reps 1 --gemv-reps 1 --types f32,q8_0 --shape kv 2>&1); rc=$?
# pos STRING: STRING is a number > 0
pos() { awk -v v="$1" 'BEGIN { exit !(v + 0 > 0) }'; }
mk=$(printf '%s\n' "$out" | sed -n 's/^float micro-kernel alone (.*: \([0-9.]*\) GFLOP\/s = [0-9]*% of the FMA peak, paired \([0-9]*\)%$/\1 \2/p')
f32=$(printf '%s\n' "$out" | grep '^f32   float |')
q8=$(printf '%s\n' "$out" | grep '^q8_0  int8  |')
if [ $rc -ne 0 ]; then fail bench_matmul_shape "exit $rc: $(printf '%s\n' "$out" | tail -3)"
elif ! printf '%s\n' "$out" | grep -q '^GEMM 512x1536x256 (n_tok x n_in x n_out)'; then fail bench_matmul_shape "no GEMM 512x1536x256 header"
elif [ -z "$mk" ] || ! pos "${mk% *}" || ! pos "${mk#* }"; then fail bench_matmul_shape "no float micro-kernel line with GFLOP/s and a paired ratio"
elif [ -z "$f32" ] || ! pos "$(printf '%s\n' "$f32" | awk -F'|' '{ split($2, a, " "); print a[5] }')"; then
  fail bench_matmul_shape "no f32 row with a paired ratio to the FMA peak: $f32"
elif [ -z "$q8" ] || ! pos "$(printf '%s\n' "$q8" | awk -F'|' '{ split($4, a, " "); print a[3] }')"; then
  fail bench_matmul_shape "no q8_0 int8 row with a GEMV ratio to the read-only pass: $q8"
else
  pass bench_matmul_shape
fi
# the int8 micro-kernel line where the ISA table has an int8 GEMM (every SIMD table; scalar too)
if printf '%s\n' "$out" | grep -q '^int8 Q8_0 micro-kernel alone (.*GFLOP/s-equiv = [0-9]*% of the FMA peak, paired [0-9]*%$'; then
  pass bench_matmul_int8_microkernel
else
  fail bench_matmul_int8_microkernel "no int8 Q8_0 micro-kernel line"
fi
help=$(run_target ./ocellus bench matmul --help 2>&1)
missing=
for s in up down q kv vision-qkv vision-up vision-down; do
  printf '%s\n' "$help" | grep -q "^  $s " || missing="$missing $s"
done
if [ -z "$missing" ]; then pass bench_matmul_shapes_listed; else fail bench_matmul_shapes_listed "--help lacks:$missing"; fi
exit $failed
