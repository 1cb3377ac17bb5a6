#!/usr/bin/env python3
"""make_resize_cases.py OUT_DIR: writes Pillow bicubic resize references for tests/test_preprocess.c.

Needs only Pillow and numpy (Debian: python3-pil python3-numpy). For each case it writes
  NAME.in.ppm             the source image (binary P6)
  NAME.WxH.ppm            Pillow's Image.resize((W, H), Image.BICUBIC) of it
and an index.txt listing 'NAME W H' lines. The C test reads index.txt and requires exact equality.
Sources are deterministic integer patterns (no RNG, no float math), so the inputs are identical
everywhere; only Pillow's arithmetic is being recorded.
"""
import os
import sys

import numpy as np
import PIL
from PIL import Image


def pattern(w, h, seed):
    y, x = np.mgrid[0:h, 0:w].astype(np.int64)
    r = (x * 37 + y * 11 + seed * 5) % 256
    g = ((x ^ y) * 29 + seed) % 256
    # hard edges and saturated blocks exercise the negative lobes and the 0/255 clamps
    b = np.where(((x // 3) + (y // 2) + seed) % 2 == 0, 255, 0)
    b = np.where((x * 7 + y * 13 + seed) % 17 == 0, 128, b)
    return np.stack([r, g, b], axis=-1).astype(np.uint8)


CASES = [
    # name, src_w, src_h, [(dst_w, dst_h), ...]
    ("a", 37, 23, [(13, 7), (80, 51), (37, 60), (90, 23), (5, 3), (1, 1), (36, 22), (38, 24), (111, 9)]),
    ("b", 64, 48, [(28, 28), (56, 28), (84, 56), (17, 100), (64, 47)]),
    ("c", 5, 4, [(56, 56), (3, 2), (5, 1), (1, 4), (200, 3)]),
    ("d", 1, 1, [(7, 5)]),
    ("e", 150, 100, [(70, 42), (28, 28), (140, 84)]),
]


def write_ppm(path, arr):
    h, w, _ = arr.shape
    with open(path, "wb") as f:
        f.write(b"P6\n%d %d\n255\n" % (w, h))
        f.write(arr.tobytes())


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: make_resize_cases.py OUT_DIR")
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    print("Pillow", PIL.__version__, "numpy", np.__version__)
    lines = []
    for seed, (name, w, h, targets) in enumerate(CASES):
        src = pattern(w, h, seed)
        write_ppm(os.path.join(out, name + ".in.ppm"), src)
        img = Image.fromarray(src, mode="RGB")
        for dw, dh in targets:
            res = np.asarray(img.resize((dw, dh), Image.BICUBIC))
            assert res.shape == (dh, dw, 3), res.shape
            write_ppm(os.path.join(out, "%s.%dx%d.ppm" % (name, dw, dh)), res)
            lines.append("%s %d %d\n" % (name, dw, dh))
    with open(os.path.join(out, "index.txt"), "w") as f:
        f.write("# written by tests/reference/make_resize_cases.py with Pillow %s\n" % PIL.__version__)
        f.writelines(lines)
    print("wrote", len(lines), "cases to", out)


if __name__ == "__main__":
    main()
