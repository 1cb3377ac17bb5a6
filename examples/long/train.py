#!/usr/bin/env python3
"""train.py: trains ocellus' long-prompt model, a small Qwen2.5-VL, on the long suite of
examples/tools/scene_long.c (8-32 images of 224-448 px per item, prompts of 1K-8K tokens).

Run from the repository root on the GPU machine (torch + transformers + tokenizers + safetensors):
    python3 examples/long/train.py --out /tmp/long --minutes 15                 # one GPU
    python3 -m torch.distributed.run --standalone --nproc_per_node 4 examples/long/train.py --out /tmp/long
It writes /tmp/long/hf (a Hugging Face checkpoint, f16) and /tmp/long/train-log.json. Then here:
    ./ocellus convert /tmp/long/hf -o examples/long/ocellus-long --type q8_0 (TRAINING.md)
`python3 examples/long/train.py --selftest` runs the data path (generator, prompts, positions,
window layout, answer cells) with the standard library only, for machines without torch.

The recipe is the demo model's (examples/demo/train.py), adapted to long prompts (TRAINING.md):
- Data: scene.c + scene_long.c compiled alone into a shared object and called through ctypes
  (stream seed --seed, + 100 per rank; `ocellus eval --suite long` uses seed 1000001, never
  trained on). A batch holds items with the same image count and side, so the vision tower runs
  batched; its size follows a token budget (--batch-tokens); each item carries --branches
  question-answer branches over its images (a tree mask).
- Curriculum: --sel-steps batches at 224 px (8-32 images), then the side grows to 448 px over
  --ramp-steps batches.
- Model: transformers' Qwen2_5_VLForConditionalGeneration, bf16 autocast, sdpa attention.
- Training-only aids, none of them in the saved model: supervised attention in a few decoder heads
  (AttnSupervisor: image tokens -> their label, answer positions -> the answer's cells), a
  language-model loss on the question's tokens, a probe on the merged image tokens tied to the word
  embeddings, and a probe that makes each image token's decoder state name its image.
- Several GPUs (torchrun): data parallel by hand (one all-reduce of the gradients per step).
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
                ("question", ctypes.c_char * 160), ("answer", ctypes.c_char * 256)]


class LongShape(ctypes.Structure):
    _fields_ = [(n, ctypes.c_int32) for n in ("kind", "color", "col", "row", "x_px", "y_px", "size_px")]


class LongImage(ctypes.Structure):
    _fields_ = [("n_shapes", ctypes.c_int32), ("background", ctypes.c_int32), ("bg_rgb", ctypes.c_uint8 * 6),
                ("pad", ctypes.c_uint8 * 2), ("noise_seed", ctypes.c_uint64), ("has_code", ctypes.c_int32),
                ("code_row", ctypes.c_int32), ("code_col", ctypes.c_int32), ("code", ctypes.c_int32 * 3),
                ("shapes", LongShape * 12)]


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


def curriculum(step, sel_steps, ramp_steps, rnd):
    """(n_images, side_px) of batch `step`: a selection phase of sel_steps batches at 224 px with
    the full 8-32 images (every image number and the label heads from the start, short prompts),
    then the side's upper bound grows linearly to 448 px over ramp_steps batches. (Batch counts,
    not shares of the run: the data workers cannot know how many steps the time limit allows.)"""
    n = rnd.randint(MIN_IMAGES, MAX_IMAGES)
    if step < sel_steps:
        return n, MIN_SIDE
    f = 1.0 if ramp_steps <= 0 else min(1.0, (step - sel_steps) / ramp_steps)
    hi_s = MIN_SIDE // 28 + int(round(f * (MAX_SIDE - MIN_SIDE) / 28))
    return n, 28 * rnd.randint(MIN_SIDE // 28, hi_s)


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


def gguf_tokenizer(text_path):
    """The tokenizer of a shipped GGUF (run 6 on): its token list and merges as a BPE with
    build_tokenizer's normalizer and pre-tokenizer. Rebuilding from the corpus would give another
    vocabulary once the suite's texts change (run 6 took the row and column out of list answers)."""
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import gguf_init
    meta = gguf_init.Reader(text_path).meta
    tokens, merges = meta["tokenizer.ggml.tokens"], meta["tokenizer.ggml.merges"]
    n_bpe = tokens.index(SPECIAL[0])
    if tokens[n_bpe:n_bpe + len(SPECIAL)] != SPECIAL or any(t in SPECIAL for t in tokens[:n_bpe]):
        raise SystemExit("%s: the special tokens are not the last %d of the token list" % (text_path, len(SPECIAL)))
    bpe = models.BPE(vocab={t: i for i, t in enumerate(tokens[:n_bpe])}, merges=[tuple(m.split(" ")) for m in merges])
    tok = Tokenizer(bpe)
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN2_PATTERN), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False)
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


EXTRA_TYPE_WEIGHTS = None   # --type-weights: how often each type is drawn (extra branches; from run 7 on, main questions too)


