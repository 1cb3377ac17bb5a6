#!/bin/sh
# test_matmul_bf16.sh: the AVX512_BF16 kernels run through test_matmul's BF16 cases even where the
# hypervisor hides the CPUID bit the CPU executes (this project's Xeon VM does): a probe process
# runs one vdpbf16ps with OCELLUS_CPU_FEATURES=+avx512bf16 (port.h); if it ran, test_matmul runs
# again with the bit forced on, so the AVX-512 BF16 micro-kernel is checked against the double
# reference, and test_vision runs the encoder on that path against its stated bounds. Where the CPU
# reports the bit, the normal runs of test_matmul and test_vision already cover it.
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
# the vision encoder end to end on the BF16 path (AUTO takes it with bf16_fast): its stated bounds
out=$(OCELLUS_CPU_FEATURES=+avx512bf16,+bf16_fast run_target build/tests/test_vision 2>&1); rc=$?
printf '%s\n' "$out" | grep -E '^(FAIL|# [0-9]+ passed)|bf16 path' | sed 's/^ *#* */# /'
if [ "$rc" -ne 0 ] || printf '%s\n' "$out" | grep -q '^FAIL'; then
  fail vision_bf16 "test_vision failed with +avx512bf16,+bf16_fast (exit status $rc)"
elif ! printf '%s\n' "$out" | grep -q 'bf16 path'; then
  skip vision_bf16 "no transformers parity fixtures (tests/data/models): the BF16 path ran the random models only"
else
  pass vision_bf16
fi
exit $failed
