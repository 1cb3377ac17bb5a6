#!/bin/sh
# test_calibrate_cli.sh: `ocellus calibrate` end to end on the demo model (a few prompts of the
# built-in suite and of folders `ocellus scene` wrote, the long suite's too): the plan it writes loads, names its
# calibration, the runtime takes it (`ocellus plan` exits 0), the same plan comes out with 1 and 2
# threads, `ocellus plan show --svg` draws it, `ocellus plan` says what each backend runs, `--alpha A:B`
# (the Linear alpha_layer) names itself and A:A equals the fixed A, every shipped plan loads, and bad
# arguments exit 2 with a message. On the long model (examples/long): the budget's validation counts
# what eval counts, gives the same numbers with 2 item workers (--val-jobs), and runs on OpenCL.
. tests/support/testlib.sh
bin=./ocellus

# Under an emulator (tests/run.sh: OC_TEST_SLOW=2) each calibration prompt costs half a minute: the
# two calibrations run one prompt each, and the second runs of the thread-count checks, the
# long-suite folder and the MMInference search are left to the native configurations, which run
# every case.
emu=0; [ "${OC_TEST_SLOW:-0}" = 2 ] && emu=1
n_items=4 n_folder=3; [ $emu = 1 ] && n_items=1 n_folder=1
out=$(run_target $bin calibrate --suite demo --items $n_items -t 1 -o "$tmp_dir/t1.plan" --report "$tmp_dir/r.txt" 2>&1); rc=$?
printf '%s\n' "$out" | tail -n 2 | sed 's/^/# /'
if [ "$rc" -eq 0 ] && grep -q '^calibration tool=ocellus-calibrate methods=' "$tmp_dir/t1.plan" &&
   grep -q '^## BlindSight' "$tmp_dir/r.txt" && run_target $bin plan "$tmp_dir/t1.plan" >/dev/null 2>&1; then
  pass calibrate_suite_plan_loads
else
  fail calibrate_suite_plan_loads "exit status $rc, or the plan lacks its calibration line, or ocellus plan refused it"
fi

[ $emu = 1 ] || run_target $bin calibrate --suite demo --items 4 -t 2 -o "$tmp_dir/t2.plan" >/dev/null 2>&1
if [ $emu = 1 ]; then
  skip calibrate_thread_count_independent "under an emulator; the native configurations run it"
elif cmp -s "$tmp_dir/t1.plan" "$tmp_dir/t2.plan"; then
  pass calibrate_thread_count_independent
else
  fail calibrate_thread_count_independent "-t 1 and -t 2 wrote different plans"
fi

run_target $bin scene -o "$tmp_dir/scenes" --items 3 --seed 9 >/dev/null 2>&1
out=$(run_target $bin calibrate --data "$tmp_dir/scenes" --items $n_folder --methods blindsight,sparsemm -t 2 -o "$tmp_dir/d.plan" 2>&1); rc=$?
if [ "$rc" -eq 0 ] && grep -q 'data=' "$tmp_dir/d.plan" && grep -q 'kv-budget' "$tmp_dir/d.plan"; then
  pass calibrate_data_folder
else
  fail calibrate_data_folder "exit status $rc: $out"
fi

if [ $emu = 0 ]; then
  run_target $bin scene --suite long -o "$tmp_dir/long" --items 1 --seed 4 --images-per-item 8-8 >/dev/null 2>&1
  out=$(run_target $bin calibrate --data "$tmp_dir/long" --max-images 8 --side 448 --methods blindsight -t 2 \
        -o "$tmp_dir/long.plan" 2>&1); rc=$?
fi
if [ $emu = 1 ]; then
  skip calibrate_long_suite_folder "under an emulator; the native configurations run it"
elif [ "$rc" -eq 0 ] && grep -q '^decoder default' "$tmp_dir/long.plan"; then
  pass calibrate_long_suite_folder
else
  fail calibrate_long_suite_folder "exit status $rc: $out"
fi