def extra_questions(d, rnd, n):
    """Up to n more (question, answer, type, cells) of the final scene d, derived without editing it
    (so they all hold at once): the generator's own question texts, kept only where the answer is
    unique (detail, which_image, compare) or in the suite's range (count_all 0-6). cells: the
    (image, row, col) of the merged tokens that hold the answer, as the generator's answer_cells."""
    out = []
    imgs = [d.images[k] for k in range(d.n_images)]
    shapes = lambda im: [im.shapes[j] for j in range(im.n_shapes)]
    for _ in range(4 * n):
        if len(out) >= n:
            break
        t = rnd.choices(range(len(TYPE_NAMES)), EXTRA_TYPE_WEIGHTS)[0] if EXTRA_TYPE_WEIGHTS else rnd.randrange(len(TYPE_NAMES))
        if t == 0:
            k = rnd.randrange(d.n_images)
            sh = rnd.choice(shapes(imgs[k]))
            if sum(o.kind == sh.kind for o in shapes(imgs[k])) == 1:
                out.append(("What color is the %s in image %d?" % (KIND_NAMES[sh.kind], k + 1), COLOR_NAMES[sh.color], t,
                            [(k, sh.row, sh.col)]))
        elif t == 1:
            k = rnd.randrange(d.n_images)
            sh = rnd.choice(shapes(imgs[k]))
            if sum(o.kind == sh.kind and o.color == sh.color for im in imgs for o in shapes(im)) == 1:
                c = COLOR_NAMES[sh.color]
                out.append(("Which image has %s %s %s?" % ("an" if c[0] == "o" else "a", c, KIND_NAMES[sh.kind]),
                            str(k + 1), t, [(k, sh.row, sh.col)]))
        elif t == 2:
            c, kd = rnd.randrange(7), rnd.randrange(4)
            cells = [(i, o.row, o.col) for i, im in enumerate(imgs) for o in shapes(im) if o.kind == kd and o.color == c]
            if len(cells) <= 6:
                out.append(("How many %s %ss are there in all images?" % (COLOR_NAMES[c], KIND_NAMES[kd]), str(len(cells)),
                            t, cells))
        elif t == 3:
            coded = [k for k in range(d.n_images) if imgs[k].has_code]
            if coded:
                k = rnd.choice(coded)
                im = imgs[k]
                out.append(("What is the code in image %d?" % (k + 1), "".join(GLYPHS[g] for g in im.code), t,
                            [(k, im.code_row, im.code_col + j) for j in range(3)]))
        elif t == 4:
            a, b = rnd.sample(range(d.n_images), 2)
            c = rnd.randrange(7)
            na, nb = (sum(o.color == c for o in shapes(imgs[x])) for x in (a, b))
            if na != nb:
                out.append(("Which image has more %s shapes, image %d or image %d?" % (COLOR_NAMES[c], a + 1, b + 1),
                            str((a if na > nb else b) + 1), t,
                            [(x, o.row, o.col) for x in (a, b) for o in shapes(imgs[x]) if o.color == c]))
        else:
            k = rnd.randrange(d.n_images)
            sh = sorted(shapes(imgs[k]), key=lambda o: (o.row, o.col))
            out.append(("List the shapes in image %d." % (k + 1), ", ".join(
                "%s %s" % (COLOR_NAMES[o.color], KIND_NAMES[o.kind]) for o in sh), t,
                [(k, o.row, o.col) for o in sh]))
    return out


MAX_TARGETS = 48   # answer cells per supervised row (list: 8, compare: up to 16, count_all: 6)


LIST_TYPE, COUNT_TYPE = TYPE_NAMES.index("list"), TYPE_NAMES.index("count_all")
COUNT_SCALE = 8.0  # a count head puts n / COUNT_SCALE of its mass on the n counted cells (n <= 6)


def list_token_targets(tok, answer, cells, starts, grid):
    """Run 5: per answer token of a list ("red circle, blue square, ..."), the one merged token of
    the shape that token describes (its part of the answer; the ", " before a part belongs to it),
    instead of all the image's shapes at once: a head told only "look at the shapes" averages their
    values. cells: the (image, row, col) of the listed shapes in the answer's (reading) order."""
    enc = tok.encode(answer, add_special_tokens=False)
    parts = answer.split(", ")
    assert len(parts) == len(cells), (answer, cells)
    part_starts, targets = [], []
    pos = 0
    for part, (k, r, c) in zip(parts, cells):
        part_starts.append(pos)
        targets.append(starts[k] + r * grid + c)
        pos += len(part) + 2
    out = []
    for s0, _ in enc.offsets:
        j = max(k for k, p in enumerate(part_starts) if p <= s0 + 1)
        out.append(targets[j])
    return out


def item_cells(it):
    return [(c.image, c.row, c.col) for c in it.answer_cells[:it.n_answer_cells]]


