#!/bin/sh
# test_install.sh: `make install PREFIX=DIR` puts the headers (ocellus.h and the GGUF API's
# ocellus_gguf.h), both libraries, ocellus.pc and the CLI under DIR, the GGUF header compiles on
# its own through pkg-config's flags, and examples/embed/embed.c builds against that tree through
# pkg-config alone, as docs/embedding.md shows: linked to libocellus.so, and fully
# static (-static, in the configurations whose optional libraries all have static archives: the
# minimal one). Both run.
# Cross builds use the host pkg-config with PKG_CONFIG_LIBDIR pointing only at DIR.
. tests/support/testlib.sh
prefix=$tmp_dir/prefix
model=${OC_EMBED_MODEL:-examples/demo/ocellus-demo.gguf examples/demo/ocellus-demo-mmproj.gguf}
cc=$(cfg CC)
san=$(cfg SAN_FLAGS)

# MAKEFLAGS would hand the jobserver of the make running this test to a make it cannot reach.
if ! env -u MAKEFLAGS -u MFLAGS "${MAKE:-make}" -s install PREFIX="$prefix" >"$tmp_dir/install.log" 2>&1; then
  sed 's/^/# /' "$tmp_dir/install.log" | tail -20
  fail make_install "make install PREFIX=$prefix failed"
  exit $failed
fi
missing=
for f in include/ocellus.h include/ocellus_gguf.h lib/libocellus.a lib/libocellus.so lib/pkgconfig/ocellus.pc bin/ocellus; do
  [ -f "$prefix/$f" ] || missing="$missing $f"
done
for f in share/ocellus/demo/ocellus-demo.gguf share/ocellus/demo/ocellus-demo-mmproj.gguf share/ocellus/demo/shapes.ppm \
         share/ocellus/demo/shapes.jpg share/ocellus/long/ocellus-long.gguf share/ocellus/long/ocellus-long-mmproj.gguf; do
  [ -f "$prefix/$f" ] || missing="$missing $f"
done
if [ -z "$missing" ]; then pass make_install; else fail make_install "not installed:$missing"; fi

# The CLI finds the bundled models from any folder: an in-tree build run from /, and a staged
# install (DESTDIR, as packagers do) run from / with no -m, on the JPEG when libjpeg is built in.
picture=shapes.ppm
[ "$(cfg HAVE_LIBJPEG)" = 1 ] && picture=shapes.jpg
question="What color is the circle in image 1?"
# ask_from_root NAME PROGRAM PICTURE: runs PROGRAM ask from /, which must answer green
ask_from_root() {
  out=$(cd / && LD_LIBRARY_PATH=$prefix/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} run_target "$2" ask -t 2 -i "$3" "$question" 2>"$tmp_dir/$1.err"); rc=$?
  sed 's/^/# /' "$tmp_dir/$1.err"
  if [ "$rc" -eq 0 ] && [ "$out" = green ] && ! grep -q warning "$tmp_dir/$1.err"; then
    pass "$1"
  else
    fail "$1" "exit status $rc, answer '$out' from / (expected green, no warning)"
  fi
}
ask_from_root demo_in_tree_from_root "$PWD/ocellus" "$PWD/examples/demo/$picture"
stage=$tmp_dir/stage
if env -u MAKEFLAGS -u MFLAGS "${MAKE:-make}" -s install DESTDIR="$stage" PREFIX=/opt/ocellus >"$tmp_dir/stage.log" 2>&1; then
  ask_from_root demo_installed_from_root "$stage/opt/ocellus/bin/ocellus" "$stage/opt/ocellus/share/ocellus/demo/$picture"
  # eval --suite long finds the installed long model by itself (one item of 8 images: seconds
  # natively, minutes under an emulator, where test_eval_long.sh skips the runs too)
  if [ "${OC_TEST_SLOW:-0}" = 2 ]; then
    skip eval_long_default_model "under an emulator; the native configurations run it"
  else
  out=$(cd / && run_target "$stage/opt/ocellus/bin/ocellus" eval --suite long --items 1 --max-images 8 --types detail -t 2 2>&1); rc=$?
  printf '%s\n' "$out" | grep -E '^(model|detail)' | sed 's/^/# /'
  if [ "$rc" -eq 0 ] && printf '%s\n' "$out" | grep -q 'ocellus-long'; then
    pass eval_long_default_model
  else
    printf '%s\n' "$out" | tail -5 | sed 's/^/# /'
    fail eval_long_default_model "exit status $rc; eval --suite long with no -m did not run the installed long model"
  fi
  fi
else
  sed 's/^/# /' "$tmp_dir/stage.log" | tail -20
  fail demo_installed_from_root "make install DESTDIR=$stage PREFIX=/opt/ocellus failed"
fi

pkg_config=${PKG_CONFIG:-pkg-config}
if ! command -v "$pkg_config" >/dev/null 2>&1; then
  skip embed_via_pkg_config "no pkg-config on this machine"
  exit $failed
fi
if [ -n "$target_exec" ]; then
  pc() { PKG_CONFIG_LIBDIR=$prefix/lib/pkgconfig "$pkg_config" "$@"; }
else
  pc() { PKG_CONFIG_PATH=$prefix/lib/pkgconfig "$pkg_config" "$@"; }
fi

# The GGUF API's header stands alone (it brings ocellus.h itself) from the installed tree.
printf '#include <ocellus_gguf.h>\nint main(void) { oc_gguf_close(0); return (int)OC_GGUF_NONE - 13; }\n' >"$tmp_dir/gguf_probe.c"
# shellcheck disable=SC2046
if $cc -std=c11 -Wall -Wextra -Werror -fsyntax-only "$tmp_dir/gguf_probe.c" $(pc --cflags ocellus) >"$tmp_dir/gguf_probe.log" 2>&1; then
  pass gguf_header_installed
else
  sed 's/^/# /' "$tmp_dir/gguf_probe.log" | tail -20
  fail gguf_header_installed "the installed ocellus_gguf.h does not compile alone"
fi

# build_and_run NAME [CC FLAGS...]: compiles examples/embed/embed.c into $tmp_dir/NAME, runs it
build_and_run() {
  name=$1; shift
  if ! "$@" >"$tmp_dir/$name.log" 2>&1; then
    sed 's/^/# /' "$tmp_dir/$name.log" | tail -20
    fail "$name" "build failed: $*"
    return
  fi
  # the installed library first; keep the caller's path too (optional libraries such as CLBlast
  # may live outside the loader's default directories)
  # shellcheck disable=SC2086
  out=$(LD_LIBRARY_PATH=$prefix/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} run_target "$tmp_dir/$name" $model 2>&1); rc=$?
  printf '%s\n' "$out" | sed 's/^/# /'
  if [ "$rc" -eq 0 ] && printf '%s\n' "$out" | grep -q ', 0 bytes not freed$'; then
    pass "$name"
  else
    fail "$name" "built with: $*; exit status $rc"
  fi
}

# shellcheck disable=SC2046,SC2086
build_and_run embed_shared $cc $san examples/embed/embed.c -o "$tmp_dir/embed_shared" $(pc --cflags --libs ocellus)
if [ -n "$(cfg DEP_LIBS)" ] || [ -n "$san" ]; then
  skip embed_static "a fully static link needs static archives of $(cfg DEP_LIBS)${san:+ and the sanitizer runtimes} (the minimal configuration runs this)"
else
  # shellcheck disable=SC2046,SC2086
  build_and_run embed_static $cc -static examples/embed/embed.c -o "$tmp_dir/embed_static" $(pc --cflags --libs --static ocellus)
fi
exit $failed
