#!/bin/sh
# test_lib_contents.sh: the runtime library holds runtime code only. Firmware links libocellus.a,
# so the tools (converter, JSON, safetensors, scenes and eval, roofline: examples/tools/, built
# into build/libocellus-tools.a for the CLI and the tests) must not be inside it: no member named
# after a tools source, and no global symbol that the tools library defines.
. tests/support/testlib.sh

nm=$(tool nm)
ar=$(cfg AR)
tools_lib=build/libocellus-tools.a
[ -f libocellus.a ] && [ -f "$tools_lib" ] || { fail lib_contents "libocellus.a or $tools_lib is not built"; exit $failed; }

members=$($ar t libocellus.a)
bad=
for src in examples/tools/*.c examples/cli/*.c; do
  o=$(basename "$src" .c).o
  for m in $members; do [ "$m" = "$o" ] && bad="$bad $o"; done
done
if [ -z "$bad" ]; then pass no_tool_objects; else fail no_tool_objects "libocellus.a holds tool objects:$bad"; fi

# global symbols each archive defines (T, D, B, R, ...: anything but U and weak/local)
$nm -g --defined-only libocellus.a 2>/dev/null | awk 'NF == 3 { print $3 }' | sort -u >"$tmp_dir/lib.sym"
$nm -g --defined-only "$tools_lib" 2>/dev/null | awk 'NF == 3 { print $3 }' | sort -u >"$tmp_dir/tools.sym"
n_lib=$(wc -l <"$tmp_dir/lib.sym")
n_tools=$(wc -l <"$tmp_dir/tools.sym")
both=$(comm -12 "$tmp_dir/lib.sym" "$tmp_dir/tools.sym" | tr '\n' ' ')
echo "# libocellus.a defines $n_lib global symbols, $tools_lib $n_tools"
if [ "$n_lib" -gt 0 ] && [ "$n_tools" -gt 0 ] && [ -z "$both" ]; then
  pass no_tool_symbols
else
  fail no_tool_symbols "symbols in both libraries (or a list came back empty): $both"
fi
exit $failed
