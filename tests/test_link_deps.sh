#!/bin/sh
# test_link_deps.sh: the library needs nothing from the system beyond libc, libm, pthreads, the
# compiler's runtime and the optional libraries the configuration found (config.mk DEP_LIBS; none in
# the minimal configuration ./configure --disable-opencl --disable-clblast --disable-sleef
# --disable-libjpeg --disable-libpng). Checked three ways: libocellus.so's NEEDED entries; the
# static library linked whole into a shared object with -z defs against exactly those libraries
# (any undefined symbol from elsewhere fails the link); the CLI's NEEDED entries (which may add the
# server's SERVER_LIBS, never the library's).
. tests/support/testlib.sh

if [ -n "$(cfg SAN_FLAGS)" ]; then
  skip link_deps "sanitizer builds also link the sanitizer runtimes; run this in a build without them"
  exit $failed
fi
dep_libs=$(cfg DEP_LIBS)
readelf=$(tool readelf)
nm=$(tool nm)

# The allowed shared libraries: glibc's (libc, libm, libpthread, the dynamic loader), libgcc_s,
# and lib<name>.so.* for every -l<name> in DEP_LIBS.
allowed='libc.so.* libm.so.* libpthread.so.* ld-linux*.so.* libgcc_s.so.*'
for f in $dep_libs; do
  case $f in -l*) allowed="$allowed lib${f#-l}.so*" ;; esac
done
if [ -z "$dep_libs" ]; then echo "# minimal configuration: libc, libm, pthreads only"; else echo "# optional libraries: $dep_libs"; fi

# check_needed NAME FILE: every NEEDED entry of FILE matches one of $allowed
check_needed() {
  needed=$($readelf -d "$2" 2>/dev/null | sed -n 's/.*(NEEDED).*\[\(.*\)\]$/\1/p')
  [ -n "$needed" ] || { fail "$1" "$readelf -d $2 listed no NEEDED entries"; return; }
  bad=
  for n in $needed; do
    ok=0
    for a in $allowed; do
      # shellcheck disable=SC2254
      case $n in $a) ok=1 ;; esac
    done
    [ $ok = 1 ] || bad="$bad $n"
  done
  # shellcheck disable=SC2086
  echo "# $2 NEEDED:" $needed
  if [ -z "$bad" ]; then pass "$1"; else fail "$1" "$2 needs libraries the configuration did not ask for:$bad"; fi
}

check_needed so_needed libocellus.so

# shellcheck disable=SC2046,SC2086
if $(cfg CC) -shared -o "$tmp_dir/whole.so" -Wl,--whole-archive libocellus.a -Wl,--no-whole-archive \
     -Wl,-z,defs $(cfg USER_LDFLAGS) $dep_libs -lm -pthread >"$tmp_dir/link.log" 2>&1; then
  pass archive_undefined_resolved
else
  sed 's/^/# /' "$tmp_dir/link.log" | head -20
  fail archive_undefined_resolved "libocellus.a has undefined symbols outside libc, libm, pthreads and DEP_LIBS"
fi
# The list, for the record: undefined in some member and defined in none.
ext=$($nm libocellus.a 2>/dev/null | awk '$1 == "U" { u[$2] = 1 } NF == 3 && $2 != "U" { d[$3] = 1 }
      END { for (s in u) if (!(s in d)) print s }' | sort | tr '\n' ' ')
# shellcheck disable=SC2086
set -- $ext
echo "# symbols libocellus.a takes from the system ($#): $ext"

# the CLI alone also links the server's HTTP library when configure found it (SERVER_LIBS)
for f in $(cfg SERVER_LIBS); do
  case $f in -l*) allowed="$allowed lib${f#-l}.so*" ;; esac
done
check_needed cli_needed ocellus
exit $failed
