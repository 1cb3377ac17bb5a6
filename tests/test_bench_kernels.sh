#!/bin/sh
# test_bench_kernels.sh: `ocellus bench kernels` (the cases tests/qemu/icount.sh counts) runs on every
# ISA table this CPU has: each gemm and tile case exits 0 and prints its FLOPs and a finite checksum,
# the tile case the same FLOPs for every table (icount.sh divides every column by one count), and
# --setup-only prints no checksum. A forced path the table lacks (bf16 on a table without BF16
# kernels) runs the float path, as the driver does. Timings and instruction counts are not checked.
. tests/support/testlib.sh

isas=$(run_target ./ocellus version 2>&1 | sed -n 's/^build: //p')
echo "# build: $isas"
ok=1
for isa in scalar avx2 avx512 neon; do
  case " $isas " in *" $isa=1"*|*"$isa=1 "*) ;; *) [ $isa = scalar ] || continue ;; esac
  for c in "gemm_q4_0 int8" "gemm_f16 bf16" "tile float" "tile int8" "tile bf16"; do
    # shellcheck disable=SC2086
    set -- $c
    out=$(run_target ./ocellus bench kernels --isa $isa --path "$2" "$1" 2>&1); rc=$?
    if [ $rc -ne 0 ]; then
      # an ISA built but not runnable on this CPU says so and exits 1
      if printf '%s\n' "$out" | grep -q "does not run here"; then continue 2; fi
      fail "bench_kernels_${isa}_$1_$2" "exit status $rc: $out"; ok=0; continue
    fi
    echo "# $out"
    if ! printf '%s\n' "$out" | grep -Eq ', [0-9]+ flops, checksum -?[0-9]\.[0-9]+e[-+][0-9]+$'; then
      fail "bench_kernels_${isa}_$1_$2" "no FLOPs or no finite checksum: $out"; ok=0
    fi
    if [ "$1" = tile ]; then
      f=$(printf '%s\n' "$out" | sed -n 's/.*, \([0-9][0-9]*\) flops.*/\1/p')
      if [ "$f" != 9437184 ]; then fail "bench_kernels_${isa}_tile_$2" "FLOPs $f, expected 9437184 (48 x 256 x 96 x 2 x 4)"; ok=0; fi
    fi
  done
  s=$(run_target ./ocellus bench kernels --isa $isa --path int8 --setup-only tile 2>&1)
  case $s in *", setup only") ;; *) fail "bench_kernels_${isa}_setup_only" "$s"; ok=0 ;; esac
done
[ $ok = 1 ] && pass bench_kernels_cases
exit $failed
