#!/usr/bin/env python3
"""make_preprocess_fixtures.py OUT_DIR: HF Qwen2-VL preprocessing references for tests/test_preprocess.c.

Run where torch + transformers + Pillow + numpy are installed (no internet needed: the image
processor is constructed in code, nothing is downloaded). Writes into OUT_DIR:
  NAME.ppm     a deterministic synthetic RGB image (binary P6) -- the input of both sides
  NAME.bin     HF's pixel_values for it: a text header
                   OCELLUS-F32 1 / rows R / cols C / grid T H W / min_pixels N / max_pixels N / end
               (one item per line) followed by R*C little-endian float32
  index.txt    '# versions' then one 'NAME KIND' line per case; KIND 'none' means no resampling
               happens (the C test then demands exact equality), anything else means a resize.
Commit OUT_DIR as tests/data/preprocess/. Total size stays below 2 MB.

The processor is the PIL ("slow") one: Qwen2VLImageProcessorPil in transformers 5, or
Qwen2VLImageProcessor in transformers 4 (which is the PIL path there). The torchvision backend
is refused because it resamples differently. Every fixture is also recomputed by an independent
numpy/Pillow re-implementation of the pipeline in this file; the script fails if they disagree.

  --self-test   runs only the numpy/Pillow re-implementation (no torch/transformers needed) and
                writes nothing: a check of this script on a machine without transformers.
"""
import math
import os
import sys

CLIP_MEAN = [0.48145466, 0.4578275, 0.40821073]
CLIP_STD = [0.26862954, 0.26130258, 0.27577711]
HF_MIN_PIXELS = 3136          # Qwen2-VL preprocessor_config.json
HF_MAX_PIXELS = 12845056

# name, width, height, min_pixels, max_pixels, kind
CASES = [
    ("up_56x84", 56, 84, 12544, HF_MAX_PIXELS, "up"),        # min_pixels raised: 112x140
    ("down_300x200", 300, 200, HF_MIN_PIXELS, 15680, "down"),  # max_pixels lowered: 140x84
    ("none_112x84", 112, 84, HF_MIN_PIXELS, HF_MAX_PIXELS, "none"),
    ("mild_100x75", 100, 75, HF_MIN_PIXELS, HF_MAX_PIXELS, "mild"),  # 112x84, slight stretch
    ("small_45x30", 45, 30, HF_MIN_PIXELS, HF_MAX_PIXELS, "up"),     # 84x56 via min_pixels
]


def die(msg):
    print("make_preprocess_fixtures: ERROR: " + msg, file=sys.stderr)
    sys.exit(1)