def make_batch(scenes, tok, seed, first, n_items, n_images, side, pad_id, im_end_id, image_token_id, mask=0,
               cache=None, branches=1, qa_override=None):
    """Items first.. of stream seed, all with n_images images of side px. An item's sequence is its
    images once, then `branches` question-answer branches (the generator's question first, then
    extra_questions of the same scene); each branch attends to the images and to itself only, at
    the positions a lone question would have, so K branches are K single-question items sharing
    one prefix (the start-up check compares them). qa_override: per item, the (question, answer,
    type, cells) list to use.

    Returns a dict of numpy arrays: ids, lab (answer + <|im_end|>), qlab (question tokens), am (the
    attention mask [B, L] for one branch; empty: to_device builds the tree mask), pos [3, B, L],
    images, types (per branch), cells (cell-probe labels), side, bid [B, L] (-1: prefix or padding),
    valid [B, L], and the targets of the attention supervision (AttnSupervisor):
      label_tgt [2, B, L]: for each image token, the positions of the two label tokens that name its
        image ("Picture 12: " -> the tokens 1 and 2; "Picture 5: " -> " " and 5), else -1;
      att_item, att_row [R] and att_tgt [R, MAX_TARGETS]: each row that predicts an answer token
        (not the closing <|im_end|>) and the positions of the merged image tokens that hold the answer
        (the branch's cells; -1 padding; rows of answers without cells, count 0, are left out);
        att_w [R]: 1 / rows of the row's branch; att_type [R]: the branch's question type."""
    import random
    import numpy as np
    grid = side // 28
    rows, images, types, cells = [], [], [], []
    att_item, att_row, att_tgt, att_w, att_type = [], [], [], [], []
    cnt_item, cnt_row, cnt_tgt, cnt_frac = [], [], [], []
    for i in range(n_items):
        m = mask
        if not m and EXTRA_TYPE_WEIGHTS and qa_override is None:   # --type-weights: the main question too
            m = 1 << random.Random(seed * 104729 + first + i).choices(range(len(TYPE_NAMES)), EXTRA_TYPE_WEIGHTS)[0]
        d, it = scenes.describe(seed, first + i, n_images, n_images, side, side, m)
        if qa_override is not None:
            qas = qa_override[i]
        else:
            qas = [(it.question.decode(), it.answer.decode(), it.type, item_cells(it))]
            if branches > 1:
                qas += extra_questions(d, random.Random(seed * 7919 + first + i), branches - 1)
        key = (n_images, grid)
        if cache is not None and key in cache:
            p, ppos, starts = cache[key]
        else:
            p = tok.encode(prompt_text("", n_images, grid).split("<|im_end|>\n<|im_start|>assistant")[0],
                           add_special_tokens=False).ids
            ppos = mrope_positions(p, image_token_id, grid)
            starts = [j + 1 for j in range(len(p)) if p[j] == image_token_id - 3]   # after <|vision_start|>
            if cache is not None:
                cache[key] = (p, ppos, starts)
        st = ppos[0][-1] + 1
        ids, lab, qlab, bid = list(p), [-100] * len(p), [-100] * len(p), [-1] * len(p)
        tpos = list(ppos[0])
        for b, (q, a, ty, cl) in enumerate(qas):
            qids = tok.encode(q + "<|im_end|>\n<|im_start|>assistant\n", add_special_tokens=False).ids
            n_q = qids.index(im_end_id)
            ans = tok.encode(a, add_special_tokens=False).ids + [im_end_id]
            a0 = len(ids) + len(qids)      # position of the first answer token
            tg = sorted(set(starts[k] + r * grid + c for k, r, c in cl))[:MAX_TARGETS]
            if tg:
                n_rows = len(ans) - 1
                per_tok = list_token_targets(tok, a, cl, starts, grid) if ty == LIST_TYPE else None
                for t_, r_ in enumerate(range(a0 - 1, a0 + len(ans) - 2)):
                    tt = [per_tok[t_]] if per_tok is not None else tg
                    att_item.append(i)
                    att_row.append(r_)
                    att_tgt.append(tt + [-1] * (MAX_TARGETS - len(tt)))
                    att_w.append(1.0 / n_rows)      # each branch counts once, as in answer_loss
                    att_type.append(ty)
            if ty == COUNT_TYPE:
                # the count heads' row (AttnSupervisor.count_loss): the one predicting the digit;
                # a count of 0 has no cells: its target is the row itself, with share 0
                cnt_item.append(i)
                cnt_row.append(a0 - 1)
                ct = tg if tg else [a0 - 1]
                cnt_tgt.append(ct + [-1] * (MAX_TARGETS - len(ct)))
                cnt_frac.append(len(tg) / COUNT_SCALE)
            ids += qids + ans
            lab += [-100] * len(qids) + ans
            # a later branch's first question token would be "predicted" by the previous branch's
            # last token, which does not see this branch: no label there
            qlab += ([-100] if b else qids[:1]) + qids[1:n_q] + [-100] * (len(qids) - n_q + len(ans))
            bid += [b] * (len(qids) + len(ans))
            tpos += list(range(st, st + len(qids) + len(ans)))
            types.append(ty)
        rows.append((ids, lab, qlab, bid, ppos, tpos, len(p), starts))
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
    label_tgt = np.full((2, B, L), -1, dtype=np.int64)
    for i, (s, l, ql, bi, ppos, tpos, n_p, starts) in enumerate(rows):
        n = len(s)
        ids[i, :n], lab[i, :n], qlab[i, :n], bid[i, :n], valid[i, :n] = s, l, ql, bi, 1
        pos[:, i, :n] = np.array(tpos, dtype=np.int64)
        pos[1:, i, :n_p] = np.array(ppos[1:], dtype=np.int64)
        for s0 in starts:   # "...Picture 1 2 : ' ' <|vision_start|>": the last digit is 4 back from s0
            label_tgt[0, i, s0:s0 + grid * grid] = s0 - 5
            label_tgt[1, i, s0:s0 + grid * grid] = s0 - 4
    # one branch per item: the plain padding mask; more: to_device builds the tree mask on the GPU
    am = valid if int(bid.max()) == 0 else np.zeros(0, dtype=np.int64)
    R = len(att_row)
    return dict(ids=ids, lab=lab, am=am, pos=pos, images=np.concatenate(images, 0), types=np.array(types),
                cells=np.concatenate(cells, 1), qlab=qlab, side=side, bid=bid, valid=valid, label_tgt=label_tgt,
                att_item=np.array(att_item, dtype=np.int64), att_row=np.array(att_row, dtype=np.int64),
                att_tgt=np.array(att_tgt, dtype=np.int64).reshape(R, MAX_TARGETS),
                att_w=np.array(att_w, dtype=np.float32), att_type=np.array(att_type, dtype=np.int64),
                cnt_item=np.array(cnt_item, dtype=np.int64), cnt_row=np.array(cnt_row, dtype=np.int64),
                cnt_tgt=np.array(cnt_tgt, dtype=np.int64).reshape(len(cnt_row), MAX_TARGETS),
                cnt_frac=np.array(cnt_frac, dtype=np.float32))


class BatchStream:
    """Batches made by worker processes; batch b's shape comes from curriculum() with its own
    random stream (seed, b), so the data do not depend on the number of workers."""

    def __init__(self, so_path, tok_json, seed, budget, sel_steps, ramp_steps, pad_id, im_end_id, image_token_id,
                 workers, branches):
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
                    n, side = curriculum(b, sel_steps, ramp_steps, rnd)
                    k = items_per_batch(n, side, budget, branches)
                    yield make_batch(scenes, tok, seed, b * 4096, k, n, side, pad_id, im_end_id, image_token_id,
                                     0, cache, branches)
                    b += nw
        self.loader = torch.utils.data.DataLoader(DS(), batch_size=None, num_workers=workers, prefetch_factor=4,
                                                  persistent_workers=True)

    def __iter__(self):
        return iter(self.loader)


