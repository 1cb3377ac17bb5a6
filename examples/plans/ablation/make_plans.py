#!/usr/bin/env python3
"""make_plans.py: the plans of the per-layer ablation in docs/sparsity-findings.md.

usage: python3 examples/plans/ablation/make_plans.py OUT_DIR

From the shipped long-model plans it writes, into OUT_DIR, plans where one method covers one
layer (or one head) and every other head is dense:
  zipvl-all, zipvl-L1..L11        ZipVL tau 0.975 on layers 1-11, or on one layer
  zipvl-all-t990, -t995           tau 0.99 / 0.995 on layers 1-11
  zipvl-backoff                   tau 0.975 on layers 2, 4, 6, 8-11 (the lossy layers left dense)
  mminf-all, mminf-L0..L11        long-calibrated-mminference.plan resolved per head, or one layer
  mminf-L5h0..h7                  one head of layer 5
  mminf-L5h4qb, mminf-L5h6qb      that head as q-boundary(text=its vertical-slash, vision=a-shape(13,410))
  mminf-all-x2, -x4               every vertical/slash/local size x2, x4
  mminf-backoff                   layers 4, 5, 7, 8 dense
  mminf-qbfix                     every plain vertical-slash head of layers 4, 5, 7, 8 as q-boundary
Run from the repository root."""
import os
import re
import sys

HEAD = ["ocellus-plan 3", "shape decoder layers 12 heads 8 kv-heads 2 head-dim 64",
        "sink-fraction 0.1", "kv-window 32", "decoder default dense"]


def split_patterns(s):
    """Split a layer line's patterns at the spaces outside parentheses."""
    pats, depth, cur = [], 0, ''
    for ch in s:
        depth += (ch == '(') - (ch == ')')
        if ch == ' ' and depth == 0:
            if cur:
                pats.append(cur)
            cur = ''
        else:
            cur += ch
    if cur:
        pats.append(cur)
    return pats


def heads_of(plan_lines, n_layers=12, n_heads=8):
    """Each layer's head patterns: the default, then the layer lines in file order."""
    default = next(ln.split(' ', 2)[2] for ln in plan_lines if ln.startswith('decoder default '))
    heads = [[default] * n_heads for _ in range(n_layers)]
    for ln in plan_lines:
        m = re.match(r'decoder layer (\d+) heads ([\d,\-]+) (.*)$', ln)
        if m:
            for part in m.group(2).split(','):
                a, _, b = part.partition('-')
                for h in range(int(a), int(b or a) + 1):
                    heads[int(m.group(1))][h] = m.group(3)
            continue
        m = re.match(r'decoder layer (\d+) ((?:dense|sink|intra|vertical|q-bound|2d-bound|a-shape|grid).*)$', ln)
        if m:
            p = split_patterns(m.group(2))
            if len(p) != n_heads:
                sys.exit('make_plans.py: %d patterns in: %s' % (len(p), ln))
            heads[int(m.group(1))] = p
    return heads


def scaled(s, k):
    return re.sub(r'(vertical|slash|local)=(\d+)', lambda m: '%s=%d' % (m.group(1), k * int(m.group(2))), s)


def q_boundary(p):
    if not p.startswith('vertical-slash'):
        return p
    return 'q-boundary(text=%s,vision=a-shape(sink=13,local=410))' % p


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)

    def write(name, lines):
        with open(os.path.join(out, name + '.plan'), 'w') as f:
            f.write('\n'.join(HEAD + lines) + '\n')

    write('zipvl-all', ['decoder layer 1-11 zipvl-tau 0.975'])
    for L in range(1, 12):
        write('zipvl-L%d' % L, ['decoder layer %d zipvl-tau 0.975' % L])
    write('zipvl-all-t990', ['decoder layer 1-11 zipvl-tau 0.99'])
    write('zipvl-all-t995', ['decoder layer 1-11 zipvl-tau 0.995'])
    write('zipvl-backoff', ['decoder layer %s zipvl-tau 0.975' % L for L in ('2', '4', '6', '8-11')])

    mm = heads_of(open('examples/plans/paper-only/long-calibrated-mminference.plan').read().splitlines())
    line = lambda L, pats: 'decoder layer %d %s' % (L, ' '.join(pats))
    write('mminf-all', [line(L, mm[L]) for L in range(12)])
    for L in range(12):
        write('mminf-L%d' % L, [line(L, mm[L])])
    for h in range(8):
        write('mminf-L5h%d' % h, ['decoder layer 5 heads %d %s' % (h, mm[5][h])])
    for h in (4, 6):
        write('mminf-L5h%dqb' % h, ['decoder layer 5 heads %d %s' % (h, q_boundary(mm[5][h]))])
    for k in (2, 4):
        write('mminf-all-x%d' % k, [line(L, [scaled(p, k) for p in mm[L]]) for L in range(12)])
    write('mminf-backoff', [line(L, mm[L]) for L in range(12) if L not in (4, 5, 7, 8)])
    write('mminf-qbfix', [line(L, [q_boundary(p) for p in mm[L]] if L in (4, 5, 7, 8) else mm[L])
                          for L in range(12)])


if __name__ == '__main__':
    main()
