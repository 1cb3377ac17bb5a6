#!/usr/bin/env python3
"""train.py: trains ocellus' demo model, a tiny Qwen2-VL, on the synthetic scenes of examples/tools/scene.c.

Run from the repository root on a machine with torch + transformers + tokenizers + safetensors and a
GPU (the project's GPU machine: 14.4 minutes on one H200, the shipped model), after
`./configure && make ocellus`:
    python3 examples/demo/train.py --out /tmp/demo
(the defaults are the shipped model's recipe; --steps N, --seed S, --minutes M change it)
It writes /tmp/demo/hf (a Hugging Face checkpoint: config, safetensors, tokenizer, chat template) and
/tmp/demo/train-log.json (seed, data, step count, losses, held-out accuracy). Then
    ./ocellus convert /tmp/demo/hf -o examples/demo/ocellus-demo --type f16
    ./ocellus eval --items 500
gives the files committed under examples/ and their accuracy (examples/demo/TRAINING.md).

What is trained, and why so:
- Data: examples/tools/scene.c compiled alone into a shared object and called through ctypes, so training
  sees exactly the scenes, questions and answers `ocellus eval` asks (stream seed --seed, default
  1; `ocellus eval` uses seed 1000001 by default: items training never saw). Every step draws
  fresh items; nothing is repeated.
- Prompt: Qwen2-VL's chat template with "Picture N: " before image N (what Qwen2-VL renders with
  add_vision_id), written unconditionally into the saved chat template, so ocellus labels images
  for this model by default (src/model/model.c reads the template). The loss covers only the answer and
  its <|im_end|>.
- Tokenizer: a byte-level BPE with Qwen2's pre-tokenizer and special tokens, trained on the task's
  own text (questions, answers, the template), so the vocabulary stays a few hundred tokens.
- Model: Hugging Face's Qwen2VLForConditionalGeneration with a small config (below); the f16 GGUF
  pair stays under the 16 MB the repository allows.
- Training-only aids, dropped when saving (examples/demo/TRAINING.md says what each one did):
  captions ("Describe image k."), a language-model loss on the question's tokens, a probe that
  makes every image token name its cell's kind, colour, row, column and answer words (CellProbe),
  and one that makes it name its image (IndexProbe); a first phase of 1-image colour questions.
- Pixels: the scenes are 112x112, a multiple of 28, so Qwen2-VL's processor does not resize; the
  patches are cut here on the GPU in the processor's exact order (checked against
  Qwen2VLImageProcessor at start-up).
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
# Qwen2-VL's template with the image label always on (no add_vision_id switch): see the docstring.
CHAT_TEMPLATE = (
    "{% set image_count = namespace(value=0) %}{% for message in messages %}"
    "{% if loop.first and message['role'] != 'system' %}<|im_start|>system\nYou are a helpful assistant."
    "<|im_end|>\n{% endif %}<|im_start|>{{ message['role'] }}\n{% if message['content'] is string %}"
    "{{ message['content'] }}<|im_end|>\n{% else %}{% for content in message['content'] %}"
    "{% if content['type'] == 'image' or 'image' in content %}{% set image_count.value = image_count.value + 1 %}"
    "Picture {{ image_count.value }}: <|vision_start|><|image_pad|><|vision_end|>"
    "{% elif 'text' in content %}{{ content['text'] }}{% endif %}"
    "{% endfor %}<|im_end|>\n{% endif %}{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
SIDE_PX = 112
MAX_IMAGES = 8
TYPE_NAMES = ["color", "count", "position", "which_image", "compare"]


# ---- the scene generator (examples/tools/scene.h) ---------------------------------------------------------
class SceneItem(ctypes.Structure):
    _fields_ = [("n_images", ctypes.c_int32), ("width_px", ctypes.c_int32), ("height_px", ctypes.c_int32),
                ("type", ctypes.c_int32), ("question", ctypes.c_char * 160), ("answer", ctypes.c_char * 16)]


class SceneShape(ctypes.Structure):
    _fields_ = [(n, ctypes.c_int32) for n in ("kind", "color", "col", "row", "x_px", "y_px", "size_px")]


class SceneImage(ctypes.Structure):
    _fields_ = [("n_shapes", ctypes.c_int32), ("background", ctypes.c_int32), ("bg_rgb", ctypes.c_uint8 * 6),
                ("noise_seed", ctypes.c_uint64), ("shapes", SceneShape * 4)]


class SceneDesc(ctypes.Structure):
    _fields_ = [("n_images", ctypes.c_int32), ("side_px", ctypes.c_int32), ("grid", ctypes.c_int32),
                ("images", SceneImage * MAX_IMAGES), ("q", ctypes.c_int32 * 6)]


COLOR_NAMES = ["red", "green", "blue", "yellow", "purple", "orange", "white"]
KIND_NAMES = ["circle", "square", "triangle", "diamond"]


class Scenes:
    def __init__(self, so_path):
        self.lib = ctypes.CDLL(so_path)
        self.lib.oc_scene_make.argtypes = [ctypes.c_uint64, ctypes.c_uint64, ctypes.c_int32, ctypes.c_int32,
                                           ctypes.c_int32, ctypes.POINTER(SceneItem), ctypes.c_void_p]
        self.lib.oc_scene_make.restype = ctypes.c_int
        self.lib.oc_scene_describe.argtypes = [ctypes.c_uint64, ctypes.c_uint64, ctypes.c_int32, ctypes.c_int32,
                                               ctypes.c_int32, ctypes.POINTER(SceneDesc), ctypes.POINTER(SceneItem)]
        self.lib.oc_scene_describe.restype = ctypes.c_int
        self.buf = (ctypes.c_uint8 * (MAX_IMAGES * SIDE_PX * SIDE_PX * 3))()

    def item(self, seed, index, lo=1, hi=MAX_IMAGES):
        import numpy as np
        it = SceneItem()
        if self.lib.oc_scene_make(seed, index, lo, hi, SIDE_PX, ctypes.byref(it), self.buf) != 0:
            raise SystemExit("oc_scene_make failed for item %d" % index)
        n = it.n_images
        imgs = np.frombuffer(self.buf, dtype=np.uint8, count=n * SIDE_PX * SIDE_PX * 3)
        imgs = imgs.reshape(n, SIDE_PX, SIDE_PX, 3).copy()
        return imgs, it.question.decode(), it.answer.decode(), it.type

    def caption(self, seed, index, lo, hi, k):
        """Training-only dense supervision: image k's shapes in reading order, e.g.
        "red circle 1 3, blue square 4 2" (colour, kind, row, column of the 28-px cell)."""
        d, it = SceneDesc(), SceneItem()
        if self.lib.oc_scene_describe(seed, index, lo, hi, SIDE_PX, ctypes.byref(d), ctypes.byref(it)) != 0:
            raise SystemExit("oc_scene_describe failed for item %d" % index)
        im = d.images[k]
        shapes = sorted((im.shapes[j] for j in range(im.n_shapes)), key=lambda sh: (sh.row, sh.col))
        return ", ".join("%s %s %d %d" % (COLOR_NAMES[sh.color], KIND_NAMES[sh.kind], sh.row + 1, sh.col + 1)
                         for sh in shapes)


    def cells(self, seed, index, lo, hi):
        """Training-only labels of every 28-px cell of every image of an item, in the merged-token
        order (row-major): [n_images, 16] kind + 1 and colour + 1, 0 for an empty cell."""
        import numpy as np
        d, it = SceneDesc(), SceneItem()
        if self.lib.oc_scene_describe(seed, index, lo, hi, SIDE_PX, ctypes.byref(d), ctypes.byref(it)) != 0:
            raise SystemExit("oc_scene_describe failed for item %d" % index)
        g = SIDE_PX // 28
        lab = np.zeros((2, d.n_images, g * g), dtype=np.int64)
        for k in range(d.n_images):
            im = d.images[k]
            for j in range(im.n_shapes):
                sh = im.shapes[j]
                lab[:, k, sh.row * g + sh.col] = (sh.kind + 1, sh.color + 1)
        return lab


def build_scene_so(out_dir):
    so = os.path.join(out_dir, "scene.so")
    subprocess.run(["cc", "-O2", "-std=c11", "-shared", "-fPIC", "-Iexamples", "-o", so, "examples/tools/scene.c", "-lm"], check=True)
    return so


# ---- text ----------------------------------------------------------------------------------------
def prompt_text(question, n_images):
    """The chat prompt exactly as ocellus builds it for this model (src/model/prompt.c)."""
    t = "<|im_start|>system\n%s<|im_end|>\n<|im_start|>user\n" % SYSTEM
    for k in range(n_images):
        t += "Picture %d: <|vision_start|>%s<|vision_end|>" % (k + 1, "<|image_pad|>" * ((SIDE_PX // 28) ** 2))
    return t + question + "<|im_end|>\n<|im_start|>assistant\n"


def build_tokenizer(scenes, seed, vocab_size):
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
    corpus = [SYSTEM, "system\n", "user\n", "assistant\n"] + ["Picture %d: " % k for k in range(1, 9)]
    corpus += ["Describe image %d." % k for k in range(1, 9)]
    for i in range(500):
        corpus.append(scenes.caption(seed + 7919, i, 1, 1, 0))
    for i in range(4000):   # the task's own questions and answers: a separate stream of the generator
        _, q, a, _ = scenes.item(seed + 7919, i)
        corpus += [q, a]
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
           "processor_class": "Qwen2VLProcessor", "resample": 3, "rescale_factor": 0.00392156862745098,
           "temporal_patch_size": 2}
    with open(os.path.join(hf_dir, "preprocessor_config.json"), "w") as f:
        json.dump(pre, f, indent=2)


# ---- model ---------------------------------------------------------------------------------------
def make_model(tok, vocab_size):
    from transformers import Qwen2VLConfig, Qwen2VLForConditionalGeneration
    ids = dict(image_token_id=tok.token_to_id("<|image_pad|>"), video_token_id=tok.token_to_id("<|video_pad|>"),
               vision_start_token_id=tok.token_to_id("<|vision_start|>"),
               vision_end_token_id=tok.token_to_id("<|vision_end|>"))
    text = dict(vocab_size=vocab_size, hidden_size=256, intermediate_size=768, num_hidden_layers=6,
                num_attention_heads=4, num_key_value_heads=2, rms_norm_eps=1e-6, rope_theta=1000000.0,
                max_position_embeddings=4096, tie_word_embeddings=True, hidden_act="silu",
                bos_token_id=tok.token_to_id("<|endoftext|>"), eos_token_id=tok.token_to_id("<|im_end|>"),
                rope_scaling={"type": "mrope", "rope_type": "default", "mrope_section": [8, 12, 12]})
    vision = dict(depth=4, embed_dim=128, hidden_size=256, num_heads=4, mlp_ratio=4, patch_size=14,
                  spatial_merge_size=2, temporal_patch_size=2, in_channels=3, hidden_act="quick_gelu")
    cfg = Qwen2VLConfig(text_config=text, vision_config=vision, tie_word_embeddings=True, **ids)
    return Qwen2VLForConditionalGeneration(cfg)


def patchify(torch, imgs, mean, std):
    """uint8 [N, H, W, 3] on the GPU -> pixel values [N * gh * gw, 3 * 2 * 14 * 14] in
    Qwen2VLImageProcessor's order (rescale, normalize, repeat the frame twice, then
    reshape (t, tp, c, gh/m, m, p, gw/m, m, p) and transpose (0, 3, 6, 4, 7, 2, 1, 5, 8))."""
    n, h, w, _ = imgs.shape
    x = imgs.permute(0, 3, 1, 2).float() * (1.0 / 255.0)
    x = (x - mean.view(1, 3, 1, 1)) / std.view(1, 3, 1, 1)
    x = x.unsqueeze(1).expand(n, 2, 3, h, w)
    gh, gw = h // 14, w // 14
    x = x.reshape(n, 1, 2, 3, gh // 2, 2, 14, gw // 2, 2, 14)
    x = x.permute(0, 1, 4, 7, 5, 8, 3, 2, 6, 9)
    return x.reshape(n * gh * gw, 3 * 2 * 14 * 14).contiguous()


def check_patchify(torch, scenes, mean, std):
    import numpy as np
    from transformers import Qwen2VLImageProcessor
    imgs, _, _, _ = scenes.item(12345, 0, 2, 2)
    proc = Qwen2VLImageProcessor(do_resize=False, image_mean=CLIP_MEAN, image_std=CLIP_STD)
    try:
        ref = proc(images=[im for im in imgs], return_tensors="pt")["pixel_values"].float()
    except Exception as e:  # noqa: BLE001 -- the check is advisory when the processor's API moved
        print("note: could not run Qwen2VLImageProcessor for the patch check:", e)
        return
    ours = patchify(torch, torch.from_numpy(imgs), mean.cpu(), std.cpu())
    diff = float((ref - ours).abs().max())
    print("patchify vs Qwen2VLImageProcessor: max |diff| %.3g" % diff)
    if diff > 1e-5:
        raise SystemExit("patchify does not match the image processor")


# ---- batches -------------------------------------------------------------------------------------
def mrope_positions(ids, image_token_id, grid):
    """Qwen2-VL's M-RoPE position ids (get_rope_index) for one sequence of this task, whose images
    are all grid x grid merged tokens: text advances t = h = w by one; an image's tokens share
    t = start and take h = start + row, w = start + col; the text after it resumes at start + grid.
    Checked against transformers' get_rope_index at start-up."""
    import numpy as np
    pos = np.zeros((3, len(ids)), dtype=np.int64)
    st, i = 0, 0
    while i < len(ids):
        if ids[i] == image_token_id:
            for r in range(grid):
                for c in range(grid):
                    pos[:, i] = (st, st + r, st + c)
                    i += 1
            st += grid
        else:
            pos[:, i] = st
            st += 1
            i += 1
    return pos


