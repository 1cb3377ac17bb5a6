# testlib.sh: what the shell tests (tests/test_*.sh) share. Sourced from the repository root, where
# tests/run.sh starts them. Results are the lines run.sh counts: "PASS name", "FAIL name: why",
# "SKIP name: why"; lines starting with "# " are notes. A script ends with `exit $failed`.

# cfg VAR: the value configure wrote into config.mk
cfg() { sed -n "s/^$1 = //p" config.mk; }

# shellcheck disable=SC2034  # failed is read by the sourcing script
failed=0
pass() { echo "PASS $1"; }
# shellcheck disable=SC2034
fail() { n=$1; shift; echo "FAIL $n: $*"; failed=1; }
skip() { n=$1; shift; echo "SKIP $n: $*"; }

# run_target PROGRAM ARGS...: a program built for the target (through qemu in cross builds)
target_exec=$(cfg TARGET_EXEC)
# shellcheck disable=SC2086
run_target() { $target_exec "$@"; }

# The target's binutils: the cross ones next to the configured archiver when they exist.
ar_tool=$(cfg AR)
tool() {
  if command -v "${ar_tool%ar}$1" >/dev/null 2>&1; then echo "${ar_tool%ar}$1"; else echo "$1"; fi
}

tmp_dir=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp_dir"' EXIT INT TERM