def synthetic(np, w, h, seed):
    """Integer-only pattern: gradients, hard edges, saturated blocks and fine texture."""
    y, x = np.mgrid[0:h, 0:w].astype(np.int64)
    r = (x * 255) // max(w - 1, 1)
    g = (y * 37 + x * 11 + seed * 7) % 256
    b = np.where(((x // 5) + (y // 3) + seed) % 2 == 0, 250, 5)
    b = np.where((x * 7 + y * 13 + seed) % 23 == 0, 128, b)
    disk = (x - w // 2) ** 2 + (y - h // 2) ** 2 < (min(w, h) // 3) ** 2
    r = np.where(disk, 255 - r, r)
    return np.stack([r, g, b], axis=-1).astype(np.uint8)


def smart_resize(height, width, factor, min_pixels, max_pixels):
    """HF's formula (transformers 4.5x / 5.x), for the independent re-implementation."""
    if max(height, width) / min(height, width) > 200:
        raise ValueError("aspect ratio")
    h_bar = round(height / factor) * factor
    w_bar = round(width / factor) * factor
    if h_bar * w_bar > max_pixels:
        beta = math.sqrt((height * width) / max_pixels)
        h_bar = max(factor, math.floor(height / beta / factor) * factor)
        w_bar = max(factor, math.floor(width / beta / factor) * factor)
    elif h_bar * w_bar < min_pixels:
        beta = math.sqrt(min_pixels / (height * width))
        h_bar = math.ceil(height * beta / factor) * factor
        w_bar = math.ceil(width * beta / factor) * factor
    return h_bar, w_bar


def reimplementation(np, Image, pil_img, min_pixels, max_pixels):
    """PIL bicubic resize, float64 rescale cast to float32, float32 normalize, HF patch order."""
    w, h = pil_img.size
    rh, rw = smart_resize(h, w, 28, min_pixels, max_pixels)
    if (rw, rh) != (w, h):
        pil_img = pil_img.resize((rw, rh), Image.BICUBIC)
    a = np.asarray(pil_img).transpose(2, 0, 1)                       # C, H, W uint8
    a = (a.astype(np.float64) * (1 / 255)).astype(np.float32)
    mean = np.array(CLIP_MEAN, dtype=np.float32)[:, None, None]
    std = np.array(CLIP_STD, dtype=np.float32)[:, None, None]
    a = (a - mean) / std
    frames = np.stack([a, a], axis=0)                                  # T=2 (repeated), C, H, W
    gh, gw = rh // 14, rw // 14
    p = frames.reshape(1, 2, 3, gh // 2, 2, 14, gw // 2, 2, 14)
    p = p.transpose(0, 3, 6, 4, 7, 2, 1, 5, 8)
    return p.reshape(gh * gw, 3 * 2 * 14 * 14), (1, gh, gw)


def write_ppm(path, arr):
    h, w, _ = arr.shape
    with open(path, "wb") as f:
        f.write(b"P6\n%d %d\n255\n" % (w, h))
        f.write(arr.tobytes())


def write_bin(np, path, pv, grid, min_pixels, max_pixels):
    pv = np.ascontiguousarray(pv, dtype="<f4")
    header = "OCELLUS-F32 1\nrows %d\ncols %d\ngrid %d %d %d\nmin_pixels %d\nmax_pixels %d\nend\n" % (
        pv.shape[0], pv.shape[1], grid[0], grid[1], grid[2], min_pixels, max_pixels)
    with open(path, "wb") as f:
        f.write(header.encode("ascii"))
        f.write(pv.tobytes())


def pil_processor_class():
    """The PIL-path Qwen2-VL image processor of whatever transformers is installed."""
    import transformers
    for name in ("Qwen2VLImageProcessorPil",):
        cls = getattr(transformers, name, None)
        if cls is not None:
            return cls
    try:
        from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil
        return Qwen2VLImageProcessorPil
    except ImportError:
        pass
    from transformers import Qwen2VLImageProcessor
    return Qwen2VLImageProcessor


def main():
    args = sys.argv[1:]
    self_test = "--self-test" in args
    args = [a for a in args if a != "--self-test"]
    if not self_test and len(args) != 1:
        die("usage: make_preprocess_fixtures.py OUT_DIR   (or --self-test)")
    try:
        import numpy as np
        import PIL
        from PIL import Image
    except ImportError as e:
        die("needs numpy and Pillow: %s" % e)
    versions = "Pillow %s, numpy %s" % (PIL.__version__, np.__version__)
    proc_cls = None
    if not self_test:
        try:
            import torch
            import transformers
        except ImportError as e:
            die("needs torch and transformers (or use --self-test): %s" % e)
        versions = "transformers %s, torch %s, %s" % (transformers.__version__, torch.__version__, versions)
        proc_cls = pil_processor_class()
    print("versions:", versions, flush=True)

    if self_test:
        for i, (name, w, h, mn, mx, kind) in enumerate(CASES):
            img = Image.fromarray(synthetic(np, w, h, i), mode="RGB")
            pv, grid = reimplementation(np, Image, img, mn, mx)
            print("%-14s %3dx%-3d -> grid %s, pixel_values %s, range [%.3f, %.3f]" % (
                name, w, h, grid, pv.shape, float(pv.min()), float(pv.max())))
        print("self-test done (nothing written)")
        return

    out_dir = args[0]
    os.makedirs(out_dir, exist_ok=True)
    print("processor class:", proc_cls.__module__ + "." + proc_cls.__name__, flush=True)
    index = ["# written by tests/reference/make_preprocess_fixtures.py with %s, %s\n" % (
        versions, proc_cls.__name__)]
    total = 0
    for i, (name, w, h, mn, mx, kind) in enumerate(CASES):
        arr = synthetic(np, w, h, i)
        ppm = os.path.join(out_dir, name + ".ppm")
        write_ppm(ppm, arr)
        img = Image.open(ppm)            # what HF sees is exactly the file the C test reads
        img.load()
        if img.mode != "RGB" or img.size != (w, h) or not np.array_equal(np.asarray(img), arr):
            die("%s: PPM round trip through Pillow changed the image" % name)
        proc = proc_cls(
            do_resize=True, resample=3, do_rescale=True, rescale_factor=1 / 255, do_normalize=True,
            image_mean=CLIP_MEAN, image_std=CLIP_STD, do_convert_rgb=True,
            min_pixels=mn, max_pixels=mx, patch_size=14, temporal_patch_size=2, merge_size=2)
        backend = getattr(proc, "backend", "pil")
        if isinstance(backend, str) and backend != "pil":
            die("%s uses the %s backend; the PIL backend is required" % (proc_cls.__name__, backend))
        out = proc(images=[img], return_tensors="np")
        pv = np.asarray(out["pixel_values"])
        grid = tuple(int(v) for v in np.asarray(out["image_grid_thw"]).reshape(-1))
        if pv.dtype != np.float32:
            die("%s: pixel_values dtype %s, expected float32" % (name, pv.dtype))
        if len(grid) != 3 or grid[0] != 1 or pv.shape != (grid[0] * grid[1] * grid[2], 1176):
            die("%s: unexpected shapes pixel_values %s grid %s" % (name, pv.shape, grid))
        ref, ref_grid = reimplementation(np, Image, img, mn, mx)
        diff = float(np.max(np.abs(ref - pv))) if ref.shape == pv.shape else float("inf")
        if ref_grid != grid or diff != 0.0:
            die("%s: HF and the re-implementation disagree (grid %s vs %s, max diff %g)" % (
                name, grid, ref_grid, diff))
        if kind == "none" and (grid[1] * 14, grid[2] * 14) != (h, w):
            die("%s: expected no resize but got grid %s" % (name, grid))
        binp = os.path.join(out_dir, name + ".bin")
        write_bin(np, binp, pv, grid, mn, mx)
        size = os.path.getsize(ppm) + os.path.getsize(binp)
        total += size
        index.append("%s %s\n" % (name, kind))
        print("%-14s %3dx%-3d -> %dx%d grid %s, %d bytes, equals re-implementation" % (
            name, w, h, grid[2] * 14, grid[1] * 14, grid, size), flush=True)
        # informational: how far the torchvision backend (transformers' default in v5) lands
        try:
            import transformers
            fast_cls = getattr(transformers, "Qwen2VLImageProcessorFast", None) or getattr(
                transformers, "Qwen2VLImageProcessor", None)
            if fast_cls is not None and fast_cls is not proc_cls:
                fp = fast_cls(min_pixels=mn, max_pixels=mx, image_mean=CLIP_MEAN, image_std=CLIP_STD)
                fpv = np.asarray(fp(images=[img], return_tensors="np")["pixel_values"], dtype=np.float32)
                if fpv.shape == pv.shape:
                    print("    (info) %s differs from the PIL path by max %.4g" % (
                        fast_cls.__name__, float(np.max(np.abs(fpv - pv)))), flush=True)
        except Exception as e:  # informational only
            print("    (info) torchvision backend not compared: %s" % e)
    with open(os.path.join(out_dir, "index.txt"), "w") as f:
        f.writelines(index)
    print("wrote %d cases, %d bytes in %s" % (len(CASES), total, out_dir))
    if total > 2 * 1024 * 1024:
        die("fixtures exceed 2 MB")


if __name__ == "__main__":
    main()
