#!/usr/bin/env python3
"""frontier.py: the validation frontier of a budgeted search as an SVG (open it in a browser).

usage: python3 examples/plans/budget/frontier.py VAL_DIR|TABLE.tsv OUT.svg [CHOSEN,CHOSEN...]

Two panels, one point per candidate validated in VAL_DIR (search.py's val/): on the left the share of
decoder prefill attention FLOPs skipped, on the right the share of the KV cache saved at the end of
decode (100 - KV % of dense), each against the validation accuracy (correct answers of the items
shared with dense). The dashed line is dense, the dotted one the budget (dense - 1 answer); chosen
candidates are ringed. Colours: the candidate's family (its name's first word).

TABLE.tsv instead of VAL_DIR: one candidate a line (name, method, right, items, margin, prefill
skipped %, KV % of dense, within, pick, source; '#' lines are comments; long-greedy-frontier.tsv),
dense 76 of the items unless a '# dense RIGHT' line says otherwise; the budget line is then
calibrate's (dense - 1 point) and the rows marked 'pick' are ringed."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from search import stats  # noqa: E402
from pair import load  # noqa: E402

COLORS = {'mminf': '#d62728', 'smm': '#1f77b4', 'zipvl': '#2ca02c', 'bs': '#9467bd', 'greedy': '#ff7f0e',
          'bs+zipvl': '#ff7f0e', 'qc': '#8c564b', 'vision': '#17becf'}
W, H, M = 360, 300, 50


def main():
    if len(sys.argv) not in (3, 4):
        sys.exit(__doc__)
    d, out = sys.argv[1], sys.argv[2]
    chosen = set(sys.argv[3].split(',')) if len(sys.argv) == 4 else set()
    if d.endswith('.tsv'):
        return draw(table(d, chosen), out, chosen, budget_points=1.0, floor=12.0)
    res, _ = load(d)
    pts = []
    for c in sorted(res):
        if c == 'dense':
            continue
        s = stats(d, c)
        if s:
            pts.append((c, 100.0 * s[0] / s[2], s[5], 100.0 - s[6], 100.0 * s[1] / s[2], s[2]))
    if not pts:
        sys.exit('frontier.py: no candidate shares items with dense in %s' % d)
    draw(pts, out, chosen)


def table(path, chosen):
    """points (name, accuracy %, skipped %, KV saved %, dense %, items) of a TABLE.tsv; fills chosen."""
    pts, dense_right = [], 76
    for ln in open(path):
        if ln.startswith('# dense '):
            dense_right = int(ln.split()[2])
        if ln.startswith('#') or not ln.strip():
            continue
        f = ln.rstrip('\n').split('\t')
        n = int(f[3])
        pts.append((f[0], 100.0 * int(f[2]) / n, float(f[5]), 100.0 - float(f[6]), 100.0 * dense_right / n, n))
        if f[8] == 'pick':
            chosen.add(f[0])
    return pts


def draw(pts, out, chosen, budget_points=None, floor=None):
    """budget_points: the budget line at dense - that many points (default: dense - 1 answer);
    floor: the y axis stops that many points below dense, lower points drawn on its edge."""
    dense = pts[0][4]
    budget = dense - (budget_points if budget_points is not None else 100.0 / pts[0][5])
    ylo = min(min(p[1] for p in pts), budget) - 2
    if floor is not None:
        ylo = max(ylo, dense - floor)
    yhi = dense + 2
    svg = ['<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" '
           'font-size="11">' % (2 * W + M, H + 40)]
    for k, (title, ix) in enumerate((('decoder prefill attention FLOPs skipped (%)', 2),
                                     ('KV cache saved at the end of decode (%)', 3))):
        x0 = M + k * W
        X = lambda v: x0 + (W - M) * v / 100.0
        Y = lambda v: 10 + (H - M) * (yhi - v) / (yhi - ylo)
        svg.append('<rect x="%d" y="10" width="%d" height="%d" fill="none" stroke="#888"/>' % (x0, W - M, H - M))
        svg.append('<text x="%d" y="%d" text-anchor="middle">%s</text>' % (x0 + (W - M) / 2, H - 15, title))
        for v in range(0, 101, 25):
            svg.append('<text x="%.1f" y="%d" text-anchor="middle">%d</text>' % (X(v), H - M + 24, v))
        for v in range(int(ylo) + 1, int(yhi) + 1, max(1, int((yhi - ylo) / 6))):
            svg.append('<text x="%d" y="%.1f" text-anchor="end">%d</text>' % (x0 - 4, Y(v) + 4, v))
        svg.append('<line x1="%d" x2="%d" y1="%.1f" y2="%.1f" stroke="#444" stroke-dasharray="6,3"/>' %
                   (x0, x0 + W - M, Y(dense), Y(dense)))
        svg.append('<line x1="%d" x2="%d" y1="%.1f" y2="%.1f" stroke="#444" stroke-dasharray="2,2"/>' %
                   (x0, x0 + W - M, Y(budget), Y(budget)))
        for p in pts:
            if p[ix] <= 0.05:
                continue
            col = COLORS.get(p[0].split('-')[0], '#333')
            cx, cy = X(p[ix]), Y(max(p[1], ylo))
            svg.append('<circle cx="%.1f" cy="%.1f" r="4" fill="%s"><title>%s: %.1f%%, %.1f%% right</title></circle>' %
                       (cx, cy, col, p[0], p[ix], p[1]))
            if p[0] in chosen:
                svg.append('<circle cx="%.1f" cy="%.1f" r="8" fill="none" stroke="%s" stroke-width="2"/>' % (cx, cy, col))
            svg.append('<text x="%.1f" y="%.1f" fill="%s">%s</text>' % (cx + 6, cy - 5, col, p[0]))
    svg.append('<text x="%d" y="%d">validation accuracy (%%): dense dashed, budget dotted; ringed: chosen</text>' %
               (M, H + 30))
    svg.append('</svg>')
    with open(out, 'w') as f:
        f.write('\n'.join(svg) + '\n')


if __name__ == '__main__':
    main()
