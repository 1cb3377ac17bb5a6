#!/bin/sh
# test_python.sh: the Python binding (examples/python/ocellus.py, ctypes over libocellus.so) answers
# "green" on the demo from a path, bytes and a pixel buffer, streams, raises the library's message
# on a missing file, and gives back every byte it took through a counting allocator
# (tests/python/test_binding.py).
. tests/support/testlib.sh
if ! command -v python3 >/dev/null 2>&1; then skip python_binding "no python3"; exit 0; fi
if [ -n "$target_exec" ]; then skip python_binding "cross build: the host's python3 cannot load the target's libocellus.so"; exit 0; fi
if [ -n "$(cfg SAN_FLAGS)" ]; then
  skip python_binding "sanitizer build: python3 is not instrumented, so it cannot load this libocellus.so"
  exit 0
fi
[ -f libocellus.so ] || { fail python_binding "libocellus.so is not built"; exit $failed; }
OCELLUS_LIB=$PWD/libocellus.so python3 tests/python/test_binding.py || failed=1
exit $failed
