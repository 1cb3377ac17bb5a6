#!/bin/sh
# test_cli_args.sh: every number the CLI reads goes through oc_tool_int_arg
# (examples/cli/args.c): out of range, negative, overflowing or trailing junk stops the
# command at once with status 2 and one line naming the option (issue 21 finding 6: atoi took "-1"
# and 99999999999, and a bench then ran with them). `timeout` turns a command that goes on running
# into a failure.
. tests/support/testlib.sh
bin=${OC_CLI_BIN:-./ocellus}
[ -x "$bin" ] || { skip cli_numbers "no ./ocellus"; exit 0; }
check() {   # NAME OPTION ARGS...
  name=$1; opt=$2; shift 2
  out=$(timeout 20 $target_exec "$bin" "$@" 2>&1 </dev/null); rc=$?
  if [ "$rc" -eq 2 ] && printf '%s\n' "$out" | grep -q -- "$opt wants a whole number"; then
    pass "$name"
  else
    fail "$name" "ocellus $*: exit status $rc, output: $(printf '%s' "$out" | head -c 200)"
  fi
}
check cli_bench_attention_threads_negative -t bench attention --quick --reps 1 -t -1
check cli_bench_attention_reps_overflow --reps bench attention --quick --reps 99999999999
check cli_bench_attention_images_junk --images bench attention --quick --images 12abc
check cli_bench_matmul_threads_negative -t bench matmul --reps 1 --types f32 -t -1
check cli_bench_vlm_new_overflow -n bench vlm -m missing.gguf -n 99999999999
check cli_tokenize_time_overflow --time tokenize -m missing.gguf --time 99999999999 hi

# bench vlm with no image case (--images ''): the text case alone runs (it used to refuse the
# context's image limits); a --pp shorter than the chat template is refused with a message (it
# used to exit 1 silently after a failed allocation)
demo="-m examples/demo/ocellus-demo.gguf --mmproj examples/demo/ocellus-demo-mmproj.gguf"
out=$(timeout 120 $target_exec "$bin" bench vlm $demo --images '' --pp 64 -n 2 -t 1 2>&1); rc=$?
if [ "$rc" -eq 0 ] && printf '%s\n' "$out" | grep -q '^| text pp64 |'; then pass cli_bench_vlm_text_only
else fail cli_bench_vlm_text_only "exit status $rc: $(printf '%s' "$out" | tail -n 3)"; fi
out=$(timeout 120 $target_exec "$bin" bench vlm $demo --images '' --pp 8 -n 2 -t 1 2>&1); rc=$?
if [ "$rc" -ne 0 ] && printf '%s\n' "$out" | grep -q -- '--pp 8: the chat template alone takes'; then pass cli_bench_vlm_pp_too_short
else fail cli_bench_vlm_pp_too_short "exit status $rc: $(printf '%s' "$out" | tail -n 2)"; fi
exit $failed