def prompt_ids_positions(tok, question, n_images, image_token_id, cache=None):
    """The prompt's token ids and M-RoPE positions, and the text position that follows it. Both
    depend only on (question, n_images), and special tokens split the text, so a worker keeps
    them in `cache` (a few thousand distinct prompts) instead of re-encoding every item."""
    key = (question, n_images)
    if cache is not None and key in cache:
        return cache[key]
    ids = tok.encode(prompt_text(question, n_images), add_special_tokens=False).ids
    pos = mrope_positions(ids, image_token_id, SIDE_PX // 28)
    hit = (ids, pos, int(pos[0, -1]) + 1)   # the prompt ends with text: the next position is last + 1
    if cache is not None:
        cache[key] = hit
    return hit


def make_batch(scenes, tok, seed, first, n_items, pad_id, im_end_id, image_token_id, max_images=MAX_IMAGES,
               caption_share=0.0, cache=None, types_wanted=None):
    """Items [first, first + n_items) of stream seed (with types_wanted: the first n_items of those
    types from item first on): ids, labels (answer + <|im_end|> only),
    attention mask, M-RoPE positions, images, question types (-1 for a caption item), cell labels
    ([2, n_images_in_batch, 16]: kind + 1, colour + 1; Scenes.cells)."""
    import numpy as np
    seqs, labels, qlabels, poss, images, types, cells = [], [], [], [], [], [], []
    vision_end_id = image_token_id - 2   # <|vision_end|>: SPECIAL order puts it two before <|image_pad|>
    index = first - 1
    for i in range(n_items):
        index += 1
        imgs, q, a, ty = scenes.item(seed, index, 1, max_images)
        while types_wanted is not None and ty not in types_wanted:   # a curriculum of chosen types
            index += 1
            imgs, q, a, ty = scenes.item(seed, index, 1, max_images)
        cells.append(scenes.cells(seed, index, 1, max_images))
        if caption_share > 0 and (index * 2654435761 % 1000) < caption_share * 1000:
            k = index % len(imgs)
            q, a = "Describe image %d." % (k + 1), scenes.caption(seed, index, 1, max_images, k)
            ty = -1
        p, ppos, st = prompt_ids_positions(tok, q, len(imgs), image_token_id, cache)
        ans = tok.encode(a, add_special_tokens=False).ids + [im_end_id]
        seqs.append(p + ans)
        labels.append([-100] * len(p) + ans)
        qlabels.append(question_labels(p, vision_end_id, im_end_id) + [-100] * len(ans))
        apos = np.broadcast_to(st + np.arange(len(ans), dtype=np.int64), (3, len(ans)))
        poss.append(np.concatenate([ppos, apos], axis=1))
        images.append(imgs)
        types.append(ty)
    L = max(len(s) for s in seqs)
    ids = np.full((n_items, L), pad_id, dtype=np.int64)
    lab = np.full((n_items, L), -100, dtype=np.int64)
    qlab = np.full((n_items, L), -100, dtype=np.int64)
    mask = np.zeros((n_items, L), dtype=np.int64)
    pos = np.ones((3, n_items, L), dtype=np.int64)   # padding: 1, as get_rope_index writes
    for i, (s, l, ql, ps) in enumerate(zip(seqs, labels, qlabels, poss)):
        ids[i, :len(s)] = s
        lab[i, :len(l)] = l
        qlab[i, :len(ql)] = ql
        mask[i, :len(s)] = 1
        pos[:, i, :len(s)] = ps
    return (ids, lab, mask, pos, np.concatenate(images, axis=0), np.array(types), np.concatenate(cells, axis=1),
            qlab)


def question_labels(ids, vision_end_id, im_end_id):
    """Labels for the question's own tokens (between the last <|vision_end|> and the <|im_end|>
    closing the user turn), -100 elsewhere: a training-only language-model loss on the question.
    Its informative tokens are lookups the answers need too: after "What color is the circle in
    image", the index is the image that holds a circle; after "Which image has a red", the kind is
    one of the red shapes present. Dense supervision of retrieval at no extra forward cost."""
    lab = [-100] * len(ids)
    last = max(i for i, t in enumerate(ids) if t == vision_end_id)
    end = ids.index(im_end_id, last)
    for i in range(last + 1, end):
        lab[i] = ids[i]
    return lab


class BatchStream:
    """Batches made by worker processes (the generator and the tokenizer run on the CPU)."""

    def __init__(self, so_path, tok_json, seed, batch, pad_id, im_end_id, image_token_id, first_batch=0,
                 easy_batches=0, caption_share=0.0, easy_images=3, easy_types=None):
        import torch
        self.torch = torch
        outer = self

        class DS(torch.utils.data.IterableDataset):
            def __iter__(self):
                from tokenizers import Tokenizer
                info = torch.utils.data.get_worker_info()
                wid, nw = (info.id, info.num_workers) if info else (0, 1)
                scenes = Scenes(so_path)
                tok = Tokenizer.from_str(tok_json)
                cache = {}
                b = first_batch + wid
                while True:
                    if b < easy_batches and easy_types is not None:
                        # the chosen types only: stream seed + 500, 8 items per wanted item
                        yield make_batch(scenes, tok, seed + 500, b * batch * 8, batch, pad_id, im_end_id,
                                         image_token_id, easy_images, caption_share, cache, easy_types)
                    else:
                        hi = easy_images if b < easy_batches else MAX_IMAGES
                        yield make_batch(scenes, tok, seed, b * batch, batch, pad_id, im_end_id, image_token_id, hi,
                                         caption_share, cache)
                    b += nw
        self.loader = torch.utils.data.DataLoader(DS(), batch_size=None, num_workers=14, prefetch_factor=4,
                                                  persistent_workers=True)

    def __iter__(self):
        return iter(self.loader)


def to_device(torch, batch, dev, mean, std):
    ids, lab, mask, pos, imgs, types, cells, qlab = batch
    t = lambda a: torch.as_tensor(a).to(dev, non_blocking=True)
    pv = patchify(torch, t(imgs), mean, std)
    return (dict(ids=t(ids), mask=t(mask), pos=t(pos), pv=pv, n_images=imgs.shape[0], cells=t(cells),
                 qlab=t(qlab)), t(lab), torch.as_tensor(types))


def rotate_half(torch, x):
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


class Forward:
    """The model's forward pass for this task's batches. transformers' own path runs the vision
    tower's attention image by image (a Python loop of ~600 small calls per batch per block) and
    computes M-RoPE positions in Python loops; here every image has the same 8x8 patch grid, so
    the vision attention is one batched call and the positions come from the data workers. The
    fast path is the same arithmetic: start-up compares its logits with transformers' forward and
    falls back to it if they differ."""

    def __init__(self, torch, model, image_token_id):
        self.torch, self.model, self.image_token_id = torch, model, image_token_id
        self.fast = False
        self.last_feats = None   # the merged image tokens of the last fast forward (the cell loss reads them)
        self.want_hidden = False  # keep the decoder's hidden states (the image-index probe reads them)
        self.last_hidden = None
        vc = model.config.vision_config
        self.n_heads = vc.num_heads
        head_dim = vc.embed_dim // vc.num_heads
        # Qwen2-VL's vision rotary (VisionRotaryEmbedding(head_dim / 2), theta 10000): patch (h, w)
        # in the processor's merged order gets [h * inv_freq, w * inv_freq], then cat(x, x).
        g, m = SIDE_PX // 14, 2
        dev = next(model.parameters()).device
        dim = head_dim // 2
        inv_freq = 1.0 / (10000.0 ** (torch.arange(0, dim, 2, dtype=torch.float, device=dev) / dim))
        hpos = torch.arange(g, device=dev).unsqueeze(1).expand(-1, g)
        wpos = torch.arange(g, device=dev).unsqueeze(0).expand(g, -1)
        order = lambda t: t.reshape(g // m, m, g // m, m).permute(0, 2, 1, 3).flatten()
        freqs = torch.outer(torch.arange(g, device=dev, dtype=torch.float), inv_freq)
        rpe = torch.cat((freqs[order(hpos)], freqs[order(wpos)]), dim=-1)
        emb = torch.cat((rpe, rpe), dim=-1)
        self.cos, self.sin = emb.cos()[:, None, :], emb.sin()[:, None, :]

    def vision(self, pv, n_images):
        torch = self.torch
        visual = self.model.model.visual
        x = visual.patch_embed(pv)
        P = x.shape[0] // n_images
        for blk in visual.blocks:
            a = blk.attn
            h = blk.norm1(x)
            q, k, v = a.qkv(h).reshape(n_images, P, 3, self.n_heads, -1).unbind(2)
            dt = q.dtype
            qf, kf = q.float(), k.float()
            q = (qf * self.cos + rotate_half(torch, qf) * self.sin).to(dt)
            k = (kf * self.cos + rotate_half(torch, kf) * self.sin).to(dt)
            o = torch.nn.functional.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2),
                                                                 v.transpose(1, 2))
            x = x + a.proj(o.transpose(1, 2).reshape(n_images * P, -1))
            x = x + blk.mlp(blk.norm2(x))
        return visual.merger(x)

    def fast_logits(self, inp):
        emb = self.model.get_input_embeddings()(inp["ids"])
        feats = self.vision(inp["pv"], inp["n_images"])
        self.last_feats = feats
        feats = feats.to(emb.dtype)
        sel = (inp["ids"] == self.image_token_id).unsqueeze(-1)
        emb = emb.masked_scatter(sel, feats)
        out = self.model(inputs_embeds=emb, attention_mask=inp["mask"], position_ids=inp["pos"],
                         output_hidden_states=self.want_hidden)
        self.last_hidden = out.hidden_states if self.want_hidden else None
        return out.logits

    def hf_logits(self, inp):
        torch = self.torch
        g = SIDE_PX // 14
        grid = torch.tensor([[1, g, g]] * inp["n_images"], device=inp["ids"].device)
        return self.model(input_ids=inp["ids"], attention_mask=inp["mask"], pixel_values=inp["pv"],
                          image_grid_thw=grid, mm_token_type_ids=(inp["ids"] == self.image_token_id).long()).logits

    def check(self, inp):
        """transformers computes the positions and runs its own vision tower; equal logits prove
        both our positions and our batched vision."""
        torch = self.torch
        try:
            with torch.no_grad():
                a = self.hf_logits(inp).float()
                b = self.fast_logits(inp).float()
            m = inp["mask"].bool()
            rel = float((a - b)[m].abs().max() / a[m].abs().max())
        except Exception as e:  # noqa: BLE001
            print("fast path check failed to run:", repr(e))
            return
        print("fast path vs transformers: logits max rel diff %.3g" % rel)
        self.fast = rel < 1e-3

    def __call__(self, inp):
        return self.fast_logits(inp) if self.fast else self.hf_logits(inp)


