#!/bin/sh
# bundle.sh: packs the built fuzz targets into one tarball that runs the long campaign on another
# x86-64 Linux without clang or any package (`make fuzz-bundle`):
#   bin/fuzz_*    the targets (libFuzzer, ASan and UBSan are linked in statically by clang)
#   lib/          every shared library ldd lists for them, glibc's loader included: run.sh starts
#                 each target through lib/ld-linux-x86-64.so.2 --library-path lib, so the other
#                 machine's glibc version (or its absence) does not matter
#   seeds/NAME/   tests/fuzz/corpus/NAME
#   data/         the Qwen2 vocabulary fuzz_tokenizer uses, when ../shared/data has it
#   run-long.sh   tests/fuzz/run-long.sh;  run.sh  the entry point (see its header)
#   BUILD.txt     what was built from where, and with what
#   tests/fuzz/bundle.sh BIN_DIR OUT.tar.gz
set -eu
bin_dir=$1
out=$2
vocab=${OC_FUZZ_VOCAB:-../shared/data/qwen2-tokenizer/vocab-qwen2.gguf}
stage=$(mktemp -d "${TMPDIR:-/tmp}/fuzz-bundle.XXXXXX")
trap 'rm -rf "$stage"' EXIT
root=$stage/fuzz-bundle
mkdir -p "$root/bin" "$root/lib" "$root/seeds" "$root/data"
for f in "$bin_dir"/fuzz_*; do
    [ -x "$f" ] || continue
    cp "$f" "$root/bin/"
    # "name => /path (addr)" and the loader's "/path (addr)"
    ldd "$f" | sed -n -e 's/.*=> \(\/[^ ]*\) .*/\1/p' -e 's/^[[:space:]]*\(\/[^ ]*\) (.*/\1/p' |
        while read -r lib; do
            [ -e "$root/lib/${lib##*/}" ] || cp -L "$lib" "$root/lib/"
        done
done
[ -e "$root/lib/ld-linux-x86-64.so.2" ] || { echo "bundle.sh: no ld-linux-x86-64.so.2 in ldd's list" >&2; exit 1; }
cp -R tests/fuzz/corpus/. "$root/seeds/"
if [ -f "$vocab" ]; then
    cp "$vocab" "$root/data/vocab-qwen2.gguf"
else
    echo "bundle.sh: $vocab absent: fuzz_tokenizer will use its tiny built-in vocabulary" >&2
fi
cp tests/fuzz/run-long.sh "$root/run-long.sh"
cat >"$root/run.sh" <<'RUN'
#!/bin/sh
# run.sh: the long fuzzing campaign from this bundle (made by ocellus's `make fuzz-bundle`).
#   ./run.sh [OUT_DIR]         (default: ./fuzz-out)
# Environment: FUZZ_JOBS (parallel workers per target, default: the CPU count), FUZZ_RUNS
# (executions per target, default 10000000), FUZZ_LONG_SECONDS (cap per target, 0: none),
# FUZZ_TARGETS (names, default all), FUZZ_EXTRA (more libFuzzer flags).
# Prints, per target, executions, crashes and seconds (also OUT_DIR/summary.txt); exits 1 if
# anything crashed. Crash inputs and worker logs are under OUT_DIR/NAME/. Stack traces are not
# symbolized (no llvm-symbolizer), and a frame of the target shows as ".../ld-linux-x86-64.so.2+0xOFF"
# (the loader started it): OFF is an offset in bin/NAME (addr2line -f -e bin/NAME 0xOFF). To rerun
# one input: lib/ld-linux-x86-64.so.2 --library-path lib bin/NAME OUT_DIR/NAME/crash-...
here=$(cd "$(dirname "$0")" && pwd)
out=${1:-fuzz-out}
if [ -z "${FUZZ_JOBS:-}" ]; then
    FUZZ_JOBS=$(getconf _NPROCESSORS_ONLN 2>/dev/null || echo 1)
fi
export FUZZ_JOBS
FUZZ_LOADER="$here/lib/ld-linux-x86-64.so.2 --library-path $here/lib"
export FUZZ_LOADER
[ -f "$here/data/vocab-qwen2.gguf" ] && OC_FUZZ_VOCAB=$here/data/vocab-qwen2.gguf && export OC_FUZZ_VOCAB
echo "ocellus fuzz bundle: $(sed -n 1p "$here/BUILD.txt"); $FUZZ_JOBS workers per target; out: $out"
exec sh "$here/run-long.sh" "$here/bin" "$here/seeds" "$out"
RUN
chmod +x "$root/run.sh" "$root/run-long.sh"
{
    echo "built $(date -u '+%Y-%m-%d %H:%M UTC') from $(git rev-parse --short HEAD 2>/dev/null || echo '?')$(git diff --quiet HEAD 2>/dev/null || echo ' (with local changes)')"
    echo "compiler: $(${FUZZ_CC:-clang} --version | head -n 1)"
    echo "host: $(uname -srm)"
    echo "libraries (lib/): $(ls "$root/lib" | tr '\n' ' ')"
} >"$root/BUILD.txt"
tar -C "$stage" -czf "$out" fuzz-bundle
echo "bundle.sh: $out ($(du -k "$out" | cut -f1) KiB)"