def to_device(torch, batch, dev, mean, std):
    t = lambda a: torch.as_tensor(a).to(dev, non_blocking=True)
    pv = patchify(torch, t(batch["images"]), mean, std)
    am = batch["am"]
    if (am.numel() if hasattr(am, "numel") else am.size) == 0:
        b, v = t(batch["bid"]), t(batch["valid"]) > 0
        L = b.shape[1]
        # j <= i, and j in the prefix or in i's own branch; padding rows see themselves (no NaN)
        causal = torch.ones(L, L, dtype=torch.bool, device=dev).tril()
        am = causal[None] & ((b[:, :, None] == b[:, None, :]) | (b[:, None, :] == -1)) & v[:, None, :] & v[:, :, None]
        am = (am | torch.eye(L, dtype=torch.bool, device=dev)[None])[:, None]
    else:
        am = t(am)
    inp = dict(mask=am, pv=pv, n_images=batch["images"].shape[0], side=int(batch["side"]))
    for k in ("ids", "pos", "cells", "qlab", "bid", "valid", "label_tgt", "att_item", "att_row", "att_tgt", "att_w",
              "att_type", "cnt_item", "cnt_row", "cnt_tgt", "cnt_frac"):
        inp[k] = t(batch[k])
    return inp, t(batch["lab"]), torch.as_tensor(batch["types"])


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


def text_layers(model):
    m = model.model
    return m.language_model.layers if hasattr(m, "language_model") else m.layers


