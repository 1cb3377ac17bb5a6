#!/bin/sh
# test_matmul_bf16.sh: the AVX512_BF16 kernels run through test_matmul's BF16 cases even where the
# hypervisor hides the CPUID bit the CPU executes (this project's Xeon VM does): a probe process
# runs one vdpbf16ps with OCELLUS_CPU_FEATURES=+avx512bf16 (port.h); if it ran, test_matmul runs
# again with the bit forced on, so the AVX-512 BF16 micro-kernel is checked against the double
# reference. Where the CPU reports the bit, the normal run of test_matmul already covers it.
. tests/support/testlib.sh

if [ "$(cfg HAVE_AVX512)" != 1 ]; then
  skip matmul_bf16 "AVX-512 kernels not built"; exit 0
fi
OCELLUS_CPU_FEATURES=+avx512bf16 run_target build/tests/test_matmul --bf16-probe >/dev/null 2>&1
rc=$?
if [ "$rc" -ne 0 ]; then
  skip matmul_bf16 "this CPU does not execute AVX512_BF16 (probe exit status $rc)"; exit 0
fi
out=$(OCELLUS_CPU_FEATURES=+avx512bf16 run_target build/tests/test_matmul 2>&1); rc=$?
printf '%s\n' "$out" | grep -E '^(  bf16 kernels|FAIL|# [0-9]+ passed)' | sed 's/^ *#* */# /'
if [ "$rc" -ne 0 ] || printf '%s\n' "$out" | grep -q '^FAIL'; then
  fail matmul_bf16 "test_matmul failed with +avx512bf16 (exit status $rc)"
elif ! printf '%s\n' "$out" | grep -q '^  bf16 kernels: avx512'; then
  fail matmul_bf16 "the AVX-512 table offered no BF16 kernels with +avx512bf16"
else
  pass matmul_bf16
fi
exit $failed