class CellProbe:
    """Training-only probe of the merged image tokens (one per 28-px cell), dropped when saving:
    each token must say its cell's shape kind (or empty), colour (or empty), row and column.
    With tie: the kind and colour logits are the token's dot products with the decoder's own word
    embeddings of " circle", " red", ... (tied with its output layer), so an image token of a red
    circle points where the question's words "red" and "circle" point, and the decoder can find it
    by matching; runs 3-4 had an untied probe: every token encoded its kind and colour linearly
    (probe loss ~0), yet the decoder never learnt to select shapes by kind (TRAINING.md). Row and
    column: text positions advance M-RoPE's t, but an image's tokens share t and differ only in h
    and w, which get its lowest frequencies (theta 1e6: under 0.03 rad per cell), so where a cell
    lies must be in the token itself."""

    def __init__(self, torch, model, tok, tie):
        self.torch, self.model, self.tie = torch, model, tie
        width = model.config.vision_config.hidden_size
        word = lambda w: tok.encode(" " + w, add_special_tokens=False).ids
        answer = lambda w: tok.encode(w, add_special_tokens=False).ids
        self.kind_ids = [word(k) for k in KIND_NAMES]
        self.color_ids = [word(c) for c in COLOR_NAMES]
        # the answers' own tokens (no leading space: an answer starts the assistant's turn)
        self.color_answer_ids = [answer(c) for c in COLOR_NAMES]
        self.side_ids = [answer(w) for w in ("left", "right", "top", "bottom")]
        if tie and any(len(i) != 1 for i in self.kind_ids + self.color_ids + self.color_answer_ids + self.side_ids):
            print("note: a kind, colour or side word is not one token; the cell probe is not tied")
            self.tie = False
        one = lambda ids: torch.tensor([i[0] for i in ids])
        self.kind_ids, self.color_ids = one(self.kind_ids), one(self.color_ids)
        self.color_answer_ids, self.side_ids = one(self.color_answer_ids), one(self.side_ids)
        # untied: 5 + 8 classes; tied: an "empty" logit for each, and a learnt scale
        self.head = torch.nn.Linear(width, 2 if self.tie else 5 + 8)
        self.pos = torch.nn.Linear(width, 4 + 4)
        self.scale = 6.0

    def to(self, dev):
        self.head, self.pos = self.head.to(dev), self.pos.to(dev)
        self.kind_ids, self.color_ids = self.kind_ids.to(dev), self.color_ids.to(dev)
        self.color_answer_ids, self.side_ids = self.color_answer_ids.to(dev), self.side_ids.to(dev)
        return self

    def own_parameters(self):
        return list(self.head.parameters()) + list(self.pos.parameters())

    def loss(self, feats, cells):
        torch = self.torch
        F = torch.nn.functional
        cl = cells.reshape(2, -1)
        n = feats.shape[0]
        if self.tie:
            # cosines at a fixed scale: a learnt scale let the probe read a kind direction that was
            # a small part of the token (diagnostic runs: 1-image colour questions stayed at chance
            # among the image's shapes, 0.59, for 600 steps while captions named the kinds right);
            # a fixed scale makes the kind as salient in the token as its colour
            f = torch.nn.functional.normalize(feats, dim=-1)
            E = torch.nn.functional.normalize(self.model.get_input_embeddings().weight.float(), dim=-1)
            e = self.head(feats * torch.rsqrt(feats.pow(2).mean(-1, keepdim=True) + 1e-6))
            zk = torch.cat([e[:, :1], self.scale * f @ E[self.kind_ids].t()], dim=1)
            zc = torch.cat([e[:, 1:], self.scale * f @ E[self.color_ids].t()], dim=1)
        else:
            z = self.head(feats)
            zk, zc = z[:, :5], z[:, 5:]
        cell = torch.arange(n, device=feats.device) % 16
        row, col = cell // 4, cell % 4
        zp = self.pos(feats)
        loss = (F.cross_entropy(zk, cl[0]) + F.cross_entropy(zc, cl[1]) +
                0.5 * (F.cross_entropy(zp[:, :4], row) + F.cross_entropy(zp[:, 4:], col)))
        if self.tie:
            # the tokens that answer "What color ...?" and "Is the ... on the left or the right?" /
            # "at the top or the bottom?": a shape's token points at its own answers, as the image
            # index does for "Which image ...?" (IndexProbe)
            shape = cl[1] > 0
            za = self.scale * f[shape] @ E[self.color_answer_ids].t()
            zs = self.scale * f @ E[self.side_ids].t()
            loss = loss + F.cross_entropy(za, cl[1][shape] - 1) + 0.5 * (
                F.cross_entropy(zs[:, :2], (col >= 2).long()) + F.cross_entropy(zs[:, 2:], (row >= 2).long()))
        return loss


