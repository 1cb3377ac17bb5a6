#!/usr/bin/env python3
"""train.py: trains ocellus' long-prompt model, a small Qwen2.5-VL, on the long suite of
examples/tools/scene_long.c (8-32 images of 224-448 px per item, prompts of 1K-8K tokens).

Run from the repository root on the GPU machine (torch + transformers + tokenizers + safetensors):
    python3 examples/long/train.py --out /tmp/long --minutes 15
It writes /tmp/long/hf (a Hugging Face checkpoint, f16) and /tmp/long/train-log.json. Then here:
    ./ocellus convert /tmp/long/hf -o examples/long/ocellus-long --type q8_0 (TRAINING.md)
    ./ocellus eval --suite long --items 500
`python3 examples/long/train.py --selftest` runs the data path (generator, prompts, positions,
window layout) with the standard library only, for machines without torch.

The recipe is the demo model's (examples/demo/train.py, TRAINING.md), adapted to long prompts:
- Data: scene.c + scene_long.c compiled alone into a shared object and called through ctypes
  (stream seed --seed; `ocellus eval --suite long` uses seed 1000001, never trained on). A batch
  holds items with the same image count and side (drawn per batch from the suite's
  distribution), so the vision tower runs batched and text padding stays small; the batch size
  follows a token budget (--batch-tokens).
- Curriculum: the image count and side ramp from 8 images of 224 px to the full 8-32 x 224-448
  over the first --ramp-steps batches (long items from the start were slower to learn in
  the demo's runs; the short ones teach the vision tower to see).
- Model: transformers' Qwen2_5_VLForConditionalGeneration (window attention + full-attention
  blocks in the vision tower), bf16 autocast, sdpa attention.
- Training-only aids, dropped when saving (as the demo's): a language-model loss on the
  question's tokens, a probe on the merged image tokens tied to the word embeddings (kind,
  colour, code glyph; row and column untied), and a probe that makes each image token's decoder
  state name its image (tens and units digit tokens).
"""
import argparse
import ctypes
import json
import math
import os
import subprocess
import sys
import time

SYSTEM = "You are a helpful assistant."
SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|object_ref_start|>", "<|object_ref_end|>",
           "<|box_start|>", "<|box_end|>", "<|quad_start|>", "<|quad_end|>", "<|vision_start|>",
           "<|vision_end|>", "<|vision_pad|>", "<|image_pad|>", "<|video_pad|>"]