if run_target $bin plan show "$tmp_dir/t1.plan" --svg "$tmp_dir/p.svg" >/dev/null 2>&1 && grep -q '</svg>' "$tmp_dir/p.svg"; then
  pass plan_show_svg
else
  fail plan_show_svg "no SVG written"
fi

# MMInference's search (Table 3 scaled to the demo's ~150-token prompts): a plan of dynamic heads
# the runtime runs, the same with 1 and 2 threads; blindsight + mminference is refused
if [ $emu = 0 ]; then
  out=$(run_target $bin calibrate --suite demo --items 3 --methods mminference --mminf-scale 0.01 -t 1 \
        -o "$tmp_dir/mm1.plan" --report "$tmp_dir/mm.txt" 2>&1); rc=$?
  run_target $bin calibrate --suite demo --items 3 --methods mminference --mminf-scale 0.01 -t 2 \
    -o "$tmp_dir/mm2.plan" >/dev/null 2>&1
fi
if [ $emu = 1 ]; then
  skip calibrate_mminference "under an emulator; the native configurations run it"
elif [ "$rc" -eq 0 ] && grep -q 'mminference=table3:scale=0.01' "$tmp_dir/mm1.plan" &&
   grep -Eq '^decoder (default|layer).*(vertical-slash|grid|a-shape)\(' "$tmp_dir/mm1.plan" &&
   grep -q '^## MMInference' "$tmp_dir/mm.txt" && cmp -s "$tmp_dir/mm1.plan" "$tmp_dir/mm2.plan" &&
   run_target $bin eval --items 2 --plan "$tmp_dir/mm1.plan" -t 2 >/dev/null 2>&1; then
  pass calibrate_mminference
else
  fail calibrate_mminference "exit status $rc, or the plan has no dynamic heads, differs by thread count or does not run: $out"
fi
run_target $bin calibrate --suite demo --methods blindsight,mminference -o "$tmp_dir/x.plan" >/dev/null 2>"$tmp_dir/err"
rc=$?
if [ "$rc" -eq 2 ] && grep -q 'one of them' "$tmp_dir/err"; then pass calibrate_mminference_exclusive
else fail calibrate_mminference_exclusive "exit status $rc"; fi
# `ocellus plan` says per section what each backend runs (issue 19), the patterns as the executors
# report them (issue 20: VS / Grid / Q-Boundary sparse in prefill on both), the KV
# cache sections on both, ZipVL and lazy groups refused for the vision encoder
mm=$(run_target $bin plan examples/plans/demo-mminference.plan 2>&1)
kv=$(run_target $bin plan examples/plans/demo-kvcache.plan 2>&1)
qb=$(run_target $bin plan tests/fuzz/corpus/fuzz_plan/q-boundary.plan 2>&1)
if printf '%s' "$mm" | grep -Eq 'vertical-slash .*runtime: CPU executes in prefill \(decode runs them dense\), OpenCL (executes in prefill \(decode runs them dense\)|not built)' &&
   printf '%s' "$qb" | grep -Eq 'q-boundary .*runtime: CPU executes in prefill \(decode runs them dense\), OpenCL (executes in prefill \(decode runs them dense\)|not built)' &&
   printf '%s' "$kv" | grep -q 'kv budgets: .*runtime: CPU executes, OpenCL executes' &&
   printf '%s' "$kv" | grep -q 'zipvl-tau: .*runtime: CPU executes, OpenCL executes' &&
   printf '%s' "$kv" | grep -q 'lazy groups: .*runtime: CPU executes, OpenCL executes'; then
  pass plan_says_what_each_backend_runs
else
  fail plan_says_what_each_backend_runs "$mm $kv"
fi

# ZipVL's output check (ours): the demo's layers measure 0.0001-0.21, so a threshold of 0.01 leaves
# all but layer 0 dense; stdout names each with its NMSE, the plan keeps layer 0's line alone and
# records the threshold, and it loads; a negative threshold is refused
if [ $emu = 0 ]; then
  out=$(run_target $bin calibrate --suite demo --items 4 --methods zipvl --zipvl-max-nmse 0.01 -t 2 -o "$tmp_dir/z.plan" 2>/dev/null); rc=$?
  run_target $bin calibrate --suite demo --methods zipvl --zipvl-max-nmse -1 -o "$tmp_dir/x.plan" >/dev/null 2>&1; rc2=$?
