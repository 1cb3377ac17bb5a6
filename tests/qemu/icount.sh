#!/bin/sh
# icount.sh: guest instruction counts of the `ocellus bench kernels` cases under qemu-user, scalar
# against NEON (BENCHMARKS.md "NEON under qemu"). From the root of a qemu cross build:
#   ./configure --host=aarch64-linux-gnu --target-exec=qemu-aarch64 && make && sh tests/qemu/icount.sh
# (or arm-linux-gnueabihf / qemu-arm). Each number is the count of one case minus the count of the
# same command with --setup-only: the kernel work alone, one thread. The counting plugin
# (icount_plugin.c) is built here with HOSTCC. Emulated time is not a speed figure; these
# counts say how much work each path issues, not how fast a board runs it.
set -eu
cfg() { sed -n "s/^$1 = //p" config.mk; }
exec_cmd=$(cfg TARGET_EXEC)
case $exec_cmd in
  qemu-aarch64*) arch=aarch64; neon_cpu=cortex-a53 ;;   # ARMv8.0: the baseline NEON kernels
  qemu-arm*) arch=arm; neon_cpu=cortex-a15 ;;           # NEON + VFPv4
  *) echo "icount.sh: run it in a build configured with --target-exec=qemu-aarch64 or qemu-arm" >&2; exit 2 ;;
esac
[ -x ./ocellus ] || { echo "icount.sh: build first (make)" >&2; exit 2; }
plugin=$(pwd)/build/qemu/icount_plugin.so
mkdir -p build/qemu
$(cfg HOSTCC) -std=c11 -O2 -Wall -Wextra -shared -fPIC -o "$plugin" tests/qemu/icount_plugin.c
out=$(mktemp)
trap 'rm -f "$out"' EXIT INT TERM

# insns CPU ARGS...: instructions qemu -cpu CPU executes for `ocellus bench kernels ARGS`
insns() {
  cpu=$1; shift
  # shellcheck disable=SC2086
  $exec_cmd -cpu "$cpu" -plugin "$plugin,out=$out" ./ocellus bench kernels "$@" >/dev/null
  sed -n 's/^insns //p' "$out"
}
# work CPU ARGS...: the case's instructions without its setup
work() { echo $(( $(insns "$@") - $(insns "$@" --setup-only) )); }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.1f", a / b }'; }
mega() { awk -v a="$1" 'BEGIN { printf "%.2f", a / 1e6 }'; }

dotprod=0
[ "$arch" = aarch64 ] && [ "$(cfg HAVE_NEON_DOTPROD)" = 1 ] && dotprod=1
if [ $dotprod = 1 ]; then
  echo "| case | path | scalar (M insns) | NEON, -cpu $neon_cpu (M) | scalar / NEON | NEON+dotprod, -cpu max (M) | scalar / NEON+dotprod |"
  echo "|---|---|---:|---:|---:|---:|---:|"
else
  echo "| case | path | scalar (M insns) | NEON, -cpu $neon_cpu (M) | scalar / NEON |"
  echo "|---|---|---:|---:|---:|"
fi
for c in "gemm_f16 auto" "gemm_q8_0 float" "gemm_q8_0 int8" "gemv_f16 auto" "gemv_q8_0 float" "gemv_q8_0 int8" "attn auto"; do
  # shellcheck disable=SC2086
  set -- $c
  s=$(work "$neon_cpu" --isa scalar --path "$2" "$1")
  n=$(work "$neon_cpu" --isa neon --path "$2" "$1")
  row="| $1 | $2 | $(mega "$s") | $(mega "$n") | $(ratio "$s" "$n") |"
  if [ $dotprod = 1 ]; then
    d=$(work max --isa neon --path "$2" "$1")
    row="$row $(mega "$d") | $(ratio "$s" "$d") |"
  fi
  echo "$row"
done