QWEN2_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                 r"|\s*[\r\n]+|\s+(?!\S)|\s+")
CLIP_MEAN = [0.48145466, 0.4578275, 0.40821073]
CLIP_STD = [0.26862954, 0.26130258, 0.27577711]
CHAT_TEMPLATE = (   # Qwen2-VL's template with the image label always on, as the demo model's
    "{% set image_count = namespace(value=0) %}{% for message in messages %}"
    "{% if loop.first and message['role'] != 'system' %}<|im_start|>system\nYou are a helpful assistant."
    "<|im_end|>\n{% endif %}<|im_start|>{{ message['role'] }}\n{% if message['content'] is string %}"
    "{{ message['content'] }}<|im_end|>\n{% else %}{% for content in message['content'] %}"
    "{% if content['type'] == 'image' or 'image' in content %}{% set image_count.value = image_count.value + 1 %}"
    "Picture {{ image_count.value }}: <|vision_start|><|image_pad|><|vision_end|>"
    "{% elif 'text' in content %}{{ content['text'] }}{% endif %}"
    "{% endfor %}<|im_end|>\n{% endif %}{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
MIN_IMAGES, MAX_IMAGES = 8, 32
MIN_SIDE, MAX_SIDE = 224, 448
TYPE_NAMES = ["detail", "which_image", "count_all", "code", "compare", "list"]
COLOR_NAMES = ["red", "green", "blue", "yellow", "purple", "orange", "white"]
KIND_NAMES = ["circle", "square", "triangle", "diamond"]
GLYPHS = "0123456789ACEFHKLPRTUX"
EVAL_SEED = 1000001
WINDOW_UNITS = 4   # Qwen2.5-VL window_size 112 px / 14 px patches / merge 2


# ---- the generator (examples/tools/scene_long.h), mirrored field by field ------------------------
class Cell(ctypes.Structure):
    _fields_ = [("image", ctypes.c_int32), ("row", ctypes.c_int32), ("col", ctypes.c_int32)]


class LongItem(ctypes.Structure):
    _fields_ = [("n_images", ctypes.c_int32), ("side_px", ctypes.c_int32), ("type", ctypes.c_int32),
                ("n_answer_cells", ctypes.c_int32), ("answer_image", ctypes.c_int32),
                ("reserved", ctypes.c_int32 * 3), ("answer_cells", Cell * 16),
                ("question", ctypes.c_char * 160), ("answer", ctypes.c_char * 192)]


class LongShape(ctypes.Structure):
    _fields_ = [(n, ctypes.c_int32) for n in ("kind", "color", "col", "row", "x_px", "y_px", "size_px")]


class LongImage(ctypes.Structure):
    _fields_ = [("n_shapes", ctypes.c_int32), ("background", ctypes.c_int32), ("bg_rgb", ctypes.c_uint8 * 6),
                ("pad", ctypes.c_uint8 * 2), ("noise_seed", ctypes.c_uint64), ("has_code", ctypes.c_int32),
                ("code_row", ctypes.c_int32), ("code_col", ctypes.c_int32), ("code", ctypes.c_int32 * 3),
                ("shapes", LongShape * 8)]


class LongDesc(ctypes.Structure):
    _fields_ = [(n, ctypes.c_int32) for n in ("n_images", "side_px", "grid", "image_a", "image_b", "color", "kind")] + \
               [("images", LongImage * MAX_IMAGES)]


def build_scene_so(out_dir):
    so = os.path.join(out_dir, "scene_long.so")
    subprocess.run(["cc", "-O2", "-std=c11", "-shared", "-fPIC", "-Iexamples", "-o", so, "examples/tools/scene.c",
                    "examples/tools/scene_long.c", "-lm"], check=True)
    return so


class Scenes:
    def __init__(self, so_path):
        lib = ctypes.CDLL(so_path)
        args = [ctypes.c_uint64, ctypes.c_uint64, ctypes.c_int32, ctypes.c_int32, ctypes.c_int32, ctypes.c_int32,
                ctypes.c_uint32]
        lib.oc_long_describe.argtypes = args + [ctypes.POINTER(LongDesc), ctypes.POINTER(LongItem)]
        lib.oc_long_describe.restype = ctypes.c_int
        lib.oc_long_render.argtypes = [ctypes.POINTER(LongDesc), ctypes.c_int32, ctypes.c_void_p]
        lib.oc_long_render.restype = ctypes.c_int
        self.lib = lib
        self.buf = (ctypes.c_uint8 * (MAX_IMAGES * MAX_SIDE * MAX_SIDE * 3))()

    def describe(self, seed, index, lo=MIN_IMAGES, hi=MAX_IMAGES, side_lo=MIN_SIDE, side_hi=MAX_SIDE, mask=0):
        d, it = LongDesc(), LongItem()
        if self.lib.oc_long_describe(seed, index, lo, hi, side_lo, side_hi, mask, ctypes.byref(d), ctypes.byref(it)):
            raise SystemExit("oc_long_describe refused item %d" % index)
        return d, it

    def pixels(self, d):
        """uint8 [n, side, side, 3] (numpy)."""
        import numpy as np
        s = d.side_px
        for i in range(d.n_images):
            if self.lib.oc_long_render(ctypes.byref(d), i, ctypes.byref(self.buf, i * s * s * 3)):
                raise SystemExit("oc_long_render failed")
        return np.frombuffer(self.buf, dtype=np.uint8, count=d.n_images * s * s * 3).reshape(d.n_images, s, s, 3).copy()

    @staticmethod
    def cell_labels(d):
        """Per merged token of every image (row-major): kind + 1, colour + 1, glyph + 1 (0: none)."""
        g = d.grid
        lab = [[0] * (d.n_images * g * g) for _ in range(3)]
        for k in range(d.n_images):
            im = d.images[k]
            for j in range(im.n_shapes):
                sh = im.shapes[j]
                lab[0][k * g * g + sh.row * g + sh.col] = sh.kind + 1
                lab[1][k * g * g + sh.row * g + sh.col] = sh.color + 1
            if im.has_code:
                for j in range(3):
                    lab[2][k * g * g + im.code_row * g + im.code_col + j] = im.code[j] + 1
        return lab


# ---- text ----------------------------------------------------------------------------------------
def prompt_text(question, n_images, grid):
    """The chat prompt exactly as ocellus builds it for this model (src/model/prompt.c)."""
    t = "<|im_start|>system\n%s<|im_end|>\n<|im_start|>user\n" % SYSTEM
    for k in range(n_images):
        t += "Picture %d: <|vision_start|>%s<|vision_end|>" % (k + 1, "<|image_pad|>" * (grid * grid))
    return t + question + "<|im_end|>\n<|im_start|>assistant\n"


def mrope_positions(ids, image_token_id, grid):
    """Qwen2.5-VL's M-RoPE positions (get_rope_index) for an item whose images are all grid x grid
    merged tokens: text advances t = h = w by one; an image's tokens share t = start and take
    h = start + row, w = start + col; the text after it resumes at start + grid. Returns three
    lists (checked against transformers' forward at start-up through the logits)."""
    t, h, w = [], [], []
    st, i = 0, 0
    while i < len(ids):
        if ids[i] == image_token_id:
            for r in range(grid):
                for c in range(grid):
                    t.append(st)
                    h.append(st + r)
                    w.append(st + c)
            i += grid * grid
            st += grid
        else:
            t.append(st)
            h.append(st)
            w.append(st)
            st += 1
            i += 1
    return [t, h, w]


def window_slots(grid):
    """Qwen2.5-VL's windows over one image of grid x grid merged units (get_window_index): 4 x 4
    units from the top-left, cut at the bottom and right edges. Returns, per window, the 64 patch
    indices (processor order: merged unit row-major, then its 2 x 2 patches) with -1 padding."""
    nw = (grid + WINDOW_UNITS - 1) // WINDOW_UNITS
    out = []
    for wr in range(nw):
        for wc in range(nw):
            slots = []
            for r in range(wr * WINDOW_UNITS, (wr + 1) * WINDOW_UNITS):
                for c in range(wc * WINDOW_UNITS, (wc + 1) * WINDOW_UNITS):
                    unit = r * grid + c
                    ok = r < grid and c < grid
                    slots += [unit * 4 + p if ok else -1 for p in range(4)]
            out.append(slots)
    return out


def curriculum(step, ramp_steps, rnd):
    """(n_images, side_px) of batch `step`: the full suite after ramp_steps batches; before, the
    upper bounds grow linearly from 8 images of 224 px. (A batch count, not a share of the run:
    the data workers cannot know how many steps the time limit will allow.)"""
    f = 1.0 if ramp_steps <= 0 else min(1.0, step / ramp_steps)
    hi_n = MIN_IMAGES + int(round(f * (MAX_IMAGES - MIN_IMAGES)))
    hi_s = MIN_SIDE // 28 + int(round(f * (MAX_SIDE - MIN_SIDE) / 28))
    return rnd.randint(MIN_IMAGES, hi_n), 28 * rnd.randint(MIN_SIDE // 28, hi_s)


def items_per_batch(n_images, side, budget, branches=1):
    tokens = n_images * (side // 28) ** 2 + 40 + 12 * n_images + 24 * branches
    return max(1, budget // tokens)


def build_tokenizer(scenes, seed, vocab_size):
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
    corpus = [SYSTEM, "system\n", "user\n", "assistant\n"] + ["Picture %d: " % k for k in range(1, MAX_IMAGES + 1)]
    for i in range(6000):   # codes are left out so each glyph stays one token ("7A3" -> 7 A 3)
        _, it = scenes.describe(seed + 7919, i)
        if it.type != TYPE_NAMES.index("code"):
            corpus += [it.question.decode(), it.answer.decode()]
        else:
            corpus.append(it.question.decode())
    tok = Tokenizer(models.BPE())
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN2_PATTERN), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False)
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, min_frequency=2, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), special_tokens=[])
    tok.train_from_iterator(corpus, trainer)
    tok.add_special_tokens([AddedToken(s, special=True, normalized=False) for s in SPECIAL])
    return tok