fi
if [ $emu = 1 ]; then
  skip calibrate_zipvl_output_check "under an emulator; the native configurations run it"
elif [ "$rc" -eq 0 ] && [ "$rc2" -eq 2 ] &&
   printf '%s\n' "$out" | grep -q '^ZipVL: layer 4 left dense: above the threshold (output NMSE 0\.[0-9]*' &&
   ! printf '%s\n' "$out" | grep -q '^ZipVL: layer 0 left dense' &&
   [ "$(grep -c '^decoder .*zipvl-tau' "$tmp_dir/z.plan")" -eq 1 ] && grep -q '^decoder layer 0 zipvl-tau 0.97' "$tmp_dir/z.plan" &&
   grep -q 'zipvl_max_nmse=0.01' "$tmp_dir/z.plan" && run_target $bin plan "$tmp_dir/z.plan" >/dev/null 2>&1; then
  pass calibrate_zipvl_output_check
else
  fail calibrate_zipvl_output_check "exit statuses $rc and $rc2 (want 0 and 2), or the layers left dense differ: $out"
fi

# Sec. 5's Linear alpha_layer: A:B names itself in the plan and the report, and A:A is the fixed A
# (alpha bookkeeping, no kernel of its own: left to the native configurations under an emulator)
[ $emu = 1 ] || { out=$(run_target $bin calibrate --suite demo --items $n_items -t 2 --alpha 0.1:0.1 -o "$tmp_dir/lin.plan" --report "$tmp_dir/lin.txt" 2>&1); rc=$?; }
if [ $emu = 1 ]; then
  skip calibrate_linear_alpha "under an emulator; the native configurations run it"
elif [ "$rc" -eq 0 ] && grep -q 'alpha_gd_gs_gi=0.1:0.1,' "$tmp_dir/lin.plan" && grep -q '^## BlindSight (alpha 0.1 + (0.1 - 0.1) \* layer / ' "$tmp_dir/lin.txt" &&
   grep -v '^calibration ' "$tmp_dir/t1.plan" > "$tmp_dir/fixed.body" && grep -v '^calibration ' "$tmp_dir/lin.plan" > "$tmp_dir/lin.body" &&
   cmp -s "$tmp_dir/fixed.body" "$tmp_dir/lin.body"; then
  pass calibrate_linear_alpha
else
  fail calibrate_linear_alpha "exit status $rc, or the plan's calibration line or the report's header lacks the scheme, or --alpha 0.1:0.1 chose differently from --alpha 0.1: $out"
fi
not_refused=""
for bad in 0.1: :0.2 0.1:x 0.1:0.2:0.3 0.1:-1; do
  run_target $bin calibrate --suite demo --alpha "$bad" -o "$tmp_dir/x.plan" 2>"$tmp_dir/err" >/dev/null; rc=$?
  [ "$rc" -eq 2 ] && grep -qF "bad value for --alpha: $bad" "$tmp_dir/err" || not_refused="$not_refused $bad (exit status $rc)"
done
if [ -z "$not_refused" ]; then pass calibrate_bad_alpha; else fail calibrate_bad_alpha "not refused with a message:$not_refused"; fi

