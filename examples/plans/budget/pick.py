#!/usr/bin/env python3
"""pick.py: per family of make_candidates.py, the most aggressive candidate within the accuracy budget on
run.sh's validation logs. Ours, not any paper's (docs/accuracy-budget.md).

usage: python3 examples/plans/budget/pick.py VAL_DIR [MAX_LOST_NET]

A candidate is within the budget when, on the validation items it shares with dense, its correct
answers are at least dense's minus MAX_LOST_NET (default 1) and its mean first-token margin is not
below dense's by more than 1%. Prints one line per family: FAMILY CONFIG (or FAMILY none), then the
per-candidate evidence on stderr."""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', 'ablation'))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from pair import load  # noqa: E402
from make_candidates import FAMILIES  # noqa: E402


def main():
    if len(sys.argv) not in (2, 3):
        sys.exit(__doc__)
    res, _ = load(sys.argv[1])
    max_lost = int(sys.argv[2]) if len(sys.argv) == 3 else 1
    dense = res.get('dense', {})
    for fam, cands in FAMILIES.items():
        chosen = None
        for c in cands:
            r = res.get(c, {})
            ids = sorted(set(r) & set(dense))
            if not ids:
                print('%s: %s not run' % (fam, c), file=sys.stderr)
                continue
            ok, okd = sum(r[i][0] for i in ids), sum(dense[i][0] for i in ids)
            m, md = sum(r[i][1] for i in ids) / len(ids), sum(dense[i][1] for i in ids) / len(ids)
            within = ok >= okd - max_lost and m >= md - 0.01 * abs(md)
            print('%s: %s %d/%d dense %d, margin %.3f dense %.3f: %s' % (
                fam, c, ok, len(ids), okd, m, md, 'within' if within else 'over'), file=sys.stderr)
            if within and chosen is None:
                chosen = c
        print(fam, chosen or 'none')


if __name__ == '__main__':
    main()
