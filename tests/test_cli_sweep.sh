#!/bin/sh
# test_cli_sweep.sh: every option of every command, found in the CLI's own help texts (so a new
# command or option cannot skip this test): the commands from `ocellus help`, a command's
# subcommands from its --help ("subcommands:" lists), each command's options from its --help.
#  - a bad value (a number or name that cannot be: "zz!x", a path under a folder that does not
#    exist) is refused: exit status != 0 within 30 s and ONE line of output that names the option
#    or the value (free text such as a question or a system prompt has no bad value: skipped);
#  - an option the command does not have is refused the same way.
# Options that work only with others (e.g. --type only with --synth) are refused when given
# without them: tests/test_harden_cli.sh checks those by name.
. tests/support/testlib.sh
bin=${OC_CLI_BIN:-./ocellus}
[ -x "$bin" ] || { skip cli_sweep "no ./ocellus"; exit 0; }
# argument parsing is the same C on every target; under an emulator 130 starts of the CLI cost minutes
[ "${OC_TEST_SLOW:-0}" = 2 ] && { skip cli_sweep_every_option "under an emulator; the native configurations run it"; exit 0; }
run() { timeout 30 $target_exec "$bin" "$@" </dev/null 2>&1; }

# The arguments a command needs before its options are looked at (a question, a file), so the
# option under test is what the command refuses.
base_args() {
  case $1 in
    ask) echo "hi" ;;
    plan | "plan show") echo "examples/plans/demo-blindsight.plan" ;;
    info) echo "examples/demo/ocellus-demo.gguf" ;;
    tokenize) echo "-m examples/demo/ocellus-demo.gguf hi" ;;
    convert) echo "tests/data/models/qwen2vl/hf -o $tmp_dir/conv" ;;
    scene) echo "-o $tmp_dir/scene --items 1" ;;
    eval) echo "--items 1" ;;
    "eval --suite long") echo "-m examples/demo/ocellus-demo.gguf --mmproj examples/demo/ocellus-demo-mmproj.gguf --items 1" ;;
    calibrate) echo "--suite demo --items 1 -o $tmp_dir/c.plan" ;;
    "bench vlm") echo "-m examples/demo/ocellus-demo.gguf --mmproj examples/demo/ocellus-demo-mmproj.gguf -n 1 --pp 0 --images 0 -t 1" ;;
    *) echo "" ;;
  esac
}

commands=$(run help | sed -n '/^commands:/,/^$/s/^  \([a-z][a-z-]*\)  .*/\1/p')
[ -n "$commands" ] || { fail cli_sweep_commands "ocellus help lists no command"; exit 1; }
# serve is built only where configure found libmicrohttpd (elsewhere it says how to get it)
grep -q '^HAVE_SERVER = 1' config.mk 2>/dev/null || commands=$(printf '%s\n' $commands | grep -v -x serve)
lines=""
for c in $commands; do
  lines="$lines$c
"
  help=$(run $c --help)
  subs=$(printf '%s\n' "$help" | sed -n '/^subcommands:/,/^$/s/^  \([a-z][a-z-]*\)  .*/\1/p')
  for s in $subs; do lines="$lines$c $s
"; done
  # modes a help text names with their own --help (eval --suite long)
  printf '%s\n' "$help" | grep -q "ocellus $c --suite long --help" && lines="$lines$c --suite long
"
done

n_checked=0
bad_opts=""
while IFS= read -r cl; do
  [ -n "$cl" ] || continue
  # shellcheck disable=SC2086
  help=$(run $cl --help); hrc=$?
  if [ $hrc -ne 0 ]; then fail "cli_sweep_help" "ocellus $cl --help: exit status $hrc"; continue; fi
  base=$(base_args "$cl")
  opts=$(printf '%s\n' "$help" | grep -o -E '(^|[][ ,(|])--?[a-zA-Z][a-zA-Z0-9-]*' | sed 's/^[][ ,(|]*//' |
         grep -v -x -e -h -e --help | sort -u)
  for o in $opts; do
    # the word after the option in the help text: its value (an upper-case name or a|b list), if any
    meta=$(printf '%s\n' "$help" | grep -o -E -- "(^|[][ ,(|])$o( [^ ]*)?" | sed -n "s/^[][ ,(|]*$o \(.*\)/\1/p" | head -n 1)
    case $meta in
      TEXT | PROMPT | TEXT] | TEXT\) | KEY | NAME) continue ;;   # free text: no bad value
      *FILE* | *DIR* | *.gguf* | *GGUF* | *.plan* | *.svg* | *PREFIX* | *IMAGE* | *OUT*) bad=/nonexistent-ocellus-dir/zz ;;
      [A-Z]* | *\|* | demo | long | '[N]') bad='zz!x' ;;
      *) continue ;;                                          # a flag: no value to get wrong
    esac
    # shellcheck disable=SC2086
    out=$(run $cl $base $o "$bad"); rc=$?
    n=$(printf '%s\n' "$out" | grep -c .)
    if [ $rc -ne 0 ] && [ $rc -ne 124 ] && [ "$n" -eq 1 ] && printf '%s\n' "$out" | grep -q -F -e "$o" -e "$bad"; then
      n_checked=$((n_checked + 1))
    else
      bad_opts="$bad_opts
  ocellus $cl $base $o $bad: exit status $rc, $n lines: $(printf '%s' "$out" | head -n 1 | head -c 160)"
    fi
  done
  # an option the command does not have
  # shellcheck disable=SC2086
  out=$(run $cl $base --zz-no-such-option); rc=$?
  n=$(printf '%s\n' "$out" | grep -c .)
  if [ $rc -ne 0 ] && [ $rc -ne 124 ] && [ "$n" -eq 1 ] && printf '%s\n' "$out" | grep -q -F -e "--zz-no-such-option"; then
    n_checked=$((n_checked + 1))
  else
    bad_opts="$bad_opts
  ocellus $cl $base --zz-no-such-option: exit status $rc, $n lines: $(printf '%s' "$out" | head -n 1 | head -c 160)"
  fi
done <<EOF
$lines
EOF
echo "# $n_checked option cases refused with one line, over: $(printf '%s' "$lines" | tr '\n' ',')"
if [ -z "$bad_opts" ]; then pass cli_sweep_every_option
else fail cli_sweep_every_option "not refused with one line:$bad_opts"; fi
exit $failed