# every plan the repository ships loads (calibrated ones name their calibration)
bad_plans=""
for p in examples/plans/*.plan; do
  out=$(run_target $bin plan "$p" 2>&1) || bad_plans="$bad_plans $p"
  case $p in *-calibrated-*) printf '%s' "$out" | grep -q '^calibrated: tool=ocellus-calibrate' || bad_plans="$bad_plans $p(no calibration line)" ;; esac
done
if [ -z "$bad_plans" ]; then pass example_plans_load; else fail example_plans_load "refused:$bad_plans"; fi

# the accuracy budget: a validation seed of its own, printed and named in the plan, never the
# calibration's (tests/test_calibrate_budget.c checks the back-off itself); refused for --data
if [ $emu = 1 ]; then
  skip calibrate_budget_cli "under an emulator; the native configurations run it"
  skip calibrate_budget_long_suite "under an emulator; the native configurations run it"
  skip calibrate_greedy_cli "under an emulator; the native configurations run it"
  skip calibrate_greedy_candidate_file "under an emulator; the native configurations run it"
else
  out=$(run_target $bin calibrate --suite demo --items 2 -t 2 --methods blindsight --val-items 4 --max-loss 100 \
        -o "$tmp_dir/b.plan" 2>&1); rc=$?
  vs=$(printf '%s\n' "$out" | sed -n 's/^budget: validation on 4 demo-suite scenes of seed \([0-9]*\) (derived from the calibration seed 2000002).*/\1/p')
  run_target $bin calibrate --data "$tmp_dir/scenes" --val-items 4 -o "$tmp_dir/x.plan" 2>"$tmp_dir/err" >/dev/null; rc2=$?
  if [ "$rc" -eq 0 ] && [ -n "$vs" ] && [ "$vs" != 2000002 ] && [ "$vs" != 1000001 ] &&
     printf '%s\n' "$out" | grep -q '^budget: within: ' &&
     grep -q "budget=max_loss=100:val_items=4:val_seed=$vs:backoff=layers:backed_off_layers=none" "$tmp_dir/b.plan" &&
     [ ! -e "$tmp_dir/b.plan.candidate" ] && [ "$rc2" -eq 2 ] && grep -q 'needs --val-suite demo|long' "$tmp_dir/err"; then
    pass calibrate_budget_cli
  else
    fail calibrate_budget_cli "exit statuses $rc and $rc2 (want 0 and 2), validation seed '$vs': $out"
  fi
  # --search greedy: every candidate validated and listed, the picks combined, the pictures beside the report
  mkdir -p "$tmp_dir/gcd"
  out=$(run_target $bin calibrate --suite demo --items 4 -t 2 --methods blindsight,qcache --val-items 4 --search greedy \
        --candidates-dir "$tmp_dir/gcd" -o "$tmp_dir/g.plan" --report "$tmp_dir/g.txt" 2>&1); rc=$?
  n_cd=$(ls "$tmp_dir/gcd"/blindsight-*.plan "$tmp_dir/gcd"/qcache-*.plan 2>/dev/null | wc -l)
  run_target $bin plan "$tmp_dir/gcd/blindsight-alpha_0.1.plan" >/dev/null 2>&1; rc_cd=$?
  run_target $bin calibrate --suite demo --items 1 --search greedy -o "$tmp_dir/x.plan" 2>"$tmp_dir/err" >/dev/null; rc2=$?
  n_bs=$(grep -c '^blindsight ' "$tmp_dir/g.txt" 2>/dev/null); n_qc=$(grep -c '^qcache ' "$tmp_dir/g.txt" 2>/dev/null)
  if [ "$rc" -eq 0 ] && printf '%s\n' "$out" | grep -q '^greedy: [0-9]*/4 right' && [ "$n_bs" -eq 6 ] && [ "$n_qc" -eq 4 ] &&
     [ "$n_cd" -eq 10 ] && [ "$rc_cd" -eq 0 ] &&
     grep -q '^## Frontier' "$tmp_dir/g.txt" && grep -q '^## Greedy combination' "$tmp_dir/g.txt" &&
     grep -q 'budget=max_loss=1:val_items=4:val_seed=[0-9]*:search=greedy:kept=' "$tmp_dir/g.plan" &&
     grep -q '^# Greedy combined plan' "$tmp_dir/g.plan" && run_target $bin plan "$tmp_dir/g.plan" >/dev/null 2>&1 &&
     head -c 4 "$tmp_dir/g.txt.frontier.svg" | grep -q '<svg' && ! grep -q -i nan "$tmp_dir/g.txt.frontier.svg" &&
     grep -q '</svg>' "$tmp_dir/g.txt.frontier.svg" && grep -q '</svg>' "$tmp_dir/g.txt.qcache.svg" &&
     grep -q -e '^no lazy group: ' -e '^pairs below epsilon' "$tmp_dir/g.txt" &&
     [ "$rc2" -eq 2 ] && grep -q 'needs --val-items' "$tmp_dir/err" && [ "$(grep -c . "$tmp_dir/err")" -eq 1 ]; then
    pass calibrate_greedy_cli
  else
    fail calibrate_greedy_cli "exit statuses $rc and $rc2 (want 0 and 2), $n_bs and $n_qc candidates listed (want 6, 4), $n_cd written to --candidates-dir (want 10, plan exit $rc_cd): $out"
  fi
  # --candidate METHOD=FILE: a plan file joins its method's candidates; only with --search greedy
  out=$(run_target $bin calibrate --suite demo --items 2 -t 2 --methods qcache --val-items 2 --search greedy \
        --candidate mminference=examples/plans/demo-mminference.plan -o "$tmp_dir/gc.plan" --report "$tmp_dir/gc.txt" 2>&1); rc=$?
  run_target $bin calibrate --suite demo --items 1 --candidate mminference=examples/plans/demo-mminference.plan \
      -o "$tmp_dir/x.plan" 2>"$tmp_dir/err" >/dev/null; rc2=$?
  run_target $bin calibrate --suite demo --items 1 --search greedy --val-items 1 --candidate sparsemm,zipvl=examples/plans/demo-mminference.plan \
      -o "$tmp_dir/x.plan" 2>"$tmp_dir/err3" >/dev/null; rc3=$?
  # a plan for another model is refused before the calibration runs
  run_target $bin calibrate --suite demo --items 1 --search greedy --val-items 1 \
      --candidate blindsight=examples/plans/qwen2vl-2b-example.plan -o "$tmp_dir/x.plan" 2>"$tmp_dir/err4" >/dev/null; rc4=$?
  if [ "$rc" -eq 0 ] && grep -q '^mminference  *demo-mminference.plan ' "$tmp_dir/gc.txt" &&
     [ "$rc4" -eq 1 ] && grep -q -- '--candidate: plan is for 28 decoder layers' "$tmp_dir/err4" && ! grep -q 'prompts' "$tmp_dir/err4" &&
     [ "$rc2" -eq 2 ] && grep -q 'is for --search greedy' "$tmp_dir/err" &&
     [ "$rc3" -eq 2 ] && [ "$(grep -c . "$tmp_dir/err3")" -eq 1 ] && grep -q 'bad value for --candidate' "$tmp_dir/err3"; then
    pass calibrate_greedy_candidate_file
  else
    fail calibrate_greedy_candidate_file "exit statuses $rc, $rc2, $rc3, $rc4 (want 0, 2, 2, 1): $out"
  fi
  # the long suite's validation scenes (the demo model answers few of them; the path is what is tested)
  out=$(run_target $bin calibrate --data "$tmp_dir/long" --max-images 8 --side 448 --methods blindsight -t 2 \
        --val-suite long --val-items 1 --max-loss 100 -o "$tmp_dir/lb.plan" 2>&1); rc=$?
  if [ "$rc" -eq 0 ] && printf '%s\n' "$out" | grep -q '^budget: validation on 1 long-suite scenes of seed' &&
     printf '%s\n' "$out" | grep -q '^budget: within: ' && grep -q 'budget=max_loss=100:val_items=1:' "$tmp_dir/lb.plan"; then
    pass calibrate_budget_long_suite
  else
    fail calibrate_budget_long_suite "exit status $rc: $out"
  fi
