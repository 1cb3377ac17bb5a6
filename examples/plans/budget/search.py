#!/usr/bin/env python3
"""search.py: the long model's budgeted plan search and its fresh measurement, in one run (ours, not any
paper's; docs/accuracy-budget.md, "The long model"). Run from the repository root after make.

usage: python3 examples/plans/budget/search.py WORK_DIR SECONDS [--opencl]

 1. make_candidates.py writes the candidates (each family from most to least aggressive).
 2. Validation: dense and every candidate on the same items: seed 3000003 (the validation stream of
    docs/sparsity-findings.md, never an evaluation's), the question types that lose answers
    (count_all, list), 16 slices of 5 items.
 3. Per family, the most aggressive candidate within the budget (pick.py's rule: correct answers >=
    dense's - 1 of the 80, mean first-token margin >= dense's - 1%).
 4. Greedy combination: the families' picks in order of saving per point of validation loss
    (saving: % of decoder prefill attention skipped + % of the KV cache saved at the end of decode;
    loss floored at one answer), each added on top of the plan so far and re-validated with the others
    on; kept only when the combination stays within the budget. BlindSight and MMInference both set
    head patterns, so only the first of them in the order is tried.
 5. Fresh measurement: seed 5000005 (never used before), every question type, 80 slices of 5 items,
    dense, each family's pick and the greedy plan, paired item by item (pair.py). The singles run
    while the greedy steps validate.
 6. --opencl: dense and the greedy plan again with --backend opencl --device NVIDIA, 4 processes.
Every phase stops at its share of SECONDS (queue.sh's deadline); WORK_DIR gets the plans, the logs,
summary.md and frontier.svg (frontier.py: every candidate's validation accuracy against its saving,
the chosen ones ringed)."""
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, '..', 'ablation'))
sys.path.insert(0, HERE)
from pair import load  # noqa: E402
from make_candidates import FAMILIES  # noqa: E402

VAL_SEED, EVAL_SEED = 3000003, 5000005
# slices of PER items: 16 x 5 validation items, 80 x 5 fresh ones (the environment may shrink them
# for a smoke run: SEARCH_VAL_SLICES, SEARCH_EVAL_SLICES, SEARCH_PER)
VAL_SLICES = int(os.environ.get('SEARCH_VAL_SLICES', '16'))
EVAL_SLICES = int(os.environ.get('SEARCH_EVAL_SLICES', '80'))
PER = os.environ.get('SEARCH_PER', '5')
SINGLES = {'mminference': FAMILIES['mminference'], 'sparsemm': FAMILIES['sparsemm'],
           'zipvl': FAMILIES['zipvl'], 'blindsight': ['bs-linear']}
PATTERNS = ('mminference', 'blindsight')


def cpus():
    return os.cpu_count() or 1


def queue(out, plans, seed, slices, types, procs, deadline, configs, env_extra=None, wait=True):
    env = dict(os.environ)
    env.update(env_extra or {})
    cmd = [os.path.join(HERE, 'queue.sh'), out, plans, str(seed), str(slices), PER, types, str(procs),
           str(int(deadline))] + list(configs)
    p = subprocess.Popen(cmd, env=env)
    if wait:
        p.wait()
    return p


def stats(d, cfg):
    """(correct, dense correct, n, mean margin diff, prefill skipped %, KV end % of dense) on the items
    and slices cfg shares with dense in run dir d."""
    res, _ = load(d)
    r, dn = res.get(cfg, {}), res.get('dense', {})
    ids = sorted(set(r) & set(dn))
    if not ids:
        return None
    kept = skipped = kv = kvd = 0.0
    for f in os.listdir(d):
        if not (f.startswith(cfg + '.f') and f.endswith('.json')):
            continue
        g = os.path.join(d, 'dense.f' + f[len(cfg) + 2:])
        if not os.path.exists(g):
            continue
        a, b = json.load(open(os.path.join(d, f))), json.load(open(g))
        kept += a['prefill_attn_flops_kept']
        skipped += a['prefill_attn_flops_skipped']
        kv += a['mean_kv_bytes_end'] * a['items']
        kvd += b['mean_kv_bytes_end'] * b['items']
    return (sum(r[i][0] for i in ids), sum(dn[i][0] for i in ids), len(ids),
            sum(r[i][1] - dn[i][1] for i in ids) / len(ids), sum(dn[i][1] for i in ids) / len(ids),
            100.0 * skipped / max(kept + skipped, 1), 100.0 * kv / kvd if kvd else 100.0)


def within(s, max_lost=1):
    ok, okd, _, dm, md, _, _ = s
    return ok >= okd - max_lost and dm >= -0.01 * abs(md)


def merge(plans, name, parts, patterns):
    """One plan of the candidates' statements (each part sets disjoint things: patterns, kv, zipvl).
    With head patterns among them, ZipVL's Alg. 1 lines become 'prefill heads' so that the patterns
    are not dropped on those layers (the composition of kvcache/kv_cache.h)."""
    lines = []
    for p in parts:
        body = open(os.path.join(plans, p + '.plan')).read().splitlines()
        head = body[:5]
        lines += [ln + ' prefill heads' if patterns and ' zipvl-tau ' in ln and 'prefill' not in ln else ln
                  for ln in body[5:]]
    with open(os.path.join(plans, name + '.plan'), 'w') as f:
        f.write('\n'.join(head + lines) + '\n')