class IndexProbe:
    """Training-only probe of the decoder's hidden state at every image token after layer
    `layer`: which image (1-8) the token belongs to, scored against the decoder's own word
    embeddings of the digits "1".."8" (the tokens that answer "Which image ...?"). The vision
    tower sees each image alone, so an image token can learn its index only inside the decoder,
    from the "Picture N: " label before it; a token that knows it makes "in image 2" a match on
    content, and "Which image has a red circle?" a copy of the matching token's index."""

    def __init__(self, torch, model, tok, layer, image_token_id):
        self.torch, self.model, self.layer = torch, model, layer
        self.image_token_id, self.vision_start_id = image_token_id, image_token_id - 3
        ids = [tok.encode(str(k), add_special_tokens=False).ids for k in range(1, MAX_IMAGES + 1)]
        if any(len(i) != 1 for i in ids):
            raise SystemExit("a digit is not one token")
        self.digit_ids = torch.tensor([i[0] for i in ids])
        self.scale = torch.nn.Parameter(torch.tensor(5.0))

    def to(self, dev):
        self.digit_ids = self.digit_ids.to(dev)
        self.scale = self.torch.nn.Parameter(self.scale.detach().to(dev))
        return self

    def loss(self, hidden, ids):
        torch = self.torch
        h = hidden[self.layer].float()
        index = torch.cumsum((ids == self.vision_start_id).long(), dim=1) - 1
        sel = ids == self.image_token_id
        f = h[sel]
        f = f * torch.rsqrt(f.pow(2).mean(-1, keepdim=True) + 1e-6)
        E = self.model.get_input_embeddings().weight.float()
        z = self.scale * f @ E[self.digit_ids].t()
        return torch.nn.functional.cross_entropy(z, index[sel])