class AttnSupervisor:
    """Training aid: supervised attention in a few decoder heads (TRAINING.md, "attention
    supervision"). Runs 1 and 2 learnt to see (cell probe) but never to select the image a question
    names, and image tokens never learnt their own image number (index probe at chance): nothing
    told a query where to look among 2K-8K image tokens. Two kinds of heads are told:
      label heads (layer --label-layer, query heads 0 and 1): every image token attends to the two
        label tokens in front of its image ("Picture 12: " -> 1 and 2; "Picture 5: " -> " " and 5),
        so its state carries its image number (two heads: the sum of the two values alone could not
        tell 12 from 21);
      answer heads (--answer-layers, query head 0 each): every row that predicts an answer token
        attends to the merged tokens that hold the answer (the generator's answer_cells).
    Loss: -log of the attention mass on the targets, averaged over rows (label rows subsampled).
    q and k are recomputed from the layer's normalized input (a pre-hook on self_attn) with this
    file's M-RoPE; `check` compares that attention with the module's own at start-up. The
    supervised heads stay ordinary heads of the saved model (no extra weights)."""

    def __init__(self, torch, model, label_layer, answer_layers, label_rows, count_layers=(), count_head=1):
        self.torch = torch
        cfg = model.config.text_config if hasattr(model.config, "text_config") else model.config
        self.n_heads, self.n_kv = cfg.num_attention_heads, cfg.num_key_value_heads
        self.head_dim = cfg.hidden_size // cfg.num_attention_heads
        rs = getattr(cfg, "rope_scaling", None) or getattr(cfg, "rope_parameters", None) or {}
        self.sections = list(rs.get("mrope_section", [8, 12, 12]))
        self.theta = float(getattr(cfg, "rope_theta", None) or rs.get("rope_theta", 1000000.0))
        self.layers = text_layers(model)
        self.label_layer, self.answer_layers, self.label_rows = label_layer, list(answer_layers), label_rows
        self.count_layers, self.count_head = list(count_layers), count_head
        self.h = {}
        self.o_in = {}
        self.enabled = True
        for li in set([label_layer] + self.answer_layers + self.count_layers):
            self.layers[li].self_attn.register_forward_pre_hook(self._hook(li), with_kwargs=True)

    def _hook(self, li):
        def f(mod, args, kwargs):
            if self.enabled:
                self.h[li] = kwargs["hidden_states"] if "hidden_states" in kwargs else args[0]
        return f

    def rope(self, x, pos):
        """x [..., n, D] at positions pos [3, ...n] (t, h, w): Qwen2.5-VL's M-RoPE (sections of the
        D/2 frequencies: t, h, w; cos and sin repeated over both halves)."""
        torch = self.torch
        D = self.head_dim
        inv = 1.0 / (self.theta ** (torch.arange(0, D, 2, dtype=torch.float32, device=x.device) / D))   # [D/2]
        sec = torch.repeat_interleave(torch.arange(3, device=x.device), torch.tensor(self.sections, device=x.device))
        p = pos.float()                                       # [3, N]
        ang = p[sec] * inv[:, None]                            # [D/2, N]: frequency i uses axis sec[i]
        ang = torch.cat([ang, ang], 0).t()                     # [N, D]
        cos, sin = ang.cos(), ang.sin()
        if x.dim() == 3:                                       # [H, N, D]
            cos, sin = cos[None], sin[None]
        xf = x.float()
        return xf * cos + rotate_half(torch, xf) * sin

    def qk(self, li, inp, rows_b, rows_i, heads):
        """q of query heads `heads` at rows (rows_b, rows_i) -> [len(heads), R, D]; k of their KV
        heads over the rows' items -> [len(heads), R_items..]; returns q, k [len(heads), B, L, D]."""
        torch = self.torch
        att = self.layers[li].self_attn
        h = self.h[li]
        D = self.head_dim
        hr = h[rows_b, rows_i]                                           # [R, hid]
        q = att.q_proj(hr).view(-1, self.n_heads, D)[:, heads].transpose(0, 1)   # [nh, R, D]
        posr = inp["pos"][:, rows_b, rows_i]                            # [3, R]
        q = self.rope(q, posr)
        B, L = h.shape[0], h.shape[1]
        k = att.k_proj(h).view(B, L, self.n_kv, D)
        kvh = [hh // (self.n_heads // self.n_kv) for hh in heads]
        k = k[:, :, kvh].permute(2, 0, 1, 3)                            # [nh, B, L, D]
        posk = inp["pos"].reshape(3, B * L)
        k = self.rope(k.reshape(len(heads), B * L, D), posk).view(len(heads), B, L, D)
        return q, k

    def mass_loss(self, li, inp, rows_b, rows_i, targets, heads):
        """-log attention mass on targets [nh or 1, R, T] (-1: none) of query heads `heads`, per
        row [R] (mean over heads); scores item by item ([nh, rows of the item, L])."""
        torch = self.torch
        q, k = self.qk(li, inp, rows_b, rows_i, heads)
        t_all = targets.expand(len(heads), -1, -1)
        L = k.shape[2]
        j = torch.arange(L, device=k.device)
        out = torch.zeros(len(rows_b), device=k.device)
        for b in torch.unique(rows_b).tolist():
            sel = (rows_b == b).nonzero().squeeze(1)
            ri = rows_i[sel]
            sc = torch.einsum("hrd,hld->hrl", q[:, sel].float(), k[:, b].float()) / math.sqrt(self.head_dim)
            bid, valid = inp["bid"][b], inp["valid"][b] > 0
            ok = (j[None] <= ri[:, None]) & valid[None] & ((bid[None] == -1) | (bid[None] == bid[ri][:, None]))
            lp = torch.log_softmax(sc.masked_fill(~ok[None], float("-inf")), -1)
            t = t_all[:, sel]
            tl = torch.gather(lp, 2, t.clamp(min=0)).masked_fill(t < 0, float("-inf"))
            out = out.index_put((sel,), -torch.logsumexp(tl, -1).mean(0))
        return out

    def losses(self, inp):
        """(label loss, answer loss, answer loss per row [R] detached). A hinge at -log 0.9: a head
        already putting 90% of its mass on the targets gets no push to sharpen further (run 3's
        label heads went to 99.9% and the run diverged soon after at lr 2e-3)."""
        torch = self.torch
        lt = inp["label_tgt"]                                           # [2, B, L]
        rb, ri = (lt[0] >= 0).nonzero(as_tuple=True)
        if len(rb) > self.label_rows:
            pick = torch.randperm(len(rb), device=rb.device)[:self.label_rows]
            rb, ri = rb[pick], ri[pick]
        tg = torch.stack([lt[0, rb, ri], lt[1, rb, ri]], 0)[:, :, None]   # [2, R, 1]: head 0 -> first, 1 -> second
        hinge = -math.log(0.9)
        label = self.mass_loss(self.label_layer, inp, rb, ri, tg, [0, 1]).clamp(min=hinge).mean()
        answer = torch.zeros((), device=lt.device)
        per_row = torch.zeros(0, device=lt.device)
        if inp["att_row"].numel():
            ab, ai, at, w = inp["att_item"], inp["att_row"], inp["att_tgt"][None], inp["att_w"]
            per_row = 0
            for li in self.answer_layers:
                per_row = per_row + self.mass_loss(li, inp, ab, ai, at, [0]) / len(self.answer_layers)
            answer = (per_row.clamp(min=hinge) * w).sum() / w.sum()
            per_row = per_row.detach()
        count = self.count_loss(inp)
        self.h.clear()
        return label, answer, per_row, count

    def count_loss(self, inp):
        """Run 5, count heads (query head --count-head of each --count-layers): the row that predicts
        a count_all answer n puts n / COUNT_SCALE of its attention mass on the n counted cells and
        the rest elsewhere, so the head's output carries n (a head with all its mass on the cells
        outputs their mean, the same for 1 red circle as for 5: run 4's count_all stayed at 32%).
        Loss: binary cross-entropy between the mass m and the share f = n / COUNT_SCALE."""
        torch = self.torch
        if not self.count_layers or not inp["cnt_row"].numel():
            return torch.zeros((), device=inp["ids"].device)
        f = inp["cnt_frac"]
        total = 0
        for li in self.count_layers:
            log_m = -self.mass_loss(li, inp, inp["cnt_item"], inp["cnt_row"], inp["cnt_tgt"][None], [self.count_head])
            log_1m = torch.log1p(-torch.exp(log_m).clamp(max=1 - 1e-6))
            total = total - (f * log_m + (1 - f) * log_1m).mean()
        return total / len(self.count_layers)

    def check(self, model_call, inp):
        """Start-up: this file's q/k (M-RoPE) give the module's own attention output: softmax(qk)v of
        every head of one layer against the input of o_proj (one item, causal mask)."""
        torch = self.torch
        li = self.answer_layers[-1]
        att = self.layers[li].self_attn
        got = {}
        hook = att.o_proj.register_forward_pre_hook(lambda m, a: got.__setitem__("x", a[0].detach()))
        with torch.no_grad():
            model_call(inp)
            hook.remove()
            h = self.h[li]
            B, L = h.shape[0], h.shape[1]
            bb, ii = torch.meshgrid(torch.arange(B, device=h.device), torch.arange(L, device=h.device), indexing="ij")
            q, k = self.qk(li, inp, bb.flatten(), ii.flatten(), list(range(self.n_heads)))
            q = q.view(self.n_heads, B, L, -1)
            v = att.v_proj(h).view(B, L, self.n_kv, self.head_dim)
            v = v[:, :, [hh // (self.n_heads // self.n_kv) for hh in range(self.n_heads)]].permute(2, 0, 1, 3).float()
            sc = torch.einsum("hbid,hbjd->hbij", q, k) / math.sqrt(self.head_dim)
            causal = torch.ones(L, L, dtype=torch.bool, device=h.device).tril()
            sc = sc.masked_fill(~causal, float("-inf"))
            o = torch.einsum("hbij,hbjd->hbid", torch.softmax(sc, -1), v)      # [H, B, L, D]
            o = o.permute(1, 2, 0, 3).reshape(B, L, -1)
            rel = float((o - got["x"].float()).abs().max() / got["x"].float().abs().max())
        self.h.clear()
        print("attention supervision: recomputed attention vs the module's (layer %d): max rel diff %.3g" %
              (li, rel), flush=True)
        return rel < 2e-3


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
        qas.append([(it.question.decode(), it.answer.decode(), it.type, item_cells(it))] +
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
    if ctypes.sizeof(LongItem) != 8 * 4 + 16 * 12 + 160 + 256:
        raise SystemExit("LongItem size")
    n_types = [0] * len(TYPE_NAMES)
    tokens = []
    for i in range(300):
        d, it = sc.describe(EVAL_SEED, i)
        assert MIN_IMAGES <= it.n_images <= MAX_IMAGES and it.side_px % 28 == 0, it.side_px
        n_types[it.type] += 1
        tokens.append(it.n_images * (it.side_px // 28) ** 2)
        if it.type == TYPE_NAMES.index("list"):
            assert 7 <= it.answer.decode().count(",") + 1 <= 12, it.answer
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
        for q, a, t, cl in ex:
            n_extra[t] += 1
            assert q and a, (q, a)
            assert all(0 <= k < d.n_images and 0 <= r < d.grid and 0 <= c < d.grid for k, r, c in cl), cl
            assert len(cl) == (int(a) if t == 2 else 3 if t == 3 else len(cl)) and (cl or t == 2), (q, a, cl)
        d2, it2 = sc.describe(EVAL_SEED, i)
        q0 = (it2.question.decode(), it2.answer.decode(), it2.type)
        for q, a, t, cl in ex:   # a question the generator asked has the generator's answer and cells here too
            if q == q0[0]:
                assert a == q0[1] or q0[2] in (2, 4), (q, a, q0)
                if a == q0[1]:
                    assert sorted(cl) == sorted(item_cells(it2)), (q, cl, item_cells(it2))
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
    print("curriculum", [curriculum(s, 300, 600, rnd) for s in (0, 150, 300, 600, 900)],
          "items per batch at 8x224 / 32x448:", items_per_batch(8, 224, 49152), items_per_batch(32, 448, 49152))
    print("prompt chars", len(prompt_text("What is the code in image 3?", 8, 8)))
    print("selftest ok")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out")
    ap.add_argument("--selftest", action="store_true")
    ap.add_argument("--steps", type=int, default=100000)
    ap.add_argument("--minutes", type=float, default=15)
    ap.add_argument("--batch-tokens", type=int, default=49152)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--const-frac", type=float, default=0.6, help="share of the time at the peak learning rate "
                    "(after 200 warm-up steps); a cosine decay to 2%% takes the rest")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--sel-steps", type=int, default=600, help="selection phase: batches at 224 px")
    ap.add_argument("--ramp-steps", type=int, default=1200, help="then the side grows to 448 px over these")
    ap.add_argument("--layers", type=int, default=12)
    ap.add_argument("--ffn", type=int, default=1024)
    ap.add_argument("--vision-layers", type=int, default=6)
    ap.add_argument("--eval-items", type=int, default=500)
    ap.add_argument("--cell-loss", type=float, default=1.0)
    ap.add_argument("--question-loss", type=float, default=0.3)
    ap.add_argument("--index-loss", type=float, default=1.0)
    ap.add_argument("--index-layer", type=int, default=3)
    ap.add_argument("--attn-loss", type=float, default=1.0, help="weight of the attention supervision (0: off)")
    ap.add_argument("--label-layer", type=int, default=0)
    ap.add_argument("--answer-layers", default="4,6,8")
    ap.add_argument("--label-rows", type=int, default=1024)
    ap.add_argument("--count-loss", type=float, default=1.0, help="weight of the count heads' loss (0: off; run 5)")
    ap.add_argument("--count-layers", default="6,8")
    ap.add_argument("--count-head", type=int, default=1)
    ap.add_argument("--init-gguf", help="TEXT.gguf,MMPROJ.gguf: start from these weights (gguf_init.py), e.g. the "
                    "shipped examples/long pair; the tokenizer is the file's (gguf_tokenizer)")
    ap.add_argument("--init-eval-items", type=int, default=64, help="with --init-gguf: held-out items checked "
                    "before training (the loaded model must score as the shipped one)")
    ap.add_argument("--workers", type=int, default=14)
    ap.add_argument("--branches", type=int, default=12, help="question-answer branches per item sharing its "
                    "images (make_batch); 1: one question per item (run 1)")
    ap.add_argument("--vocab", type=int, default=600, help="BPE vocabulary before the special tokens: room for "
                    "every colour, kind and question word to be one token (the probes need that)")
    ap.add_argument("--type-weights", help="six weights, detail,which_image,count_all,code,compare,list: how "
                    "often each type is drawn, for the generator's question of each item and for the extra "
                    "branches (default: uniform; run 6, extra branches only: 1,1,2.5,0.5,1.5,2). Only an item "
                    "whose own question is a list has an image of 7-12 shapes: extra list branches list 1-5")
    args = ap.parse_args()
    if args.type_weights:
        global EXTRA_TYPE_WEIGHTS
        EXTRA_TYPE_WEIGHTS = [float(x) for x in args.type_weights.split(",")]
        if len(EXTRA_TYPE_WEIGHTS) != len(TYPE_NAMES) or min(EXTRA_TYPE_WEIGHTS) < 0 or sum(EXTRA_TYPE_WEIGHTS) <= 0:
            raise SystemExit("--type-weights: %d non-negative weights" % len(TYPE_NAMES))
    if args.selftest:
        selftest()
        return
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    import numpy as np
    import torch
    import transformers
    t_start = time.time()
    # several GPUs (torchrun): data parallel by hand: each rank draws its own batches (item stream
    # seed + 100 * rank), gradients are averaged with one all-reduce per step, rank 0's clock
    # decides the learning rate and the end, rank 0 logs, saves and evaluates
    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    dist = None
    if world > 1:
        import torch.distributed as dist
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
        dist.init_process_group("nccl")
    hf_dir = os.path.join(args.out, "hf")
    os.makedirs(hf_dir, exist_ok=True)
    os.makedirs(os.path.join(args.out, "rank%d" % rank), exist_ok=True)
    so = build_scene_so(os.path.join(args.out, "rank%d" % rank) if world > 1 else args.out)
    scenes = Scenes(so)
    torch.manual_seed(args.seed)
    tok_path = os.path.join(args.out, "tokenizer-trained.json")
    if rank == 0:
        tok = gguf_tokenizer(args.init_gguf.split(",")[0]) if args.init_gguf else build_tokenizer(scenes, args.seed, args.vocab)
        tok.save(tok_path)
    if world > 1:
        dist.barrier()
        if rank != 0:
            from tokenizers import Tokenizer
            tok = Tokenizer.from_file(tok_path)
    n_tok = tok.get_vocab_size(with_added_tokens=True)
    vocab_size = (n_tok + 63) // 64 * 64
    print("tokenizer: %d tokens, vocab_size %d" % (n_tok, vocab_size), flush=True)
    if rank == 0:
        save_tokenizer_files(tok, hf_dir)
    dev = torch.device("cuda", torch.cuda.current_device())
    mean = torch.tensor(CLIP_MEAN, device=dev)
    std = torch.tensor(CLIP_STD, device=dev)
    model = make_model(tok, vocab_size, args).to(dev)
    if args.init_gguf:
        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
        import gguf_init
        text_path, mmproj_path = args.init_gguf.split(",")
        n_loaded, gguf_tokens = gguf_init.load_into(torch, model, text_path, mmproj_path)
        mine = [tok.id_to_token(i) for i in range(n_tok)]
        if gguf_tokens[:n_tok] != mine:
            bad = next(i for i in range(n_tok) if i >= len(gguf_tokens) or gguf_tokens[i] != mine[i])
            raise SystemExit("--init-gguf: the tokenizer built here differs from the file's at id %d" % bad)
        print("--init-gguf: %d tensors from %s" % (n_loaded, args.init_gguf), flush=True)
    if world > 1:
        for p_ in model.parameters():
            dist.broadcast(p_.data, 0)
    n_params = sum(p.numel() for p in model.parameters())
    n_vis = sum(p.numel() for p in model.model.visual.parameters())
    print("parameters: %d (vision %d)" % (n_params, n_vis), flush=True)
    pad_id, im_end_id = tok.token_to_id("<|endoftext|>"), tok.token_to_id("<|im_end|>")
    image_token_id = tok.token_to_id("<|image_pad|>")
    if tok.token_to_id("<|vision_end|>") != image_token_id - 2:
        raise SystemExit("expects <|vision_end|> two ids before <|image_pad|>")
    # the label heads' targets are found by offset from <|vision_start|>: check them on a 12-image item
    probe_b = make_batch(scenes, tok, 999, 0, 1, 12, 224, pad_id, im_end_id, image_token_id)
    ids0, lt0 = probe_b["ids"][0], probe_b["label_tgt"][:, 0]
    img_pos = np.nonzero(lt0[0] >= 0)[0]
    firsts = img_pos[np.r_[True, np.diff(lt0[0][img_pos]) != 0]]        # one image token per image
    got = [tok.decode([int(ids0[lt0[0, j]]), int(ids0[lt0[1, j]])]) for j in firsts]
    want = [" %d" % k if k < 10 else "%d" % k for k in range(1, 13)]
    if got != want:
        raise SystemExit("label targets: %r, expected %r" % (got, want))
    fwd = Forward(torch, model, image_token_id)
    model.eval()
    for side in (252, 224):   # a padded-window side, then a whole-window one
        fwd.check(to_device(torch, make_batch(scenes, tok, 999, 0, 2, 8, side, pad_id, im_end_id, image_token_id),
                            dev, mean, std)[0])
        if not fwd.fast:
            break
    print("forward path:", "batched vision (fast)" if fwd.fast else "transformers'", flush=True)
    sup = None
    if args.attn_loss > 0:
        sup = AttnSupervisor(torch, model, args.label_layer, [int(x) for x in args.answer_layers.split(",")],
                             args.label_rows, [int(x) for x in args.count_layers.split(",") if x] if
                             args.count_loss > 0 else [], args.count_head)
        inp1 = to_device(torch, make_batch(scenes, tok, 999, 0, 1, 8, 224, pad_id, im_end_id, image_token_id),
                         dev, mean, std)[0]
        if not sup.check(fwd, inp1):
            raise SystemExit("attention supervision: the recomputed attention differs from the model's")
        sup.enabled = False
    if args.branches > 1 and not check_branches(torch, fwd, scenes, tok, dev, mean, std, args.branches,
                                                (pad_id, im_end_id, image_token_id)):
        args.branches = 1
    print("branches per item:", args.branches, flush=True)
    if args.init_gguf and args.init_eval_items > 0 and rank == 0:
        acc0, n0 = heldout(torch, np, fwd, scenes, tok, dev, mean, std, args.init_eval_items, args.batch_tokens,
                           (pad_id, im_end_id, image_token_id))
        print("--init-gguf: held-out accuracy before training (%d items): %s" % (
            n0, " ".join("%s %.3f" % kv for kv in acc0.items())), flush=True)
    stream = BatchStream(so, tok.to_str(), args.seed + 100 * rank, args.batch_tokens, args.sel_steps, args.ramp_steps, pad_id,
                         im_end_id, image_token_id, args.workers, args.branches)
    cell_probe = CellProbe(torch, model, tok).to(dev)
    index_probe = IndexProbe(torch, model, tok, args.index_layer, image_token_id, im_end_id).to(dev)
    fwd.want_hidden = args.index_loss > 0
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.dim() < 2]
    groups = [{"params": decay, "weight_decay": 0.05}, {"params": no_decay, "weight_decay": 0.0},
              {"params": cell_probe.own_parameters() + [index_probe.scale], "weight_decay": 0.0}]
    all_params = [p_ for g in groups for p_ in g["params"]]
    if world > 1:
        for p_ in cell_probe.own_parameters():
            dist.broadcast(p_.data, 0)

    def reduce_grads(total_loss):
        """Averages the gradients over ranks (one flat all-reduce) with a last element that is 1
        where a rank's loss was not finite: then every rank skips the step."""
        grads = [p_.grad if p_.grad is not None else torch.zeros_like(p_) for p_ in all_params]
        bad = torch.tensor([0.0 if bool(torch.isfinite(total_loss)) else 1.0], device=dev)
        flat = torch.cat([g.reshape(-1).float() for g in grads] + [bad])
        if world > 1:
            dist.all_reduce(flat)
            flat /= world
        off = 0
        for p_, g in zip(all_params, grads):
            n_ = g.numel()
            p_.grad = flat[off:off + n_].view_as(p_).to(p_.dtype)
            off += n_
        return float(flat[-1]) == 0.0

    try:
        opt = torch.optim.AdamW(groups, lr=args.lr, betas=(0.9, 0.98), eps=1e-8, fused=True)
    except (TypeError, RuntimeError):
        opt = torch.optim.AdamW(groups, lr=args.lr, betas=(0.9, 0.98), eps=1e-8)

    def lr_at(step, elapsed_s):
        """Warm-up over 200 steps, the peak for --const-frac of the time, then a cosine to 2% at the
        time limit (by time: the ramp makes later steps slower, so a step count would misjudge)."""
        if step < 200:
            return args.lr * (step + 1) / 200
        f = elapsed_s / (args.minutes * 60)
        if f <= args.const_frac:
            return args.lr
        g = min(1.0, (f - args.const_frac) / max(1e-6, 1 - args.const_frac))
        return args.lr * (0.02 + 0.98 * 0.5 * (1 + math.cos(math.pi * g)))

    log = {k: v for k, v in vars(args).items()}
    log.update(versions="torch %s transformers %s" % (torch.__version__, transformers.__version__),
               n_params=n_params, n_vision_params=n_vis, vocab_size=vocab_size, losses=[])
    model.train()
    torch.backends.cuda.matmul.allow_tf32 = True
    t0 = time.time()
    names = ["answer", "cell", "index", "label_attn", "answer_attn", "count_attn"]
    run = np.zeros(len(names))
    typ = np.zeros((len(TYPE_NAMES), 2))
    run_steps, step, items_seen, tokens_seen = 0, 0, 0, 0
    n_skipped = 0
    att_typ = np.zeros((len(TYPE_NAMES), 2))
    for batch in stream:
        el = time.time() - t0
        if world > 1:
            el_t = torch.tensor([el], device=dev, dtype=torch.float64)
            dist.broadcast(el_t, 0)
            el = float(el_t)
        if step >= args.steps or el > args.minutes * 60:
            break
        lr = lr_at(step, el)
        for g in opt.param_groups:
            g["lr"] = lr
        inputs, lab, types = to_device(torch, batch, dev, mean, std)
        if sup is not None:
            sup.enabled = True
        with torch.autocast("cuda", dtype=torch.bfloat16):
            logits = fwd(inputs).float()
            if sup is not None:
                la, aa, per_row, ca = sup.losses(inputs)
                sup.enabled = False
                if per_row.numel():
                    at_, w_ = inputs["att_type"].cpu().numpy(), inputs["att_w"].cpu().numpy()
                    pr = per_row.float().cpu().numpy()
                    for t_ in range(len(TYPE_NAMES)):
                        m_ = at_ == t_
                        att_typ[t_] += ((pr[m_] * w_[m_]).sum(), w_[m_].sum())
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
        if sup is not None:
            total = total + args.attn_loss * (la + aa) + args.count_loss * ca
            run[3] += float(la.detach())
            run[4] += float(aa.detach())
            run[5] += float(ca.detach())
        opt.zero_grad(set_to_none=True)
        total.backward()
        finite = reduce_grads(total.detach())
        gn = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        if finite and bool(torch.isfinite(gn)):
            opt.step()
        else:
            n_skipped += 1
            opt.zero_grad(set_to_none=True)
        ok = answer_correct(torch, logits.detach(), lab, inputs["bid"]).cpu().numpy()
        tv = types.numpy()
        for t_ in range(len(TYPE_NAMES)):
            typ[t_] += (ok[tv == t_].sum(), (tv == t_).sum())
        run[0] += float(loss.detach())
        items_seen += len(ok)
        tokens_seen += int(inputs["valid"].sum())
        run_steps += 1
        step += 1
        if (step % 100 == 0 or step == 1) and rank == 0:
            acc_t = typ[:, 0] / np.maximum(1, typ[:, 1])
            att_t = att_typ[:, 0] / np.maximum(1e-9, att_typ[:, 1])
            print("step %5d  %s  acc %.3f [%s]  attn/type [%s]  %dx%d  lr %.2e  skipped %d  %.0f s" % (
                step, " ".join("%s %.3f" % (n, v / run_steps) for n, v in zip(names, run)),
                typ[:, 0].sum() / max(1, typ[:, 1].sum()), " ".join("%.2f" % a for a in acc_t),
                " ".join("%.2f" % a for a in att_t), inputs["n_images"] // lab.shape[0], inputs["side"], lr,
                n_skipped, time.time() - t0), flush=True)
            log["losses"].append([step, time.time() - t0] + (run / run_steps).tolist() +
                                 [typ[:, 0].sum() / max(1, typ[:, 1].sum())] + acc_t.tolist() + att_t.tolist())
        if step % 100 == 0 or step == 1:
            run[:] = 0
            typ[:] = 0
            att_typ[:] = 0
            run_steps = 0
        if step % 1000 == 0 and rank == 0:   # a checkpoint, in case the lease ends early
            save_f16(model, hf_dir)
    if world > 1:
        dist.barrier()
        if rank != 0:
            dist.destroy_process_group()
            return
    log["loss_columns"] = ["step", "seconds"] + names + ["acc"] + ["acc_" + n for n in TYPE_NAMES] + \
        ["answer_attn_" + n for n in TYPE_NAMES]
    log.update(steps=step, world=world, skipped_steps=n_skipped, items_seen=items_seen * world,
               tokens_seen=tokens_seen * world, train_seconds=time.time() - t0,
               data="examples/tools/scene_long.c stream seed %d, batch b = items b*4096.. with curriculum()" % args.seed)
    save_f16(model, hf_dir)
    save_tokenizer_files(tok, hf_dir)
    with open(os.path.join(args.out, "train-log.json"), "w") as f:
        json.dump(log, f, indent=1)
    print("saved", hf_dir, flush=True)
    model.eval()
    fwd.want_hidden = False
    acc, n = heldout(torch, np, fwd, scenes, tok, dev, mean, std, args.eval_items, args.batch_tokens,
                     (pad_id, im_end_id, image_token_id))
    log["heldout_accuracy_transformers"] = acc
    log["heldout_items"] = n
    print("held-out accuracy (transformers, %d items, seed %d): %s" % (n, EVAL_SEED,
          " ".join("%s %.3f" % kv for kv in acc.items())), flush=True)
    log["total_seconds"] = time.time() - t_start
    with open(os.path.join(args.out, "train-log.json"), "w") as f:
        json.dump(log, f, indent=1)
    print("done in %.0f s total" % log["total_seconds"], flush=True)


if __name__ == "__main__":
    main()