def main():
    if len(sys.argv) not in (3, 4):
        sys.exit(__doc__)
    work, budget = sys.argv[1], float(sys.argv[2])
    opencl = len(sys.argv) == 4 and sys.argv[3] == '--opencl'
    t0 = time.time()
    log = open(os.path.join(work, 'summary.md'), 'a') if os.path.isdir(work) else None
    os.makedirs(work, exist_ok=True)
    log = log or open(os.path.join(work, 'summary.md'), 'a')

    def say(*a):
        s = ' '.join(str(x) for x in a)
        print(s, flush=True)
        log.write(s + '\n')
        log.flush()

    plans = os.path.join(work, 'plans')
    subprocess.check_call([sys.executable, os.path.join(HERE, 'make_candidates.py'), plans])
    n = cpus()
    val = os.path.join(work, 'val')
    configs = ['dense'] + [c for cs in SINGLES.values() for c in cs]
    queue(val, plans, VAL_SEED, VAL_SLICES, 'count_all,list', n, t0 + 0.30 * budget, configs)
    say('## validation (seed %d, count_all + list, %.0f s)' % (VAL_SEED, time.time() - t0))
    say('| candidate | correct | dense | items | margin change | prefill skipped | KV end % dense | within |')
    say('|---|---|---|---|---|---|---|---|')
    picks = {}
    for fam, cands in SINGLES.items():
        for c in cands:
            s = stats(val, c)
            if not s:
                say('| %s | not run | | | | | | |' % c)
                continue
            w = within(s)
            say('| %s | %d | %d | %d | %+.3f | %.1f%% | %.1f%% | %s |' % (c, s[0], s[1], s[2], s[3], s[5], s[6],
                                                                      'yes' if w else 'no'))
            if w and fam not in picks:
                picks[fam] = (c, s)
    ratio = {}
    for fam, (c, s) in picks.items():
        saving = s[5] + (100.0 - s[6])
        loss_pts = max(100.0 * (s[1] - s[0]) / s[2], 100.0 / s[2])
        ratio[fam] = saving / loss_pts
    order = sorted(picks, key=lambda f: -ratio[f])
    say('\npicks: ' + ', '.join('%s=%s (saving/point %.1f)' % (f, picks[f][0], ratio[f]) for f in order))
    # fresh singles in the background while the greedy steps validate
    ev = os.path.join(work, 'eval')
    singles = ['dense'] + [picks[f][0] for f in order if f != 'blindsight']
    n_val = 16 if n >= 32 else 1
    pe = queue(ev, plans, EVAL_SEED, EVAL_SLICES, 'all', max(n - n_val - (4 if opencl else 0), 1), t0 + 0.97 * budget,
               singles, wait=False)
    cl = os.path.join(work, 'eval-opencl')
    pc = (queue(cl, plans, EVAL_SEED, EVAL_SLICES, 'all', 4, t0 + 0.60 * budget, ['dense'],
                {'EVAL_ARGS': '--backend opencl --device NVIDIA'}, wait=False) if opencl else None)
    have, parts, step = set(), [], 0
    for f in order:
        if f in PATTERNS and have & set(PATTERNS):
            say('greedy: %s skipped (head patterns already set by %s)' % (f, ', '.join(have & set(PATTERNS))))
            continue
        if not parts:
            parts, have = [picks[f][0]], {f}
            say('greedy: start with %s (%s)' % (f, picks[f][0]))
            continue
        step += 1
        name = 'greedy-%d' % step
        merge(plans, name, parts + [picks[f][0]], bool((have | {f}) & set(PATTERNS)))
        queue(val, plans, VAL_SEED, VAL_SLICES, 'count_all,list', n_val, t0 + (0.30 + 0.14 * step) * budget, [name])
        s = stats(val, name)
        if s and within(s) and s[2] >= 0.75 * VAL_SLICES * int(PER):
            parts, have = parts + [picks[f][0]], have | {f}
            say('greedy: + %s -> %s: %d/%d (dense %d), prefill skipped %.1f%%, KV %.1f%%: kept' %
                (f, name, s[0], s[2], s[1], s[5], s[6]))
        else:
            say('greedy: + %s -> %s: %s: not kept' % (f, name, '%d/%d (dense %d)' % (s[0], s[2], s[1]) if s else
                                                       'not run'))
    merge(plans, 'greedy', parts, bool(have & set(PATTERNS)))
    say('greedy plan: ' + ' + '.join(parts))
    pg = queue(ev, plans, EVAL_SEED, EVAL_SLICES, 'all', n_val + n_val // 2, t0 + 0.97 * budget, ['greedy'],
               wait=False)
    if pc:
        pc.wait()
        pc = queue(cl, plans, EVAL_SEED, EVAL_SLICES, 'all', 4, t0 + 0.97 * budget, ['greedy'],
                   {'EVAL_ARGS': '--backend opencl --device NVIDIA'}, wait=False)
        pc.wait()
    pe.wait()
    pg.wait()
    say('\n## fresh evaluation (seed %d, every type, %.0f s)' % (EVAL_SEED, time.time() - t0))
    for d in [ev] + ([cl] if opencl else []):
        say('\n%s:\n' % os.path.basename(d))
        say(subprocess.run([sys.executable, os.path.join(HERE, '..', 'ablation', 'pair.py'), d],
                           capture_output=True, text=True).stdout)
    subprocess.run([sys.executable, os.path.join(HERE, 'frontier.py'), val, os.path.join(work, 'frontier.svg'),
                    ','.join([picks[f][0] for f in picks] + ['greedy-%d' % i for i in range(1, step + 1)])])
    say('total %.0f s' % (time.time() - t0))


if __name__ == '__main__':
    main()
