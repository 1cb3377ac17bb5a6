#!/bin/sh
# icount.sh: guest instructions per FLOP of the `ocellus bench kernels` cases under qemu-user, scalar
# against the SIMD table (BENCHMARKS.md "NEON under qemu"). From the root of a build:
#   ./configure --host=aarch64-linux-gnu --target-exec=qemu-aarch64 && make && sh tests/qemu/icount.sh
# (or arm-linux-gnueabihf / qemu-arm), or in a native x86-64 build (qemu-x86_64 -cpu max runs the
# AVX2 table; qemu 7.2 has no AVX-512), so that NEON and AVX2 are counted the same way. Each count
# is that of one case minus that of the same command with --setup-only: the kernel work alone, one
# thread; divided by the case's FLOPs (bench kernels prints them). The counting plugin
# (icount_plugin.c) is built here with HOSTCC. Emulated time is not a speed figure; these counts
# say how much work each path issues, not how fast a board runs it.
set -eu
cfg() { sed -n "s/^$1 = //p" config.mk; }
exec_cmd=$(cfg TARGET_EXEC)
case $exec_cmd in
  qemu-aarch64*) arch=aarch64; vec=neon; vec_cpu=cortex-a53 ;;   # ARMv8.0: the baseline NEON kernels
  qemu-arm*) arch=arm; vec=neon; vec_cpu=cortex-a15 ;;           # NEON + VFPv4
  "")
    case $(cfg TARGET) in
      x86_64*) arch=x86_64; vec=avx2; vec_cpu=max; exec_cmd=qemu-x86_64 ;;
      *) arch= ;;
    esac ;;
  *) arch= ;;
esac
[ -n "$arch" ] || { echo "icount.sh: run it in a build configured with --target-exec=qemu-aarch64 or qemu-arm, or a native x86-64 build" >&2; exit 2; }
command -v "${exec_cmd%% *}" >/dev/null || { echo "icount.sh: ${exec_cmd%% *} is not installed" >&2; exit 2; }
[ -x ./ocellus ] || { echo "icount.sh: build first (make)" >&2; exit 2; }
plugin=$(pwd)/build/qemu/icount_plugin.so
mkdir -p build/qemu
$(cfg HOSTCC) -std=c11 -O2 -Wall -Wextra -shared -fPIC -o "$plugin" tests/qemu/icount_plugin.c
out=$(mktemp)
log=$(mktemp)
trap 'rm -f "$out" "$log" "$log.run"' EXIT INT TERM

# insns CPU ARGS...: instructions qemu -cpu CPU executes for `ocellus bench kernels ARGS` (its
# output in $log)
insns() {
  cpu=$1; shift
  # shellcheck disable=SC2086
  $exec_cmd -cpu "$cpu" -plugin "$plugin,out=$out" ./ocellus bench kernels "$@" >"$log"
  sed -n 's/^insns //p' "$out"
}
# work CPU ARGS...: the case's instructions without its setup (its FLOPs stay in $log)
work() {
  all=$(insns "$@")
  cp "$log" "$log.run"
  echo $(( all - $(insns "$@" --setup-only) ))
}
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.1f", a / b }'; }
per_flop() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.3f", a / b }'; }

# On aarch64 -cpu max has dotprod, BF16 and I8MM: its SDOT / BFDOT table is counted with
# OCELLUS_CPU_FEATURES=-i8mm, its SMMLA / BFMMLA table (where configure built it) without.
dotprod=0; mmla=0
[ "$arch" = aarch64 ] && [ "$(cfg HAVE_NEON_DOTPROD)" = 1 ] && dotprod=1
[ $dotprod = 1 ] && [ "$(cfg HAVE_NEON_I8MM)" = 1 ] && mmla=1
head="| case | path | MFLOP | scalar (insns/FLOP) | $vec, -cpu $vec_cpu (insns/FLOP) | scalar / $vec |"
rule="|---|---|---:|---:|---:|---:|"
if [ $dotprod = 1 ]; then
  head="$head NEON+dotprod(+bf16), -cpu max, -i8mm (insns/FLOP) | scalar / NEON+dotprod |"
  rule="$rule---:|---:|"
fi
if [ $mmla = 1 ]; then
  head="$head NEON+i8mm+bf16 (SMMLA, BFMMLA), -cpu max (insns/FLOP) | scalar / NEON+i8mm |"
  rule="$rule---:|---:|"
fi
echo "# $arch, qemu $($exec_cmd --version | sed -n '1s/.*version \([0-9.]*\).*/\1/p')"
echo "$head"
echo "$rule"
for c in "gemm_f32 auto" "gemm_f16 auto" "gemm_f16 bf16" "gemm_q8_0 float" "gemm_q8_0 int8" "gemm_q4_0 int8" "gemv_f16 auto" "gemv_q8_0 float" "gemv_q8_0 int8" "attn auto" \
         "tile float" "tile int8" "tile bf16"; do
  # shellcheck disable=SC2086
  set -- $c
  s=$(work "$vec_cpu" --isa scalar --path "$2" "$1")
  n=$(work "$vec_cpu" --isa "$vec" --path "$2" "$1")
  flops=$(sed -n 's/.*, \([0-9][0-9]*\) flops.*/\1/p' "$log.run")
  row="| $1 | $2 | $(awk -v f="$flops" 'BEGIN { printf "%.1f", f / 1e6 }') | $(per_flop "$s" "$flops") | $(per_flop "$n" "$flops") | $(ratio "$s" "$n") |"
  if [ $dotprod = 1 ]; then
    d=$(OCELLUS_CPU_FEATURES=-i8mm work max --isa neon --path "$2" "$1")
    row="$row $(per_flop "$d" "$flops") | $(ratio "$s" "$d") |"
  fi
  if [ $mmla = 1 ]; then
    m=$(OCELLUS_CPU_FEATURES= work max --isa neon --path "$2" "$1")
    row="$row $(per_flop "$m" "$flops") | $(ratio "$s" "$m") |"
  fi
  echo "$row"
done