def answer_loss(torch, logits, lab, per_item):
    """Cross-entropy of the answer tokens. per_item: each item's mean over its own answer tokens,
    then the mean over items. Per token (the plain mean over every answer token of the batch), a
    caption of ~20 tokens outweighs a one-word answer ~10 to 1: with 40% captions the questions got
    ~14% of the gradient, and runs 1-2 learnt them slowly while the captions' loss went down."""
    tgt = lab[:, 1:]
    ce = torch.nn.functional.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]), tgt.reshape(-1),
                                           ignore_index=-100, reduction="none").view(tgt.shape)
    m = (tgt != -100).float()
    if not per_item:
        return (ce * m).sum() / m.sum().clamp(min=1)
    return ((ce * m).sum(1) / m.sum(1).clamp(min=1)).mean()


def answer_correct(torch, logits, lab):
    """Per item: every answer token (and <|im_end|>) is the argmax given the right prefix, i.e.
    greedy decoding would produce exactly the answer."""
    pred = logits[:, :-1].argmax(-1)
    tgt = lab[:, 1:]
    ok = (pred == tgt) | (tgt == -100)
    return ok.all(dim=1)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--steps", type=int, default=10000, help="cosine schedule length (upper bound with --minutes)")
    ap.add_argument("--minutes", type=float, default=0, help="if > 0: fit the step count to this much "
                    "training time, measured over steps 10-30 (the count used is logged)")
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--first-batch", type=int, default=0, help="first batch of the stream (to resume)")
    ap.add_argument("--resume", help="a hf directory written by an earlier run: continue from its weights "
                    "and tokenizer")
    ap.add_argument("--eval-items", type=int, default=2048)
    ap.add_argument("--caption-share", type=float, default=0.3, help="share of training items whose "
                    "question is replaced by 'Describe image k.' with the image's shapes as the answer: dense "
                    "supervision that teaches the vision tower to see before the questions need it")
    ap.add_argument("--loss", choices=["item", "token"], default="item", help="average the answer loss per "
                    "item (each question counts as much as a caption) or over all answer tokens (runs 1-2)")
    ap.add_argument("--cell-loss", type=float, default=1.0, help="weight of a training-only loss on the "
                    "merged image tokens: a linear probe (dropped when saving) must read each 28-px cell's shape "
                    "kind and colour from its token; without it the vision tower of runs 1-3 confused the kinds")
    ap.add_argument("--question-loss", type=float, default=0.3, help="weight of a training-only language-model "
                    "loss on the question's own tokens (question_labels)")
    ap.add_argument("--tie-probe", type=int, default=1, help="1: the cell probe's kind and colour logits use the "
                    "decoder's word embeddings (CellProbe)")
    ap.add_argument("--index-loss", type=float, default=1.0, help="weight of a training-only probe: each image "
                    "token's decoder state after --index-layer must name its image (IndexProbe)")
    ap.add_argument("--index-layer", type=int, default=2)
    ap.add_argument("--easy-types", default="color", help="comma-separated question types of the easy batches "
                    "(e.g. color: a shape selected by its kind alone, which the mixed curriculum never taught); "
                    "empty: all")
    ap.add_argument("--easy-images", type=int, default=1, help="most images per item in the easy batches")
    ap.add_argument("--easy-batches", type=int, default=800, help="a curriculum: the first batches "
                    "have 1-3 images, so shapes and colours are learnt before long multi-image items")
    args = ap.parse_args()
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    import numpy as np
    import torch
    import transformers
    from tokenizers import Tokenizer
    t_start = time.time()
    os.makedirs(args.out, exist_ok=True)
    hf_dir = os.path.join(args.out, "hf")
    os.makedirs(hf_dir, exist_ok=True)
    so = build_scene_so(args.out)
    scenes = Scenes(so)
    torch.manual_seed(args.seed)
    if args.resume:
        tok = Tokenizer.from_file(os.path.join(args.resume, "tokenizer.json"))
    else:
        tok = build_tokenizer(scenes, args.seed, 400)
    n_tok = tok.get_vocab_size(with_added_tokens=True)
    vocab_size = (n_tok + 63) // 64 * 64
    print("tokenizer: %d tokens, vocab_size %d" % (n_tok, vocab_size))
    save_tokenizer_files(tok, hf_dir)
    dev = torch.device("cuda")
    mean = torch.tensor(CLIP_MEAN, device=dev)
    std = torch.tensor(CLIP_STD, device=dev)
    check_patchify(torch, scenes, mean, std)
    if args.resume:
        from transformers import Qwen2VLForConditionalGeneration
        try:
            model = Qwen2VLForConditionalGeneration.from_pretrained(args.resume, dtype=torch.float32)
        except TypeError:   # transformers 4 names it torch_dtype
            model = Qwen2VLForConditionalGeneration.from_pretrained(args.resume, torch_dtype=torch.float32)
        model = model.float().to(dev)
    else:
        model = make_model(tok, vocab_size).to(dev)
    n_params = sum(p.numel() for p in model.parameters())
    print("parameters: %d (%.1f MB in f16)" % (n_params, n_params * 2 / 1e6))
    pad_id, im_end_id = tok.token_to_id("<|endoftext|>"), tok.token_to_id("<|im_end|>")
    image_token_id = tok.token_to_id("<|image_pad|>")
    if tok.token_to_id("<|vision_end|>") != image_token_id - 2:
        raise SystemExit("make_batch expects <|vision_end|> two ids before <|image_pad|>")
    stream = BatchStream(so, tok.to_str(), args.seed, args.batch, pad_id, im_end_id, image_token_id,
                         args.first_batch, args.easy_batches, args.caption_share, args.easy_images,
                         [TYPE_NAMES.index(t) for t in args.easy_types.split(",")] if args.easy_types else None)
    fwd = Forward(torch, model, image_token_id)
    model.eval()
    fwd.check(to_device(torch, make_batch(scenes, tok, 999, 0, 8, pad_id, im_end_id, image_token_id),
                        dev, mean, std)[0])
    print("forward path:", "batched vision (fast)" if fwd.fast else "transformers'")
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.dim() < 2]
    cell_probe = CellProbe(torch, model, tok, args.tie_probe).to(dev)
    index_probe = IndexProbe(torch, model, tok, args.index_layer, image_token_id).to(dev)
    fwd.want_hidden = args.index_loss > 0
    groups = [{"params": decay, "weight_decay": 0.05}, {"params": no_decay, "weight_decay": 0.0},
              {"params": list(cell_probe.own_parameters()) + [index_probe.scale], "weight_decay": 0.0}]
    try:   # one fused kernel for the update where this torch has it
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

    log = {"seed": args.seed, "batch": args.batch, "lr": args.lr, "resume": args.resume,
           "easy_batches": args.easy_batches, "caption_share": args.caption_share,
           "first_batch": args.first_batch, "loss": args.loss, "cell_loss": args.cell_loss,
           "question_loss": args.question_loss, "tie_probe": args.tie_probe, "index_loss": args.index_loss,
           "index_layer": args.index_layer, "easy_types": args.easy_types, "easy_images": args.easy_images,
           "versions": "torch %s transformers %s" % (torch.__version__, transformers.__version__),
           "n_params": n_params, "vocab_size": vocab_size, "losses": []}
    model.train()
    torch.backends.cuda.matmul.allow_tf32 = True
    t0 = time.time()
    run_loss, run_cell, run_index, run_steps = 0.0, 0.0, 0.0, 0
    run_ok, run_n = np.zeros(2), np.zeros(2)   # [questions, captions]
    step = 0
    for batch in stream:
        if step >= sched["steps"] or (args.minutes > 0 and time.time() - t0 > args.minutes * 60):
            break   # the step count, or the time budget if the fit above was too generous
        if step == 10:
            t10 = time.time()
        if step == 100:
            t100 = time.time()
        # Fit the schedule to the time left: first from steps 10-30, again from steps 100-200 and
        # 100-1000 (the first steps are slower while the data workers and kernels warm up: run 3
        # measured 0.142 s/step over 100-200, then ran at 0.094 s and stopped 2.6 minutes early).
        if args.minutes > 0 and step in (30, 200, 1000):
            t_from, n = (t10, 20) if step == 30 else (t100, step - 100)
            per_step = (time.time() - t_from) / n
            left = args.minutes * 60 - (time.time() - t0)
            sched["steps"] = max(step + 10, min(args.steps, step + int(left / per_step)))
            print("%.3f s/step at step %d: %d steps fit in %.1f minutes" %
                  (per_step, step, sched["steps"], args.minutes), flush=True)
        for g in opt.param_groups:
            g["lr"] = lr_at(step)
        inputs, lab, types = to_device(torch, batch, dev, mean, std)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            logits = fwd(inputs).float()
        loss = answer_loss(torch, logits, lab, args.loss == "item")
        total = loss
        if args.question_loss > 0:
            total = total + args.question_loss * answer_loss(torch, logits, inputs["qlab"], True)
        if args.cell_loss > 0 and fwd.fast:
            cell = cell_probe.loss(fwd.last_feats.float(), inputs["cells"])
            total = total + args.cell_loss * cell
            run_cell += float(cell.detach())
        if args.index_loss > 0 and fwd.fast:
            index = index_probe.loss(fwd.last_hidden, inputs["ids"])
            total = total + args.index_loss * index
            run_index += float(index.detach())
        opt.zero_grad(set_to_none=True)
        total.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        run_loss += float(loss.detach())
        ok = answer_correct(torch, logits.detach(), lab).cpu().numpy()
        cap = types.numpy() < 0
        run_ok += (ok[~cap].sum(), ok[cap].sum())
        run_n += ((~cap).sum(), cap.sum())
        run_steps += 1
        step += 1
        if step % 100 == 0 or step == 1:
            el = time.time() - t0
            acc = run_ok / np.maximum(run_n, 1)
            print("step %5d  loss %.4f  cell loss %.4f  index loss %.4f  question acc %.3f  caption acc %.3f  "
                  "lr %.2e  %.0f s" % (step, run_loss / run_steps, run_cell / run_steps, run_index / run_steps,
                                       acc[0], acc[1], lr_at(step - 1), el), flush=True)
            log["losses"].append([step, run_loss / run_steps, float(acc[0]), float(acc[1]), run_cell / run_steps,
                                  run_index / run_steps])
            run_loss, run_cell, run_index, run_steps = 0.0, 0.0, 0.0, 0
            run_ok[:], run_n[:] = 0, 0
    log["steps"] = step
    easy = ("%s questions of 1-%d images from stream seed %d (items 8 b batch on)" %
            (args.easy_types, args.easy_images, args.seed + 500) if args.easy_types else
            "1-%d images" % args.easy_images)
    log["data"] = ("examples/tools/scene.c stream seed %d, batches [%d, %d) of %d items; batches b below %d: %s; then 1-8 "
                   "images, of %dx%d" % (args.seed, args.first_batch, args.first_batch + step, args.batch,
                                         args.easy_batches, easy, SIDE_PX, SIDE_PX))
    log["train_seconds"] = time.time() - t0
    # Held-out check in transformers itself (stream seed 1000001, as `ocellus eval` defaults to).
    model.eval()
    per_type = np.zeros((len(TYPE_NAMES), 2))
    with torch.no_grad():
        for b in range(args.eval_items // args.batch):
            batch = make_batch(scenes, tok, 1000001, b * args.batch, args.batch, pad_id, im_end_id,
                               image_token_id)
            inputs, lab, types = to_device(torch, batch, dev, mean, std)
            with torch.autocast("cuda", dtype=torch.bfloat16):
                logits = fwd(inputs).float()
            ok = answer_correct(torch, logits, lab).cpu().numpy()
            for t, o in zip(types.numpy(), ok):
                per_type[t] += (o, 1)
    acc = {TYPE_NAMES[t]: per_type[t, 0] / max(1, per_type[t, 1]) for t in range(len(TYPE_NAMES))}
    acc["overall"] = per_type[:, 0].sum() / per_type[:, 1].sum()
    log["heldout_accuracy_transformers"] = acc
    print("held-out accuracy (transformers, %d items): %s" % (int(per_type[:, 1].sum()),
          " ".join("%s %.3f" % kv for kv in acc.items())))
    # f16 is what the GGUF holds anyway; it also keeps the checkpoint small enough to carry.
    model.half().save_pretrained(hf_dir)
    save_tokenizer_files(tok, hf_dir)
    log["total_seconds"] = time.time() - t_start
    with open(os.path.join(args.out, "train-log.json"), "w") as f:
        json.dump(log, f, indent=1)
    print("saved", hf_dir, "in %.0f s total" % log["total_seconds"])


if __name__ == "__main__":
    main()
