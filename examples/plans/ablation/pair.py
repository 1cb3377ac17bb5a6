#!/usr/bin/env python3
"""pair.py: item-paired comparison of run.sh's logs against dense.

usage: python3 examples/plans/ablation/pair.py DIR [DENSE_DIR]

For each config in DIR (files CONFIG.fFIRST.log / .json), on the items it shares with dense: correct
answers, the difference in points with a 95% interval (normal approximation of the paired
differences), answers lost / gained, the mean change of the first answer token's logit margin,
decoder prefill attention FLOPs skipped and the KV cache at the end of decode as % of dense."""
import collections
import glob
import json
import math
import os
import re
import sys

LINE = re.compile(r'\s*(\d+) (\w+)\s.*\| expected (.*) \| got (.*) \| margin ([-+\w.]+)')


def load(d):
    res = collections.defaultdict(dict)
    flops = collections.defaultdict(lambda: [0, 0, 0.0])
    for f in glob.glob(os.path.join(d, '*.log')):
        cfg = os.path.basename(f).rsplit('.f', 1)[0]
        for ln in open(f):
            m = LINE.match(ln)
            if m:
                # eval marks a wrong answer "(wrong)" (its check ignores case: a code "12X" read "12x")
                res[cfg][int(m.group(1))] = ('(wrong)' not in m.group(4), float(m.group(5)))
        jf = f[:-4] + '.json'
        if os.path.exists(jf):
            j = json.load(open(jf))
            a = flops[cfg]
            a[0] += j['prefill_attn_flops_kept']
            a[1] += j['prefill_attn_flops_skipped']
            a[2] += j['mean_kv_bytes_end'] * j['items']
    return res, flops


def main():
    if len(sys.argv) not in (2, 3):
        sys.exit(__doc__)
    res, flops = load(sys.argv[1])
    if len(sys.argv) == 3:
        r2, f2 = load(sys.argv[2])
        res['dense'], flops['dense'] = r2['dense'], f2['dense']
    dense = res['dense']
    print('| config | items | correct | dense | difference, points [95%] | lost / gained | margin change '
          '| prefill skipped | KV at end, % of dense |')
    print('|---|---|---|---|---|---|---|---|---|')
    for c in sorted(res):
        r = res[c]
        ids = sorted(set(r) & set(dense))
        n = len(ids)
        if not n:
            continue
        diff = [r[i][0] - dense[i][0] for i in ids]
        mu = sum(diff) / n
        se = math.sqrt(sum((x - mu) ** 2 for x in diff) / max(n - 1, 1)) / math.sqrt(n)
        lost = sum(1 for i in ids if dense[i][0] and not r[i][0])
        gained = sum(1 for i in ids if r[i][0] and not dense[i][0])
        dm = sum(r[i][1] - dense[i][1] for i in ids) / n
        f, fd = flops[c], flops['dense']
        skipped = 100.0 * f[1] / max(f[0] + f[1], 1)
        kv = 100.0 * f[2] / fd[2] if fd[2] else float('nan')
        print('| %s | %d | %d | %d | %+.1f [%+.1f, %+.1f] | %d / %d | %+.3f | %.1f%% | %.1f%% |' % (
            c, n, sum(r[i][0] for i in ids), sum(dense[i][0] for i in ids), 100 * mu,
            100 * (mu - 1.96 * se), 100 * (mu + 1.96 * se), lost, gained, dm, skipped, kv))


if __name__ == '__main__':
    main()
