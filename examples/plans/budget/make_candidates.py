#!/usr/bin/env python3
"""make_candidates.py: the candidate plans of the long model's budgeted search (docs/accuracy-budget.md,
"The long model"). Ours, not any paper's: the candidates come from the paper-calibrated plans shipped
before (their head patterns, SparseMM visual scores and ZipVL tau are the papers' algorithms' output),
and the search only leaves layers or heads dense, re-budgets SparseMM from its visual scores
(sparsemm.txt Eq. 5-9), or composes methods on a layer ("zipvl-tau T prefill heads", plan format 4).

usage: python3 examples/plans/budget/make_candidates.py OUT_DIR
Run from the repository root after make (it calls ./ocellus plan --kv-budget).

Families, each from most to least aggressive (pick.py takes the first within the budget):
  mminf-b   MMInference (Table 3 x 0.1) with layers 4, 7, 8 and layer 5's heads 4, 6 dense
  mminf-a   ... layers 4, 5, 7, 8 dense (the per-layer ablation's back-off)
  mminf-c   ... layers 2, 4, 5, 7, 8 dense
  smm-500, -700, -1000, -1400     SparseMM re-budgeted to a mean of N tokens per kv head
                                  (the shipped all-methods plan's visual scores; it had 403)
  zipvl-mix   ZipVL Alg. 1 on layers 2, 4, 6, 8-11, 'prefill heads' (eviction only) on 1, 3, 5, 7
  zipvl-heads ZipVL 'prefill heads' on layers 1-11 (its KV saving only)
  bs-linear   the BlindSight Linear plan's head patterns (shipped, measured before)
search.py combines the families' picks greedily (a plan of several candidates' statements)."""
import os
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', 'ablation'))
from make_plans import heads_of  # noqa: E402

HEAD = ["ocellus-plan 4", "shape decoder layers 12 heads 8 kv-heads 2 head-dim 64",
        "sink-fraction 0.1", "kv-window 32", "decoder default dense"]
FAMILIES = {
    'mminference': ['mminf-b', 'mminf-a', 'mminf-c'],
    'sparsemm': ['smm-500', 'smm-700', 'smm-1000', 'smm-1400'],
    'zipvl': ['zipvl-mix', 'zipvl-heads'],
}


def budgets(n):
    """kv-budget and visual-score lines of the shipped all-methods plan re-budgeted to a mean of n."""
    tmp = os.path.join(OUT, '.smm%d.plan' % n)
    subprocess.check_call(['./ocellus', 'plan', 'examples/plans/paper-only/long-calibrated-all.plan', '--kv-budget', str(n),
                           '-o', tmp], stdout=subprocess.DEVNULL)
    lines = [ln.strip() for ln in open(tmp) if ln.startswith('decoder layer') and
             (' kv-budget ' in ln or ' visual-score ' in ln)]
    os.remove(tmp)
    return lines


def main():
    global OUT
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    OUT = sys.argv[1]
    os.makedirs(OUT, exist_ok=True)

    def write(name, lines):
        with open(os.path.join(OUT, name + '.plan'), 'w') as f:
            f.write('\n'.join(HEAD + lines) + '\n')

    mm = heads_of(open('examples/plans/paper-only/long-calibrated-mminference.plan').read().splitlines())
    line = lambda L, pats: 'decoder layer %d %s' % (L, ' '.join(pats))
    l5 = [p if h not in (4, 6) else 'dense' for h, p in enumerate(mm[5])]
    mm_b = [line(L, mm[L] if L != 5 else l5) for L in range(12) if L not in (4, 7, 8)]
    write('mminf-b', mm_b)
    write('mminf-a', [line(L, mm[L]) for L in range(12) if L not in (4, 5, 7, 8)])
    write('mminf-c', [line(L, mm[L]) for L in range(12) if L not in (2, 4, 5, 7, 8)])
    for n in (500, 700, 1000, 1400):
        write('smm-%d' % n, budgets(n))
    write('zipvl-mix', ['decoder layer %s zipvl-tau 0.975' % L for L in ('2', '4', '6', '8-11')] +
          ['decoder layer %d zipvl-tau 0.975 prefill heads' % L for L in (1, 3, 5, 7)])
    write('zipvl-heads', ['decoder layer 1-11 zipvl-tau 0.975 prefill heads'])
    write('bs-linear', [ln.strip() for ln in open('examples/plans/long-calibrated-blindsight-linear.plan')
                        if ln.startswith('decoder layer')])


if __name__ == '__main__':
    main()