fi

# The long model's validation: eval --suite long's own items (a list answer counted whole, as eval
# counts it), the same numbers with 2 item workers as with one, and on OpenCL where a device opens.
long_m=examples/long/ocellus-long.gguf long_v=examples/long/ocellus-long-mmproj.gguf
if [ $emu = 1 ]; then
  skip calibrate_budget_long_model "under an emulator; the native configurations run it"
elif [ ! -f "$long_m" ] || [ ! -f "$long_v" ]; then
  skip calibrate_budget_long_model "no long model in examples/long"
else
  run_target $bin scene --suite long -o "$tmp_dir/long1" --items 1 --seed 2000002 --images-per-item 8-8 >/dev/null 2>&1
  for j in 1 2; do
    run_target $bin calibrate -m $long_m --mmproj $long_v --data "$tmp_dir/long1" --max-images 32 --side 448 \
        --methods blindsight -t 2 --val-suite long --val-items 2 --max-loss 100 --val-jobs $j \
        -o "$tmp_dir/lj$j.plan" > "$tmp_dir/lj$j.out" 2>&1; eval "rc$j=\$?"
  done
  vs=$(sed -n 's/^budget: validation on 2 long-suite scenes of seed \([0-9]*\) .*/\1/p' "$tmp_dir/lj1.out")
  n_eval=$(run_target $bin eval --suite long -m $long_m --mmproj $long_v --seed "${vs:-0}" --items 2 -t 2 \
           --prefill-chunk all 2>&1 | sed -n 's/^overall  *\([0-9]*\)  *2 .*/\1/p')
  n_val=$(sed -n 's|^budget: dense  *\([0-9]*\)/2 right.*|\1|p' "$tmp_dir/lj1.out")
  if [ "$rc1" -eq 0 ] && [ "$rc2" -eq 0 ] && [ -n "$n_val" ] && [ "$n_val" = "$n_eval" ] &&
     grep -q '^budget: validations on the CPU, 2 item workers' "$tmp_dir/lj2.out" &&
     [ "$(grep '^budget: [cdw]' "$tmp_dir/lj1.out")" = "$(grep '^budget: [cdw]' "$tmp_dir/lj2.out")" ] &&
     cmp -s "$tmp_dir/lj1.plan" "$tmp_dir/lj2.plan"; then
    pass calibrate_budget_long_model
  else
    fail calibrate_budget_long_model "exit statuses $rc1, $rc2; dense $n_val/2 on validation, eval $n_eval/2 (seed $vs); $(cat "$tmp_dir/lj1.out" "$tmp_dir/lj2.out" | tr '\n' ' ' | head -c 600)"
  fi
  if ! grep -q '^HAVE_OPENCL = 1' config.mk 2>/dev/null; then
    skip calibrate_budget_opencl "built without OpenCL"
  else
    out=$(run_target $bin calibrate -m $long_m --mmproj $long_v --data "$tmp_dir/long1" --max-images 32 --side 448 \
          --methods blindsight -t 2 --val-suite long --val-items 1 --max-loss 100 --backend opencl \
          -o "$tmp_dir/lcl.plan" 2>&1); rc=$?
    if [ "$rc" -ne 0 ] && printf '%s\n' "$out" | grep -q -i -e 'no OpenCL' -e 'no platform' -e 'no device'; then
      skip calibrate_budget_opencl "no OpenCL device: $(printf '%s\n' "$out" | tail -n 1 | head -c 120)"
    elif [ "$rc" -eq 0 ] && printf '%s\n' "$out" | grep -q '^budget: validations on OpenCL, 1 item worker' &&
         printf '%s\n' "$out" | grep -q '^budget: dense  *[01]/1 right' && printf '%s\n' "$out" | grep -q '^budget: within: '; then
      pass calibrate_budget_opencl
    else
      fail calibrate_budget_opencl "exit status $rc: $(printf '%s' "$out" | tr '\n' ' ' | head -c 600)"
    fi
  fi
fi

out=$(run_target $bin calibrate --suite demo --methods nonsense -o "$tmp_dir/x.plan" 2>&1); rc=$?
out2=$(run_target $bin calibrate --data "$tmp_dir/missing" -o "$tmp_dir/x.plan" 2>&1); rc2=$?
if [ "$rc" -eq 2 ] && [ "$rc2" -eq 1 ] && printf '%s' "$out2" | grep -q 'missing/items.jsonl'; then
  pass calibrate_bad_arguments
else
  fail calibrate_bad_arguments "exit statuses $rc and $rc2 (want 2 and 1): $out $out2"
fi
exit $failed
