#!/bin/sh
# test_isa_dispatch.sh: the kernels follow the CPU's features, checked on emulated CPUs (qemu-user
# cross builds). `ocellus version` names the chosen kernels; test_matmul then runs on the CPU
# without the optional extensions, so the baseline path is exercised and checked against the
# oracle there (the normal run of test_matmul, on qemu's default CPU "max", covers the other).
#   aarch64: max has dotprod, BF16 and I8MM: matmul "neon+dotprod+bf16+i8mm" (SMMLA, BFMMLA; where
#            configure built them), "neon+dotprod+bf16" (SDOT, BFDOT) with OCELLUS_CPU_FEATURES=-i8mm,
#            test_matmul checked on both; cortex-a76 (ARMv8.2, dotprod, no BF16): "neon+dotprod", its
#            int8 SDOT kernels also checked by test_matmul there; cortex-a53 (ARMv8.0): "neon".
#   armv7:   cortex-a15 (NEON + VFPv4): "neon"; cortex-a9 (NEON, VFPv3, no FMA): scalar.
. tests/support/testlib.sh

case $target_exec in
  qemu-aarch64*) arch=aarch64 ;;
  qemu-arm*) arch=arm ;;
  *) skip isa_dispatch "needs a build run under qemu-aarch64 or qemu-arm (./configure --target-exec=...): the CPU model is chosen with qemu's -cpu"
     exit 0 ;;
esac

# expect_kernels CPU EXPECTED [FEATURES]: the "kernels: ..." part of `ocellus version` on that CPU
# (with OCELLUS_CPU_FEATURES=FEATURES where given; the test name gets FEATURES without its sign)
expect_kernels() {
  name=$1${3:+_no_${3#-}}
  got=$(OCELLUS_CPU_FEATURES=${3:-} run_target -cpu "$1" ./ocellus version 2>&1 | sed -n 's/^cpu: .*kernels: //p')
  echo "# -cpu $1${3:+ OCELLUS_CPU_FEATURES=$3}: kernels: $got"
  if [ "$got" = "$2" ]; then pass "kernels_$name"; else fail "kernels_$name" "chose '$got', expected '$2'"; fi
}

# matmul_on CPU NEON_TABLE [FEATURES]: test_matmul passes on that CPU (and OCELLUS_CPU_FEATURES),
# where the NEON table is NEON_TABLE
matmul_on() {
  name=$1${3:+_no_${3#-}}
  out=$(OCELLUS_CPU_FEATURES=${3:-} run_target -cpu "$1" build/tests/test_matmul 2>&1); rc=$?
  printf '%s\n' "$out" | grep -E '^(# isa|FAIL|# [0-9]+ passed)' | sed 's/^# //; s/^/# /'
  if [ "$rc" -ne 0 ] || printf '%s\n' "$out" | grep -q '^FAIL'; then
    fail "test_matmul_$name" "test_matmul failed on -cpu $1${3:+ with OCELLUS_CPU_FEATURES=$3} (exit status $rc)"
  elif ! printf '%s\n' "$out" | grep -qx "# isa neon: $2"; then
    fail "test_matmul_$name" "expected '# isa neon: $2' on -cpu $1${3:+ with OCELLUS_CPU_FEATURES=$3}"
  else
    pass "test_matmul_$name"
  fi
}

if [ "$(cfg HAVE_NEON)" != 1 ]; then
  base="scalar (matmul: scalar)"; full=$base
elif [ "$(cfg HAVE_NEON_DOTPROD)" = 1 ]; then
  base="neon (matmul: neon)"; dp="neon (matmul: neon+dotprod)"; full=$dp
  [ "$(cfg HAVE_NEON_BF16)" = 1 ] && full="neon (matmul: neon+dotprod+bf16)"
  bf16=$full
  [ "$(cfg HAVE_NEON_I8MM)" = 1 ] && full="neon (matmul: neon+dotprod+bf16+i8mm)"
else
  base="neon (matmul: neon)"; full=$base
fi

if [ "$arch" = aarch64 ]; then
  expect_kernels max "$full"
  expect_kernels cortex-a53 "$base"
  if [ "$(cfg HAVE_NEON)" = 1 ]; then matmul_on cortex-a53 neon; fi
  if [ "$(cfg HAVE_NEON_I8MM)" = 1 ]; then
    # the SDOT / BFDOT table on a CPU that has the MMLA instructions too (the run on max without
    # the override, test_matmul's normal run, covers the SMMLA / BFMMLA one)
    expect_kernels max "$bf16" -i8mm
    matmul_on max neon+dotprod+bf16 -i8mm
  fi
  if [ "$(cfg HAVE_NEON_BF16)" = 1 ]; then
    expect_kernels cortex-a76 "$dp"
    matmul_on cortex-a76 neon+dotprod
  fi
else
  expect_kernels cortex-a15 "$base"
  expect_kernels cortex-a9 "scalar (matmul: scalar)"
  matmul_on cortex-a9 "not run here"
fi
exit $failed