def save_tokenizer_files(tok, hf_dir):
    tok.save(os.path.join(hf_dir, "tokenizer.json"))
    added = {str(tok.token_to_id(s)): {"content": s, "lstrip": False, "normalized": False, "rstrip": False,
                                       "single_word": False, "special": True} for s in SPECIAL}
    cfg = {"add_prefix_space": False, "added_tokens_decoder": added, "bos_token": None,
           "chat_template": CHAT_TEMPLATE, "clean_up_tokenization_spaces": False,
           "eos_token": "<|im_end|>", "errors": "replace", "model_max_length": 32768,
           "pad_token": "<|endoftext|>", "split_special_tokens": False, "tokenizer_class": "Qwen2Tokenizer",
           "unk_token": None}
    with open(os.path.join(hf_dir, "tokenizer_config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    with open(os.path.join(hf_dir, "chat_template.json"), "w") as f:
        json.dump({"chat_template": CHAT_TEMPLATE}, f, indent=2)
    pre = {"do_convert_rgb": True, "do_normalize": True, "do_rescale": True, "do_resize": True,
           "image_mean": CLIP_MEAN, "image_std": CLIP_STD, "image_processor_type": "Qwen2VLImageProcessor",
           "max_pixels": 12845056, "merge_size": 2, "min_pixels": 3136, "patch_size": 14,
           "processor_class": "Qwen2_5_VLProcessor", "resample": 3, "rescale_factor": 0.00392156862745098,
           "temporal_patch_size": 2}
    with open(os.path.join(hf_dir, "preprocessor_config.json"), "w") as f:
        json.dump(pre, f, indent=2)


# ---- model ---------------------------------------------------------------------------------------
def make_model(tok, vocab_size, args):
    from transformers import Qwen2_5_VLConfig, Qwen2_5_VLForConditionalGeneration
    ids = dict(image_token_id=tok.token_to_id("<|image_pad|>"), video_token_id=tok.token_to_id("<|video_pad|>"),
               vision_start_token_id=tok.token_to_id("<|vision_start|>"),
               vision_end_token_id=tok.token_to_id("<|vision_end|>"))
    text = dict(vocab_size=vocab_size, hidden_size=512, intermediate_size=args.ffn, num_hidden_layers=args.layers,
                num_attention_heads=8, num_key_value_heads=2, rms_norm_eps=1e-6, rope_theta=1000000.0,
                max_position_embeddings=16384, tie_word_embeddings=True, hidden_act="silu",
                bos_token_id=tok.token_to_id("<|endoftext|>"), eos_token_id=tok.token_to_id("<|im_end|>"),
                rope_scaling={"type": "mrope", "rope_type": "default", "mrope_section": [8, 12, 12]})
    vision = dict(depth=args.vision_layers, hidden_size=192, num_heads=3, intermediate_size=768, out_hidden_size=512,
                  patch_size=14, spatial_merge_size=2, temporal_patch_size=2, in_channels=3, hidden_act="silu",
                  window_size=112, fullatt_block_indexes=[2, 5] if args.vision_layers >= 6 else [args.vision_layers - 1],
                  tokens_per_second=2)
    cfg = Qwen2_5_VLConfig(text_config=text, vision_config=vision, tie_word_embeddings=True, **ids)
    return Qwen2_5_VLForConditionalGeneration(cfg)


def patchify(torch, imgs, mean, std):
    """uint8 [N, H, W, 3] on the GPU -> pixel values [N * gh * gw, 1176] in the image processor's
    order (the demo's patchify: frame repeated twice, (t, tp, c, gh/m, m, p, gw/m, m, p) order)."""
    n, h, w, _ = imgs.shape
    x = imgs.permute(0, 3, 1, 2).float() * (1.0 / 255.0)
    x = (x - mean.view(1, 3, 1, 1)) / std.view(1, 3, 1, 1)
    x = x.unsqueeze(1).expand(n, 2, 3, h, w)
    gh, gw = h // 14, w // 14
    x = x.reshape(n, 1, 2, 3, gh // 2, 2, 14, gw // 2, 2, 14)
    x = x.permute(0, 1, 4, 7, 5, 8, 3, 2, 6, 9)
    return x.reshape(n * gh * gw, 3 * 2 * 14 * 14).contiguous()


def question_labels(ids, vision_end_id, im_end_id):
    lab = [-100] * len(ids)
    last = max(i for i, t in enumerate(ids) if t == vision_end_id)
    end = ids.index(im_end_id, last)
    for i in range(last + 1, end):
        lab[i] = ids[i]
    return lab


def extra_questions(d, rnd, n):
    """Up to n more (question, answer, type) of the final scene d, derived without editing it (so
    they all hold at once): the generator's own question texts, kept only where the answer is
    unique (detail, which_image, compare) or in the suite's range (count_all 0-6)."""
    out = []
    imgs = [d.images[k] for k in range(d.n_images)]
    shapes = lambda im: [im.shapes[j] for j in range(im.n_shapes)]
    for _ in range(4 * n):
        if len(out) >= n:
            break
        t = rnd.randrange(len(TYPE_NAMES))
        if t == 0:
            k = rnd.randrange(d.n_images)
            sh = rnd.choice(shapes(imgs[k]))
            if sum(o.kind == sh.kind for o in shapes(imgs[k])) == 1:
                out.append(("What color is the %s in image %d?" % (KIND_NAMES[sh.kind], k + 1), COLOR_NAMES[sh.color], t))
        elif t == 1:
            k = rnd.randrange(d.n_images)
            sh = rnd.choice(shapes(imgs[k]))
            if sum(o.kind == sh.kind and o.color == sh.color for im in imgs for o in shapes(im)) == 1:
                c = COLOR_NAMES[sh.color]
                out.append(("Which image has %s %s %s?" % ("an" if c[0] == "o" else "a", c, KIND_NAMES[sh.kind]),
                            str(k + 1), t))
        elif t == 2:
            c, kd = rnd.randrange(7), rnd.randrange(4)
            n_match = sum(o.kind == kd and o.color == c for im in imgs for o in shapes(im))
            if n_match <= 6:
                out.append(("How many %s %ss are there in all images?" % (COLOR_NAMES[c], KIND_NAMES[kd]), str(n_match), t))
        elif t == 3:
            coded = [k for k in range(d.n_images) if imgs[k].has_code]
            if coded:
                k = rnd.choice(coded)
                out.append(("What is the code in image %d?" % (k + 1), "".join(GLYPHS[g] for g in imgs[k].code), t))
        elif t == 4:
            a, b = rnd.sample(range(d.n_images), 2)
            c = rnd.randrange(7)
            na, nb = (sum(o.color == c for o in shapes(imgs[x])) for x in (a, b))
            if na != nb:
                out.append(("Which image has more %s shapes, image %d or image %d?" % (COLOR_NAMES[c], a + 1, b + 1),
                            str((a if na > nb else b) + 1), t))
        else:
            k = rnd.randrange(d.n_images)
            sh = sorted(shapes(imgs[k]), key=lambda o: (o.row, o.col))
            out.append(("List the shapes in image %d." % (k + 1), ", ".join(
                "%s %s %d %d" % (COLOR_NAMES[o.color], KIND_NAMES[o.kind], o.row + 1, o.col + 1) for o in sh), t))
    return out


def make_batch(scenes, tok, seed, first, n_items, n_images, side, pad_id, im_end_id, image_token_id, mask=0,
               cache=None, branches=1, qa_override=None):
    """Items first.. of stream seed, all with n_images images of side px. An item's sequence is its
    images once, then `branches` question-answer branches (the generator's question first, then
    extra_questions of the same scene); each branch attends to the images and to itself only, at
    the positions a lone question would have, so K branches are K single-question items sharing
    one prefix (the start-up check compares them). Returns ids, labels (answer + <|im_end|>),
    question labels, the attention mask ([B, L] for one branch, else [B, 1, L, L] bool), positions
    [3, B, L], images, types (per branch), cell labels, side, branch ids [B, L] (-1: prefix or
    padding), validity [B, L]. qa_override: per item, the (question, answer, type) list to use."""
    import random
    import numpy as np
    grid = side // 28
    rows, images, types, cells = [], [], [], []
    for i in range(n_items):
        d, it = scenes.describe(seed, first + i, n_images, n_images, side, side, mask)
        if qa_override is not None:
            qas = qa_override[i]
        else:
            qas = [(it.question.decode(), it.answer.decode(), it.type)]
            if branches > 1:
                qas += extra_questions(d, random.Random(seed * 7919 + first + i), branches - 1)
        key = (n_images, grid)
        if cache is not None and key in cache:
            p, ppos = cache[key]
        else:
            p = tok.encode(prompt_text("", n_images, grid).split("<|im_end|>\n<|im_start|>assistant")[0],
                           add_special_tokens=False).ids
            ppos = mrope_positions(p, image_token_id, grid)
            if cache is not None:
                cache[key] = (p, ppos)
        st = ppos[0][-1] + 1
        ids, lab, qlab, bid = list(p), [-100] * len(p), [-100] * len(p), [-1] * len(p)
        tpos = list(ppos[0])
        for b, (q, a, ty) in enumerate(qas):
            qids = tok.encode(q + "<|im_end|>\n<|im_start|>assistant\n", add_special_tokens=False).ids
            n_q = qids.index(im_end_id)
            ans = tok.encode(a, add_special_tokens=False).ids + [im_end_id]
            ids += qids + ans
            lab += [-100] * len(qids) + ans
            # a later branch's first question token would be "predicted" by the previous branch's
            # last token, which does not see this branch: no label there
            qlab += ([-100] if b else qids[:1]) + qids[1:n_q] + [-100] * (len(qids) - n_q + len(ans))
            bid += [b] * (len(qids) + len(ans))
            tpos += list(range(st, st + len(qids) + len(ans)))
            types.append(ty)
        rows.append((ids, lab, qlab, bid, ppos, tpos, len(p)))
        images.append(scenes.pixels(d))
        cells.append(np.array(Scenes.cell_labels(d), dtype=np.int64))
    L = max(len(r[0]) for r in rows)
    B = n_items
    ids = np.full((B, L), pad_id, dtype=np.int64)
    lab = np.full((B, L), -100, dtype=np.int64)
    qlab = np.full((B, L), -100, dtype=np.int64)
    bid = np.full((B, L), -1, dtype=np.int64)
    valid = np.zeros((B, L), dtype=np.int64)
    pos = np.ones((3, B, L), dtype=np.int64)
    for i, (s, l, ql, bi, ppos, tpos, n_p) in enumerate(rows):
        n = len(s)
        ids[i, :n], lab[i, :n], qlab[i, :n], bid[i, :n], valid[i, :n] = s, l, ql, bi, 1
        pos[:, i, :n] = np.array(tpos, dtype=np.int64)
        pos[1:, i, :n_p] = np.array(ppos[1:], dtype=np.int64)
    # one branch per item: the plain padding mask; more: to_device builds the tree mask on the GPU
    am = valid if int(bid.max()) == 0 else np.zeros(0, dtype=np.int64)
    return (ids, lab, am, pos, np.concatenate(images, 0), np.array(types), np.concatenate(cells, 1), qlab, side,
            bid, valid)


class BatchStream:
    """Batches made by worker processes; batch b's shape comes from curriculum() with its own
    random stream (seed, b), so the data do not depend on the number of workers."""

    def __init__(self, so_path, tok_json, seed, budget, ramp_steps, pad_id, im_end_id, image_token_id, workers,
                 branches):
        import torch

        class DS(torch.utils.data.IterableDataset):
            def __iter__(self):
                import random
                from tokenizers import Tokenizer
                info = torch.utils.data.get_worker_info()
                wid, nw = (info.id, info.num_workers) if info else (0, 1)
                scenes = Scenes(so_path)
                tok = Tokenizer.from_str(tok_json)
                cache = {}
                b = wid
                while True:
                    rnd = random.Random(seed * 1000003 + b)
                    n, side = curriculum(b, ramp_steps, rnd)
                    k = items_per_batch(n, side, budget, branches)
                    yield make_batch(scenes, tok, seed, b * 4096, k, n, side, pad_id, im_end_id, image_token_id,
                                     0, cache, branches)
                    b += nw
        self.loader = torch.utils.data.DataLoader(DS(), batch_size=None, num_workers=workers, prefetch_factor=4,
                                                  persistent_workers=True)

    def __iter__(self):
        return iter(self.loader)


def to_device(torch, batch, dev, mean, std):
    ids, lab, am, pos, imgs, types, cells, qlab, side, bid, valid = batch
    t = lambda a: torch.as_tensor(a).to(dev, non_blocking=True)
    pv = patchify(torch, t(imgs), mean, std)
    if am.numel() == 0 if hasattr(am, "numel") else am.size == 0:
        b, v = t(bid), t(valid) > 0
        L = b.shape[1]
        # j <= i, and j in the prefix or in i's own branch; padding rows see themselves (no NaN)
        causal = torch.ones(L, L, dtype=torch.bool, device=dev).tril()
        am = causal[None] & ((b[:, :, None] == b[:, None, :]) | (b[:, None, :] == -1)) & v[:, None, :] & v[:, :, None]
        am = (am | torch.eye(L, dtype=torch.bool, device=dev)[None])[:, None]
    return (dict(ids=t(ids), mask=t(am), pos=t(pos), pv=pv, n_images=imgs.shape[0], side=int(side),
                 cells=t(cells), qlab=t(qlab), bid=t(bid), valid=t(valid)), t(lab), torch.as_tensor(types))


def rotate_half(torch, x):
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


class Forward:
    """The forward pass for batches whose images share one side: the vision tower's attention is
    batched (windows gathered into 64-slot groups with a key mask; full-attention blocks per
    image) instead of transformers' per-window loop. Processing in the processor's order instead
    of transformers' window order is the same arithmetic: within a window or an image attention
    does not depend on order, and the merger works on whole 2x2 units. Start-up compares the
    logits with transformers' own forward and falls back to it if they differ."""

    def __init__(self, torch, model, image_token_id):
        self.torch, self.model, self.image_token_id = torch, model, image_token_id
        self.fast = False
        self.last_feats = None
        self.want_hidden = False
        self.last_hidden = None
        vc = model.config.vision_config
        self.n_heads = vc.num_heads
        self.head_dim = vc.hidden_size // vc.num_heads
        self.full = set(vc.fullatt_block_indexes)
        self.cache = {}

    def layout(self, side):
        if side in self.cache:
            return self.cache[side]
        torch = self.torch
        dev = next(self.model.parameters()).device
        g, m = side // 14, 2
        dim = self.head_dim // 2
        inv_freq = 1.0 / (10000.0 ** (torch.arange(0, dim, 2, dtype=torch.float, device=dev) / dim))
        hpos = torch.arange(g, device=dev).unsqueeze(1).expand(-1, g)
        wpos = torch.arange(g, device=dev).unsqueeze(0).expand(g, -1)
        order = lambda t: t.reshape(g // m, m, g // m, m).permute(0, 2, 1, 3).flatten()
        freqs = torch.outer(torch.arange(g, device=dev, dtype=torch.float), inv_freq)
        rpe = torch.cat((freqs[order(hpos)], freqs[order(wpos)]), dim=-1)
        emb = torch.cat((rpe, rpe), dim=-1)
        slots = torch.tensor(window_slots(side // 28), device=dev)        # [n_win, 64]
        valid = slots >= 0
        lay = dict(cos=emb.cos()[:, None, :], sin=emb.sin()[:, None, :], slots=slots.clamp(min=0), valid=valid,
                   flat_valid=valid.flatten().nonzero().squeeze(1), flat_patch=slots.flatten()[valid.flatten()])
        self.cache[side] = lay
        return lay

    def vision(self, pv, n_images, side):
        torch = self.torch
        F = torch.nn.functional
        visual = self.model.model.visual
        lay = self.layout(side)
        x = visual.patch_embed(pv)
        P = x.shape[0] // n_images
        H, D = self.n_heads, self.head_dim
        n_win = lay["slots"].shape[0]
        for li, blk in enumerate(visual.blocks):
            a = blk.attn
            h = blk.norm1(x)
            q, k, v = a.qkv(h).reshape(n_images, P, 3, H, D).unbind(2)
            dt = q.dtype
            qf, kf = q.float(), k.float()
            q = (qf * lay["cos"] + rotate_half(torch, qf) * lay["sin"]).to(dt)
            k = (kf * lay["cos"] + rotate_half(torch, kf) * lay["sin"]).to(dt)
            if li in self.full:
                o = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2))
                o = o.transpose(1, 2).reshape(n_images, P, H * D)
            else:
                s = lay["slots"].flatten()
                gw = lambda t: t[:, s].reshape(n_images * n_win, 64, H, D).transpose(1, 2)
                km = lay["valid"].view(1, n_win, 1, 1, 64).expand(n_images, -1, -1, -1, -1).reshape(n_images * n_win, 1, 1, 64)
                ow = F.scaled_dot_product_attention(gw(q), gw(k), gw(v), attn_mask=km)
                ow = ow.transpose(1, 2).reshape(n_images, n_win * 64, H * D)
                o = torch.empty(n_images, P, H * D, dtype=ow.dtype, device=ow.device)
                o[:, lay["flat_patch"]] = ow[:, lay["flat_valid"]]
            x = x + a.proj(o.reshape(n_images * P, H * D))
            x = x + blk.mlp(blk.norm2(x))
        return visual.merger(x)

    def fast_logits(self, inp):
        emb = self.model.get_input_embeddings()(inp["ids"])
        feats = self.vision(inp["pv"], inp["n_images"], inp["side"])
        self.last_feats = feats
        sel = (inp["ids"] == self.image_token_id).unsqueeze(-1)
        emb = emb.masked_scatter(sel, feats.to(emb.dtype))
        out = self.model(inputs_embeds=emb, attention_mask=inp["mask"], position_ids=inp["pos"],
                         output_hidden_states=self.want_hidden)
        self.last_hidden = out.hidden_states if self.want_hidden else None
        return out.logits

    def hf_logits(self, inp):
        torch = self.torch
        g = inp["side"] // 14
        grid = torch.tensor([[1, g, g]] * inp["n_images"], device=inp["ids"].device)
        return self.model(input_ids=inp["ids"], attention_mask=inp["mask"], pixel_values=inp["pv"],
                          image_grid_thw=grid, mm_token_type_ids=(inp["ids"] == self.image_token_id).long()).logits

    def check(self, inp):
        torch = self.torch
        try:
            with torch.no_grad():
                a = self.hf_logits(inp).float()
                b = self.fast_logits(inp).float()
            m = inp["valid"].bool()
            rel = float((a - b)[m].abs().max() / a[m].abs().max())
        except Exception as e:  # noqa: BLE001
            print("fast path check failed to run:", repr(e))
            return
        print("fast path vs transformers (side %d): logits max rel diff %.3g" % (inp["side"], rel), flush=True)
        self.fast = rel < 1e-3

    def __call__(self, inp):
        return self.fast_logits(inp) if self.fast else self.hf_logits(inp)


def one_token_ids(tok, words):
    ids = [tok.encode(w, add_special_tokens=False).ids for w in words]
    if any(len(i) != 1 for i in ids):
        raise SystemExit("not one token each: %r" % [w for w, i in zip(words, ids) if len(i) != 1])
    return [i[0] for i in ids]


class CellProbe:
    """The demo's tied cell probe (examples/demo/train.py), for this suite: each merged image token
    names its cell's kind and colour (cosines with the words " circle", " red", scale 6), the
    colour's answer token, the code glyph drawn in it (cosine with the glyph's own token: the
    answer "7A3" is the tokens 7 A 3), and its row and column (untied, grid up to 16)."""

    def __init__(self, torch, model, tok):
        self.torch, self.model = torch, model
        width = model.config.vision_config.out_hidden_size
        self.kind_ids = torch.tensor(one_token_ids(tok, [" " + k for k in KIND_NAMES]))
        self.color_ids = torch.tensor(one_token_ids(tok, [" " + c for c in COLOR_NAMES]))
        self.color_answer_ids = torch.tensor(one_token_ids(tok, COLOR_NAMES))
        self.glyph_ids = torch.tensor(one_token_ids(tok, list(GLYPHS)))
        self.head = torch.nn.Linear(width, 3)          # the "empty" logits of kind, colour, glyph
        self.pos = torch.nn.Linear(width, 16 + 16)
        self.scale = 6.0

    def to(self, dev):
        for n in ("head", "pos", "kind_ids", "color_ids", "color_answer_ids", "glyph_ids"):
            setattr(self, n, getattr(self, n).to(dev))
        return self

    def own_parameters(self):
        return list(self.head.parameters()) + list(self.pos.parameters())

    def loss(self, feats, cells, n_images, grid):
        torch = self.torch
        F = torch.nn.functional
        cl = cells.reshape(3, -1)
        f = F.normalize(feats, dim=-1)
        E = F.normalize(self.model.get_input_embeddings().weight.float(), dim=-1)
        e = self.head(feats * torch.rsqrt(feats.pow(2).mean(-1, keepdim=True) + 1e-6))
        zk = torch.cat([e[:, :1], self.scale * f @ E[self.kind_ids].t()], 1)
        zc = torch.cat([e[:, 1:2], self.scale * f @ E[self.color_ids].t()], 1)
        zg = torch.cat([e[:, 2:], self.scale * f @ E[self.glyph_ids].t()], 1)
        cell = torch.arange(feats.shape[0], device=feats.device) % (grid * grid)
        row, col = cell // grid, cell % grid
        zp = self.pos(feats)
        shape = cl[1] > 0
        za = self.scale * f[shape] @ E[self.color_answer_ids].t()
        loss = (F.cross_entropy(zk, cl[0]) + F.cross_entropy(zc, cl[1]) + F.cross_entropy(zg, cl[2]) +
                0.5 * (F.cross_entropy(zp[:, :16], row) + F.cross_entropy(zp[:, 16:], col)))
        if bool(shape.any()):
            loss = loss + F.cross_entropy(za, cl[1][shape] - 1)
        return loss


class IndexProbe:
    """The demo's index probe for up to 32 images: after decoder layer `layer` every image token
    names its image as the answer of "Which image ...?" would: its first digit token, then its
    second digit or <|im_end|> (cosines with the decoder's word embeddings, learnt scale)."""

    def __init__(self, torch, model, tok, layer, image_token_id, im_end_id):
        self.torch, self.model, self.layer = torch, model, layer
        self.image_token_id, self.vision_start_id = image_token_id, image_token_id - 3
        self.digit_ids = torch.tensor(one_token_ids(tok, [str(k) for k in range(10)]) + [im_end_id])
        self.scale = torch.nn.Parameter(torch.tensor(5.0))

    def to(self, dev):
        self.digit_ids = self.digit_ids.to(dev)
        self.scale = self.torch.nn.Parameter(self.scale.detach().to(dev))
        return self

    def loss(self, hidden, ids):
        torch = self.torch
        h = hidden[self.layer].float()
        number = torch.cumsum((ids == self.vision_start_id).long(), dim=1)   # 1-based image number
        sel = ids == self.image_token_id
        f = h[sel]
        f = f * torch.rsqrt(f.pow(2).mean(-1, keepdim=True) + 1e-6)
        z = self.scale * f @ self.model.get_input_embeddings().weight.float()[self.digit_ids].t()
        n = number[sel]
        first = torch.where(n >= 10, n // 10, n)
        second = torch.where(n >= 10, n % 10, torch.full_like(n, 10))
        F = torch.nn.functional
        return F.cross_entropy(z[:, :10], first) + F.cross_entropy(z, second)


def save_f16(model, hf_dir):
    """f16 is what the GGUF holds anyway; a copy, so the fp32 weights being trained stay exact."""
    sd = {k: v.detach().half() for k, v in model.state_dict().items()}
    model.save_pretrained(hf_dir, state_dict=sd)


def per_branch(torch, values, lab, bid):
    """Sums and counts of values [B, L-1] over each (item, branch)'s labelled tokens."""
    tgt = lab[:, 1:]
    m = (tgt != -100)
    key = torch.arange(lab.shape[0], device=lab.device)[:, None] * 256 + bid[:, 1:].clamp(min=0)
    sums = torch.zeros(lab.shape[0] * 256, device=lab.device).scatter_add_(0, key[m], values[m].float())
    cnt = torch.zeros(lab.shape[0] * 256, device=lab.device).scatter_add_(0, key[m], torch.ones_like(values[m], dtype=torch.float))
    return sums, cnt


def answer_loss(torch, logits, lab, bid, per_branch_out=False):
    """Each branch's mean cross-entropy over its own answer tokens, then the mean over branches
    (a list of ~40 tokens counts as much as a one-token answer, as the demo's per-item loss)."""
    tgt = lab[:, 1:]
    ce = torch.nn.functional.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]), tgt.reshape(-1),
                                           ignore_index=-100, reduction="none").view(tgt.shape)
    sums, cnt = per_branch(torch, ce, lab, bid)
    has = cnt > 0
    if per_branch_out:
        return sums[has] / cnt[has]
    return (sums[has] / cnt[has]).mean()


def answer_correct(torch, logits, lab, bid):
    """Per branch (in order): every answer token is the argmax given the right prefix."""
    wrong = (logits[:, :-1].argmax(-1) != lab[:, 1:]).long()
    sums, cnt = per_branch(torch, wrong, lab, bid)
    return sums[cnt > 0] == 0


def check_branches(torch, fwd, scenes, tok, dev, mean, std, branches, ids3):
    """The tree mask is exact: each branch's answer loss in a branched batch equals that of the
    same question asked alone (plain padding mask)."""
    import random
    pad_id, im_end_id, image_token_id = ids3
    qas = []
    for i in range(2):
        d, it = scenes.describe(999, i, 8, 8, 252, 252, 0)
        qas.append([(it.question.decode(), it.answer.decode(), it.type)] +
                   extra_questions(d, random.Random(i), branches - 1))
    k = min(len(q) for q in qas)
    qas = [q[:k] for q in qas]
    try:
        with torch.no_grad():
            inp, lab, _ = to_device(torch, make_batch(scenes, tok, 999, 0, 2, 8, 252, pad_id, im_end_id, image_token_id,
                                                      qa_override=qas), dev, mean, std)
            got = answer_loss(torch, fwd(inp).float(), lab, inp["bid"], True).view(2, k)
            want = torch.zeros(2, k, device=dev)
            for b in range(k):
                inp, lab, _ = to_device(torch, make_batch(scenes, tok, 999, 0, 2, 8, 252, pad_id, im_end_id,
                                                          image_token_id, qa_override=[[q[b]] for q in qas]),
                                        dev, mean, std)
                want[:, b] = answer_loss(torch, fwd(inp).float(), lab, inp["bid"], True)
        rel = float((got - want).abs().max() / want.abs().max())
    except Exception as e:  # noqa: BLE001
        print("branch check failed to run:", repr(e), flush=True)
        return False
    print("branches (%d) vs single questions: answer loss max rel diff %.3g" % (k, rel), flush=True)
    return rel < 1e-3


def heldout(torch, np, fwd, scenes, tok, dev, mean, std, n_items, budget, ids3):
    """Teacher-forced exactness (greedy would produce exactly the answer) on items 0..n_items-1 of
    EVAL_SEED, each item drawn from the suite's full distribution, in batches of one shape."""
    pad_id, im_end_id, image_token_id = ids3
    per_type = np.zeros((len(TYPE_NAMES), 2))
    groups = {}
    for i in range(n_items):
        d, it = scenes.describe(EVAL_SEED, i)
        groups.setdefault((d.n_images, d.side_px), []).append(i)
    with torch.no_grad():
        for (n, side), idx in sorted(groups.items()):
            for i in idx:   # one item per forward: the stream of EVAL_SEED is by index
                batch = make_batch(_IndexScenes(scenes, i), tok, EVAL_SEED, i, 1, n, side, pad_id, im_end_id,
                                   image_token_id)
                inputs, lab, types = to_device(torch, batch, dev, mean, std)
                with torch.autocast("cuda", dtype=torch.bfloat16):
                    logits = fwd(inputs).float()
                ok = answer_correct(torch, logits, lab, inputs["bid"]).cpu().numpy()
                per_type[int(types[0])] += (ok[0], 1)
    acc = {TYPE_NAMES[t]: per_type[t, 0] / max(1, per_type[t, 1]) for t in range(len(TYPE_NAMES))}
    acc["overall"] = per_type[:, 0].sum() / max(1, per_type[:, 1].sum())
    return acc, int(per_type[:, 1].sum())


class _IndexScenes:
    """Scenes whose describe() ignores the requested shape: item i of the stream drawn from the
    full distribution, as `ocellus eval --suite long` draws it."""

    def __init__(self, scenes, index):
        self.scenes, self.index = scenes, index

    def describe(self, seed, index, *rest):
        return self.scenes.describe(seed, index)

    def pixels(self, d):
        return self.scenes.pixels(d)


def selftest():
    """The data path without torch, numpy or tokenizers: the generator through ctypes, prompts,
    positions and windows."""
    import random
    so = build_scene_so("/tmp")
    sc = Scenes(so)
    if ctypes.sizeof(LongItem) != 8 * 4 + 16 * 12 + 160 + 192:
        raise SystemExit("LongItem size")
    n_types = [0] * len(TYPE_NAMES)
    tokens = []
    for i in range(300):
        d, it = sc.describe(EVAL_SEED, i)
        assert MIN_IMAGES <= it.n_images <= MAX_IMAGES and it.side_px % 28 == 0, it.side_px
        n_types[it.type] += 1
        tokens.append(it.n_images * (it.side_px // 28) ** 2)
        if it.type == TYPE_NAMES.index("list"):
            assert 4 <= it.answer.decode().count(",") + 1 <= 8, it.answer
        for c in it.answer_cells[:it.n_answer_cells]:
            assert 0 <= c.image < it.n_images and 0 <= c.row < d.grid and 0 <= c.col < d.grid
        lab = Scenes.cell_labels(d)
        if it.type == TYPE_NAMES.index("code"):
            c0 = it.answer_cells[0]
            g = d.grid
            glyph = lab[2][c0.image * g * g + c0.row * g + c0.col] - 1
            assert GLYPHS[glyph] == it.answer.decode()[0], (it.answer, glyph)
    n_extra = [0] * len(TYPE_NAMES)
    for i in range(100):   # extra questions: the same texts as the generator's, answers re-derived
        d, it = sc.describe(EVAL_SEED, i)
        ex = extra_questions(d, random.Random(i), 11)
        for q, a, t in ex:
            n_extra[t] += 1
            assert q and a, (q, a)
        d2, it2 = sc.describe(EVAL_SEED, i)
        q0 = (it2.question.decode(), it2.answer.decode(), it2.type)
        for q, a, t in ex:   # a question the generator asked has the generator's answer here too
            if q == q0[0]:
                assert a == q0[1] or q0[2] in (2, 4), (q, a, q0)
    print("extra questions per type (100 items x 11):", dict(zip(TYPE_NAMES, n_extra)))
    print("types", dict(zip(TYPE_NAMES, n_types)), "mean image tokens %.0f" % (sum(tokens) / len(tokens)))
    ids = [5] * 3 + [99] * 16 + [7] * 2 + [99] * 16 + [8]
    t, h, w = mrope_positions(ids, 99, 4)
    assert t[3] == 3 and h[3 + 15] == 6 and w[3 + 15] == 6 and t[19] == 7 and t[-1] == 7 + 2 + 4, (t, h, w)
    for g in (8, 10, 16):
        sl = window_slots(g)
        got = sorted(s for w_ in sl for s in w_ if s >= 0)
        assert got == list(range(g * g * 4)), g
    rnd = random.Random(1)
    print("curriculum", [curriculum(s, 300, rnd) for s in (0, 150, 300, 900)],
          "items per batch at 8x224 / 32x448:", items_per_batch(8, 224, 49152), items_per_batch(32, 448, 49152))
    print("prompt chars", len(prompt_text("What is the code in image 3?", 8, 8)))
    print("selftest ok")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out")
    ap.add_argument("--selftest", action="store_true")
    ap.add_argument("--steps", type=int, default=20000)
    ap.add_argument("--minutes", type=float, default=15)
    ap.add_argument("--batch-tokens", type=int, default=49152)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--ramp-steps", type=int, default=1000)
    ap.add_argument("--layers", type=int, default=12)
    ap.add_argument("--ffn", type=int, default=1024)
    ap.add_argument("--vision-layers", type=int, default=6)
    ap.add_argument("--eval-items", type=int, default=500)
    ap.add_argument("--cell-loss", type=float, default=1.0)
    ap.add_argument("--question-loss", type=float, default=0.3)
    ap.add_argument("--index-loss", type=float, default=1.0)
    ap.add_argument("--index-layer", type=int, default=3)
    ap.add_argument("--workers", type=int, default=14)
    ap.add_argument("--branches", type=int, default=12, help="question-answer branches per item sharing its "
                    "images (make_batch); 1: one question per item (run 1)")
    ap.add_argument("--vocab", type=int, default=600, help="BPE vocabulary before the special tokens: room for "
                    "every colour, kind and question word to be one token (the probes need that)")
    args = ap.parse_args()
    if args.selftest:
        selftest()
        return
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    import numpy as np
    import torch
    import transformers
    t_start = time.time()
    hf_dir = os.path.join(args.out, "hf")
    os.makedirs(hf_dir, exist_ok=True)
    so = build_scene_so(args.out)
    scenes = Scenes(so)
    torch.manual_seed(args.seed)
    tok = build_tokenizer(scenes, args.seed, args.vocab)
    n_tok = tok.get_vocab_size(with_added_tokens=True)
    vocab_size = (n_tok + 63) // 64 * 64
    print("tokenizer: %d tokens, vocab_size %d" % (n_tok, vocab_size), flush=True)
    save_tokenizer_files(tok, hf_dir)
    dev = torch.device("cuda")
    mean = torch.tensor(CLIP_MEAN, device=dev)
    std = torch.tensor(CLIP_STD, device=dev)
    model = make_model(tok, vocab_size, args).to(dev)
    n_params = sum(p.numel() for p in model.parameters())
    n_vis = sum(p.numel() for p in model.model.visual.parameters())
    print("parameters: %d (vision %d)" % (n_params, n_vis), flush=True)
    pad_id, im_end_id = tok.token_to_id("<|endoftext|>"), tok.token_to_id("<|im_end|>")
    image_token_id = tok.token_to_id("<|image_pad|>")
    if tok.token_to_id("<|vision_end|>") != image_token_id - 2:
        raise SystemExit("expects <|vision_end|> two ids before <|image_pad|>")
    fwd = Forward(torch, model, image_token_id)
    model.eval()
    for side in (252, 224):   # a padded-window side, then a whole-window one
        fwd.check(to_device(torch, make_batch(scenes, tok, 999, 0, 2, 8, side, pad_id, im_end_id, image_token_id),
                            dev, mean, std)[0])
        if not fwd.fast:
            break
    print("forward path:", "batched vision (fast)" if fwd.fast else "transformers'", flush=True)
    if args.branches > 1 and not check_branches(torch, fwd, scenes, tok, dev, mean, std, args.branches,
                                                (pad_id, im_end_id, image_token_id)):
        args.branches = 1
    print("branches per item:", args.branches, flush=True)
    stream = BatchStream(so, tok.to_str(), args.seed, args.batch_tokens, args.ramp_steps, pad_id, im_end_id,
                         image_token_id, args.workers, args.branches)
    cell_probe = CellProbe(torch, model, tok).to(dev)
    index_probe = IndexProbe(torch, model, tok, args.index_layer, image_token_id, im_end_id).to(dev)
    fwd.want_hidden = args.index_loss > 0
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.dim() < 2]
    groups = [{"params": decay, "weight_decay": 0.05}, {"params": no_decay, "weight_decay": 0.0},
              {"params": cell_probe.own_parameters() + [index_probe.scale], "weight_decay": 0.0}]
    try:
        opt = torch.optim.AdamW(groups, lr=args.lr, betas=(0.9, 0.98), eps=1e-8, fused=True)
    except (TypeError, RuntimeError):
        opt = torch.optim.AdamW(groups, lr=args.lr, betas=(0.9, 0.98), eps=1e-8)
    sched = {"steps": args.steps}

    def lr_at(step):
        total = sched["steps"]
        warmup = min(300, total // 10)
        if step < warmup:
            return args.lr * (step + 1) / warmup
        f = min(1.0, (step - warmup) / max(1, total - warmup))
        return args.lr * (0.02 + 0.98 * 0.5 * (1 + math.cos(math.pi * f)))

    log = {k: v for k, v in vars(args).items()}
    log.update(versions="torch %s transformers %s" % (torch.__version__, transformers.__version__),
               n_params=n_params, n_vision_params=n_vis, vocab_size=vocab_size, losses=[])
    model.train()
    torch.backends.cuda.matmul.allow_tf32 = True
    t0 = time.time()
    run = np.zeros(5)   # answer loss, cell loss, index loss, correct, items
    run_steps, step, items_seen, tokens_seen = 0, 0, 0, 0
    for batch in stream:
        el = time.time() - t0
        if step >= sched["steps"] or el > args.minutes * 60:
            break
        if step == 20:
            t20 = time.time()
        if step in (60, 300):   # fit the schedule to the time left (the ramp makes later steps slower:
            # the estimate uses the current rate, which is an overestimate of what fits; the time
            # limit above still ends the run on time)
            per_step = (time.time() - t20) / (step - 20)
            left = args.minutes * 60 - el
            sched["steps"] = max(step + 10, min(args.steps, step + int(0.8 * left / per_step)))
            print("%.3f s/step at step %d: schedule %d steps" % (per_step, step, sched["steps"]), flush=True)
        for g in opt.param_groups:
            g["lr"] = lr_at(step)
        inputs, lab, types = to_device(torch, batch, dev, mean, std)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            logits = fwd(inputs).float()
        loss = answer_loss(torch, logits, lab, inputs["bid"])
        total = loss
        if args.question_loss > 0:
            total = total + args.question_loss * answer_loss(torch, logits, inputs["qlab"], inputs["bid"])
        if args.cell_loss > 0 and fwd.fast:
            cell = cell_probe.loss(fwd.last_feats.float(), inputs["cells"], inputs["n_images"], inputs["side"] // 28)
            total = total + args.cell_loss * cell
            run[1] += float(cell.detach())
        if args.index_loss > 0 and fwd.fast:
            index = index_probe.loss(fwd.last_hidden, inputs["ids"])
            total = total + args.index_loss * index
            run[2] += float(index.detach())
        opt.zero_grad(set_to_none=True)
        total.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        ok = answer_correct(torch, logits.detach(), lab, inputs["bid"]).cpu().numpy()
        run[0] += float(loss.detach())
        run[3] += ok.sum()
        run[4] += len(ok)
        items_seen += len(ok)
        tokens_seen += int(inputs["valid"].sum())
        run_steps += 1
        step += 1
        if step % 100 == 0 or step == 1:
            print("step %5d  loss %.4f  cell %.4f  index %.4f  acc %.3f  shape %dx%d  lr %.2e  %.0f s" %
                  (step, run[0] / run_steps, run[1] / run_steps, run[2] / run_steps, run[3] / max(1, run[4]),
                   inputs["n_images"] // lab.shape[0], inputs["side"], lr_at(step - 1), time.time() - t0), flush=True)
            log["losses"].append([step, run[0] / run_steps, run[3] / max(1, run[4]), run[1] / run_steps,
                                  run[2] / run_steps])
            run[:] = 0
            run_steps = 0
        if step % 1000 == 0:   # a checkpoint, in case the lease ends early
            save_f16(model, hf_dir)
    log.update(steps=step, items_seen=items_seen, tokens_seen=tokens_seen, train_seconds=time.time() - t0,
               data="examples/tools/scene_long.c stream seed %d, batch b = items b*4096.. with curriculum()" % args.seed)
    save_f16(model, hf_dir)
    model.eval()
    acc, n = heldout(torch, np, fwd, scenes, tok, dev, mean, std, args.eval_items, args.batch_tokens,
                     (pad_id, im_end_id, image_token_id))
    log["heldout_accuracy_transformers"] = acc
    log["heldout_items"] = n
    print("held-out accuracy (transformers, %d items, seed %d): %s" % (n, EVAL_SEED,
          " ".join("%s %.3f" % kv for kv in acc.items())), flush=True)
    save_tokenizer_files(tok, hf_dir)
    log["total_seconds"] = time.time() - t_start
    with open(os.path.join(args.out, "train-log.json"), "w") as f:
        json.dump(log, f, indent=1)
    print("saved", hf_dir, "in %.0f s total" % log["total_seconds"], flush=True)


if __name__ == "__main__":
    main()
