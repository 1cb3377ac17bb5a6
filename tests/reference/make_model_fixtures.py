#!/usr/bin/env python3
"""make_model_fixtures.py OUT_DIR: tiny random Qwen2-VL and Qwen2.5-VL models and transformers'
outputs on a two-image chat prompt, for the parity tests (tests/test_model.c, tests/test_vision.c,
tests/test_convert.c). Commit OUT_DIR as tests/data/models/.

Run where torch + transformers + tokenizers + Pillow + numpy + safetensors are installed (the GPU
machine; nothing is downloaded). Everything is deterministic (fixed seeds).

What it writes (sizes chosen so that the whole folder stays well under 10 MB):
  images/image_a.ppm (224x168, no resize needed), images/image_b.ppm (130x90, resized to 140x84)
  <model>/hf/       a Hugging Face checkpoint: config.json, safetensors, tokenizer.json,
                    tokenizer_config.json, preprocessor_config.json, chat_template.json.
                    qwen2vl: one model.safetensors with the Hub's tensor names (model.layers.*,
                    visual.*, tied embeddings: no lm_head.weight), weights F32.
                    qwen25vl: transformers' own save_pretrained layout (its current names),
                    sharded with model.safetensors.index.json, weights BF16.
                    The tokenizer is a small byte-level BPE (trained here) with Qwen2's
                    pre-tokenizer and Qwen2's special tokens, so the vocabulary stays small.
  <model>/text.gguf, <model>/mmproj.gguf
                    GGUF files written here, independently of ocellus, exactly as
                    docs/formats.md §2 says llama.cpp's converter writes them (2-D weights F16, 1-D F32).
  qwen2vl/mmproj-legacy.gguf   the legacy "qwen2_vl_surgery" quirks (docs/formats.md §2b): ffn_up and
                    ffn_down swapped, a dummy v.position_embd.weight, feed_forward_length 0.
  <model>/reference.safetensors   transformers' results (float32 model, eager attention):
      input_ids I32 [n], position_ids I32 [3, n], image_grid_thw I32 [2, 3],
      pixel_values.{0,1} F32 [patches, 1176], image_embeds.{0,1} F32 [patches/4, hidden],
      vision.patch_embed.0 F32 and vision.block.0.{L} F32 [patches_0, vision_hidden]
          (image 0 alone; for Qwen2.5-VL the rows are in HF's window order),
      text.layer.{L} F32 [n, hidden] (output of decoder layer L), text.embeds F32 [n, hidden]
          (input embeddings after the image features are placed), logits F32 [n, vocab],
      generated I32 [8] (greedy, 8 new tokens, no stop token).
  Metadata of reference.safetensors: system, question, versions.

Weights are drawn at scales that keep activations O(1) (so logits are well separated and a top-1
comparison means something), rounded to F16 (qwen2vl) or BF16 (qwen25vl) and with magnitudes below
2^-14 flushed to 0, so every weight is exactly representable in F16.
"""
import json
import os
import struct
import sys

SYSTEM = "You are a helpful assistant."
QUESTION = "Which image has more red shapes? Answer with 1 or 2."
SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|object_ref_start|>", "<|object_ref_end|>",
           "<|box_start|>", "<|box_end|>", "<|quad_start|>", "<|quad_end|>", "<|vision_start|>",
           "<|vision_end|>", "<|vision_pad|>", "<|image_pad|>", "<|video_pad|>"]
QWEN2_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                 r"|\s*[\r\n]+|\s+(?!\S)|\s+")
CLIP_MEAN = [0.48145466, 0.4578275, 0.40821073]
CLIP_STD = [0.26862954, 0.26130258, 0.27577711]
CHAT_TEMPLATE = (
    "{% set image_count = namespace(value=0) %}{% for message in messages %}"
    "{% if loop.first and message['role'] != 'system' %}<|im_start|>system\nYou are a helpful assistant."
    "<|im_end|>\n{% endif %}<|im_start|>{{ message['role'] }}\n{% if message['content'] is string %}"
    "{{ message['content'] }}<|im_end|>\n{% else %}{% for content in message['content'] %}"
    "{% if content['type'] == 'image' or 'image' in content %}{% set image_count.value = image_count.value + 1 %}"
    "<|vision_start|><|image_pad|><|vision_end|>{% elif 'text' in content %}{{ content['text'] }}{% endif %}"
    "{% endfor %}<|im_end|>\n{% endif %}{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
CORPUS = [
    SYSTEM, QUESTION, "Describe this image.", "What is in the picture? A red square and a blue circle.",
    "The robot sees two images: a kitchen and a street. Which one is brighter?",
    "system user assistant", "Answer with one word.", "There are 3 cars, 12 people and 1 dog.",
    "The quick brown fox jumps over the lazy dog. Red, green, blue, yellow shapes!",
    "Is the door open or closed? It's open; they're leaving, we've seen it, I'm sure, you'll see.",
    "Numbers: 0 1 2 3 4 5 6 7 8 9 10 100 2024.\n\nNew lines\tand tabs.",
]
N_GENERATE = 8
GGUF_U32, GGUF_I32, GGUF_F32, GGUF_BOOL, GGUF_STRING, GGUF_ARRAY = 4, 5, 6, 7, 8, 9
GGML_F32, GGML_F16 = 0, 1


def die(msg):
    sys.stderr.write("make_model_fixtures: " + msg + "\n")
    sys.exit(1)


# ---- GGUF writer (docs/formats.md §1) ------------------------------------------------------------------
class Gguf:
    def __init__(self):
        self.kv = []        # (key, type, payload bytes)
        self.tensors = []   # (name, ne list, ggml type, bytes)

    @staticmethod
    def _s(s):
        b = s.encode("utf-8")
        return struct.pack("<Q", len(b)) + b

    def u32(self, k, v): self.kv.append((k, GGUF_U32, struct.pack("<I", v)))
    def f32(self, k, v): self.kv.append((k, GGUF_F32, struct.pack("<f", v)))
    def boolean(self, k, v): self.kv.append((k, GGUF_BOOL, struct.pack("<b", 1 if v else 0)))
    def string(self, k, v): self.kv.append((k, GGUF_STRING, self._s(v)))

    def arr(self, k, elem_type, values):
        body = struct.pack("<IQ", elem_type, len(values))
        if elem_type == GGUF_STRING:
            body += b"".join(self._s(v) for v in values)
        elif elem_type == GGUF_I32:
            body += struct.pack("<%di" % len(values), *values)
        elif elem_type == GGUF_F32:
            body += struct.pack("<%df" % len(values), *values)
        else:
            die("arr type")
        self.kv.append((k, GGUF_ARRAY, body))

    def tensor(self, name, t, ggml_type):
        """t: a torch tensor in PyTorch shape; stored with ne = reversed shape, bytes as-is."""
        import torch
        dt = torch.float16 if ggml_type == GGML_F16 else torch.float32
        a = t.detach().to(dt).contiguous().cpu().numpy()
        if ggml_type == GGML_F16:
            back = a.astype("float32")
            src = t.detach().float().cpu().numpy()
            if not (back == src).all():
                die("tensor %s is not exactly representable in f16" % name)
        self.tensors.append((name, list(reversed(a.shape)), ggml_type, a.tobytes()))

    def write(self, path):
        align = 32
        out = bytearray(b"GGUF")
        out += struct.pack("<IQQ", 3, len(self.tensors), len(self.kv))
        for k, ty, payload in self.kv:
            out += self._s(k) + struct.pack("<I", ty) + payload
        offset = 0
        offsets = []
        for name, ne, ty, data in self.tensors:
            offsets.append(offset)
            out += self._s(name) + struct.pack("<I", len(ne)) + struct.pack("<%dq" % len(ne), *ne)
            out += struct.pack("<IQ", ty, offset)
            offset += (len(data) + align - 1) // align * align
        out += b"\0" * ((-len(out)) % align)
        for (name, ne, ty, data), off in zip(self.tensors, offsets):
            out += data + b"\0" * ((-len(data)) % align)
        with open(path, "wb") as f:
            f.write(out)


# ---- inputs --------------------------------------------------------------------------------------
def synthetic_image(np, w, h, seed):
    """Smooth gradients plus a few filled rectangles and circles: structure that resampling changes."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:h, 0:w].astype(np.float64)
    img = np.stack([255 * x / w, 255 * y / h, 128 + 100 * np.sin((x + y) / 9.0)], axis=-1)
    for _ in range(5):
        cx, cy, r = rng.integers(0, w), rng.integers(0, h), rng.integers(6, 30)
        color = rng.integers(0, 256, size=3)
        if rng.integers(0, 2):
            m = (x - cx) ** 2 + (y - cy) ** 2 < r * r
        else:
            m = (abs(x - cx) < r) & (abs(y - cy) < r * 0.6)
        img[m] = color
    img += rng.normal(0, 6, size=img.shape)
    return np.clip(np.rint(img), 0, 255).astype(np.uint8)


def write_ppm(path, arr):
    h, w, _ = arr.shape
    with open(path, "wb") as f:
        f.write(b"P6\n%d %d\n255\n" % (w, h))
        f.write(arr.tobytes())


def build_tokenizer():
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
    tok = Tokenizer(models.BPE())
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN2_PATTERN), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False)
    trainer = trainers.BpeTrainer(vocab_size=520, min_frequency=1, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), special_tokens=[])
    tok.train_from_iterator(CORPUS * 4, trainer)
    tok.add_special_tokens([AddedToken(s, special=True, normalized=False) for s in SPECIAL])
    return tok


def tokenizer_files(tok, hf_dir):
    tok.save(os.path.join(hf_dir, "tokenizer.json"))
    added = {}
    for s in SPECIAL:
        added[str(tok.token_to_id(s))] = {"content": s, "lstrip": False, "normalized": False,
                                          "rstrip": False, "single_word": False, "special": True}
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


def gguf_tokenizer_keys(g, tok, vocab_size):
    """tokenizer.ggml.* as llama.cpp's _set_vocab_gpt2 writes them (docs/formats.md §4)."""
    tj = json.loads(tok.to_str())
    vocab = tj["model"]["vocab"]
    id_to_tok = {v: k for k, v in vocab.items()}
    special = {}
    for a in tj["added_tokens"]:
        id_to_tok[a["id"]] = a["content"]
        special[a["id"]] = a["special"]
    tokens, types = [], []
    for i in range(vocab_size):
        if i in id_to_tok:
            tokens.append(id_to_tok[i])
            types.append((3 if special[i] else 4) if i in special else 1)
        else:
            tokens.append("[PAD%d]" % i)
            types.append(5)
    merges = [m if isinstance(m, str) else " ".join(m) for m in tj["model"]["merges"]]
    g.string("tokenizer.ggml.model", "gpt2")
    g.string("tokenizer.ggml.pre", "qwen2")
    g.arr("tokenizer.ggml.tokens", GGUF_STRING, tokens)
    g.arr("tokenizer.ggml.token_type", GGUF_I32, types)
    g.arr("tokenizer.ggml.merges", GGUF_STRING, merges)
    g.u32("tokenizer.ggml.eos_token_id", tok.token_to_id("<|im_end|>"))
    g.u32("tokenizer.ggml.padding_token_id", tok.token_to_id("<|endoftext|>"))
    g.u32("tokenizer.ggml.bos_token_id", tok.token_to_id("<|endoftext|>"))
    g.boolean("tokenizer.ggml.add_bos_token", False)
    g.string("tokenizer.chat_template", CHAT_TEMPLATE)


# ---- models --------------------------------------------------------------------------------------
def make_config(kind, tok, vocab_size):
    ids = dict(image_token_id=tok.token_to_id("<|image_pad|>"), video_token_id=tok.token_to_id("<|video_pad|>"),
               vision_start_token_id=tok.token_to_id("<|vision_start|>"),
               vision_end_token_id=tok.token_to_id("<|vision_end|>"))
    tied = kind == "qwen2vl"
    text = dict(vocab_size=vocab_size, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                num_attention_heads=4, num_key_value_heads=2, rms_norm_eps=1e-6, rope_theta=1000000.0,
                max_position_embeddings=4096, tie_word_embeddings=tied, hidden_act="silu",
                bos_token_id=tok.token_to_id("<|endoftext|>"), eos_token_id=tok.token_to_id("<|im_end|>"),
                rope_scaling={"type": "mrope", "rope_type": "default", "mrope_section": [2, 3, 3]})
    if kind == "qwen2vl":
        from transformers import Qwen2VLConfig
        vision = dict(depth=2, embed_dim=32, hidden_size=64, num_heads=2, mlp_ratio=4, patch_size=14,
                      spatial_merge_size=2, temporal_patch_size=2, in_channels=3, hidden_act="quick_gelu")
        cfg = Qwen2VLConfig(text_config=text, vision_config=vision, tie_word_embeddings=tied, **ids)
    else:
        from transformers import Qwen2_5_VLConfig
        vision = dict(depth=4, hidden_size=32, intermediate_size=48, num_heads=2, out_hidden_size=64,
                      patch_size=14, spatial_merge_size=2, temporal_patch_size=2, window_size=112,
                      fullatt_block_indexes=[1, 3], hidden_act="silu", in_channels=3)
        cfg = Qwen2_5_VLConfig(text_config=text, vision_config=vision, tie_word_embeddings=tied, **ids)
    try:
        cfg._attn_implementation = "eager"
        for sub in ("text_config", "vision_config"):
            getattr(cfg, sub)._attn_implementation = "eager"
    except Exception as e:  # noqa: BLE001 -- informational only
        print("note: could not force eager attention:", e)
    return cfg


def randomize(torch, model, kind, seed):
    """Scales that keep activations O(1); then round to F16 / BF16 and flush tiny magnitudes.
    Embeddings (tied: also the output head) at 0.25 and a separate head at 0.4 keep the logits'
    spread moderate and let the layers, not the input embedding, decide the next token."""
    gen = torch.Generator().manual_seed(seed)
    rdt = torch.float16 if kind == "qwen2vl" else torch.bfloat16
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() == 1:
                is_norm = any(s in name for s in ("norm", "ln_q"))
                v = (1.0 + 0.1 * torch.randn(p.shape, generator=gen)) if (is_norm and name.endswith("weight")) \
                    else 0.05 * torch.randn(p.shape, generator=gen)
                if name in ("model.language_model.norm.weight", "model.norm.weight"):
                    v = 4.0 * v   # the final norm spreads the logits (std ~8): clear top-1 choices
            else:
                fan_in = p[0].numel()
                scale = 0.25 if "embed_tokens" in name else 0.4 if "lm_head" in name else fan_in ** -0.5
                v = scale * torch.randn(p.shape, generator=gen)
            v = v.to(rdt).float()
            v[v.abs() < 2.0 ** -14] = 0.0
            p.copy_(v)


def parts(model):
    """(language model module, visual module, lm_head) across transformers versions."""
    inner = model.model
    lm = getattr(inner, "language_model", None) or inner
    visual = getattr(inner, "visual", None) or getattr(model, "visual")
    return lm, visual, model.lm_head


def hub_state_dict(model, tied):
    """Tensor names as the Hub's Qwen2-VL checkpoints have them."""
    lm, visual, head = parts(model)
    sd = {}
    for k, v in lm.state_dict().items():
        sd["model." + k] = v
    for k, v in visual.state_dict().items():
        sd["visual." + k] = v
    if not tied:
        sd["lm_head.weight"] = head.weight
    return {k: v.detach().contiguous().clone() for k, v in sd.items()}


def write_hub_config(path, cfg, tok, vocab_size):
    """config.json in the flat layout of the Hub's Qwen2-VL checkpoints (text keys at top level)."""
    tc, vc = cfg.text_config, cfg.vision_config
    c = {"architectures": ["Qwen2VLForConditionalGeneration"], "attention_dropout": 0.0,
         "bos_token_id": tok.token_to_id("<|endoftext|>"), "eos_token_id": tok.token_to_id("<|im_end|>"),
         "vision_start_token_id": tok.token_to_id("<|vision_start|>"),
         "vision_end_token_id": tok.token_to_id("<|vision_end|>"),
         "vision_token_id": tok.token_to_id("<|vision_pad|>"), "image_token_id": tok.token_to_id("<|image_pad|>"),
         "video_token_id": tok.token_to_id("<|video_pad|>"), "hidden_act": "silu",
         "hidden_size": tc.hidden_size, "initializer_range": 0.02, "intermediate_size": tc.intermediate_size,
         "max_position_embeddings": tc.max_position_embeddings, "max_window_layers": tc.num_hidden_layers,
         "model_type": "qwen2_vl", "num_attention_heads": tc.num_attention_heads,
         "num_hidden_layers": tc.num_hidden_layers, "num_key_value_heads": tc.num_key_value_heads,
         "rms_norm_eps": tc.rms_norm_eps, "rope_theta": 1000000.0, "sliding_window": 4096,
         "tie_word_embeddings": True, "torch_dtype": "float32", "transformers_version": "4.41.2",
         "use_cache": True, "use_sliding_window": False,
         "vision_config": {"depth": vc.depth, "embed_dim": vc.embed_dim, "mlp_ratio": vc.mlp_ratio,
                           "num_heads": vc.num_heads, "in_chans": 3, "hidden_size": vc.hidden_size,
                           "patch_size": 14, "spatial_merge_size": 2, "spatial_patch_size": 14,
                           "temporal_patch_size": 2},
         "rope_scaling": {"type": "mrope", "mrope_section": [2, 3, 3]}, "vocab_size": vocab_size}
    with open(path, "w") as f:
        json.dump(c, f, indent=2)


def write_text_gguf(path, model, cfg, tok, vocab_size, kind):
    lm, _, head = parts(model)
    tc = cfg.text_config
    g = Gguf()
    g.string("general.architecture", "qwen2vl")
    g.string("general.type", "model")
    g.string("general.name", "ocellus tiny " + kind)
    g.u32("general.file_type", 1)
    g.u32("general.quantization_version", 2)
    g.u32("qwen2vl.context_length", tc.max_position_embeddings)
    g.u32("qwen2vl.embedding_length", tc.hidden_size)
    g.u32("qwen2vl.block_count", tc.num_hidden_layers)
    g.u32("qwen2vl.feed_forward_length", tc.intermediate_size)
    g.u32("qwen2vl.attention.head_count", tc.num_attention_heads)
    g.u32("qwen2vl.attention.head_count_kv", tc.num_key_value_heads)
    g.f32("qwen2vl.rope.freq_base", 1000000.0)
    g.f32("qwen2vl.attention.layer_norm_rms_epsilon", tc.rms_norm_eps)
    g.arr("qwen2vl.rope.dimension_sections", GGUF_I32, [2, 3, 3, 0])
    gguf_tokenizer_keys(g, tok, vocab_size)
    sd = lm.state_dict()

    def t2(name, key):
        g.tensor(name, sd[key], GGML_F16 if sd[key].dim() >= 2 else GGML_F32)
    t2("token_embd.weight", "embed_tokens.weight")
    for i in range(tc.num_hidden_layers):
        p = "layers.%d." % i
        b = "blk.%d." % i
        t2(b + "attn_norm.weight", p + "input_layernorm.weight")
        for x in "qkv":
            t2(b + "attn_%s.weight" % x, p + "self_attn.%s_proj.weight" % x)
            t2(b + "attn_%s.bias" % x, p + "self_attn.%s_proj.bias" % x)
        t2(b + "attn_output.weight", p + "self_attn.o_proj.weight")
        t2(b + "ffn_norm.weight", p + "post_attention_layernorm.weight")
        t2(b + "ffn_gate.weight", p + "mlp.gate_proj.weight")
        t2(b + "ffn_up.weight", p + "mlp.up_proj.weight")
        t2(b + "ffn_down.weight", p + "mlp.down_proj.weight")
    t2("output_norm.weight", "norm.weight")
    if kind != "qwen2vl":
        g.tensor("output.weight", head.weight, GGML_F16)
    g.write(path)


def write_mmproj_gguf(path, model, cfg, kind, legacy=False):
    _, visual, _ = parts(model)
    vc = cfg.vision_config
    sd = visual.state_dict()
    hidden = vc.embed_dim if kind == "qwen2vl" else vc.hidden_size
    g = Gguf()
    g.string("general.architecture", "clip")
    g.string("general.type", "mmproj")
    g.string("general.name", "ocellus tiny " + kind)
    g.u32("general.file_type", 1)
    g.u32("general.quantization_version", 2)
    g.boolean("clip.has_vision_encoder", True)
    if legacy:
        g.boolean("clip.has_qwen2vl_merger", True)
        g.boolean("clip.use_gelu", False)
        g.boolean("clip.use_silu", False)
    g.string("clip.projector_type", "qwen2vl_merger" if kind == "qwen2vl" else "qwen2.5vl_merger")
    g.u32("clip.vision.image_size", 560)
    g.u32("clip.vision.patch_size", 14)
    g.u32("clip.vision.embedding_length", hidden)
    if kind == "qwen2vl":
        # The converter copies HF vision_config.hidden_size (the merger's output width): bogus.
        g.u32("clip.vision.feed_forward_length", 0 if legacy else vc.hidden_size)
    else:
        g.u32("clip.vision.feed_forward_length", vc.intermediate_size)
    g.u32("clip.vision.block_count", vc.depth)
    g.u32("clip.vision.attention.head_count", vc.num_heads)
    g.f32("clip.vision.attention.layer_norm_epsilon", 1e-6)
    g.u32("clip.vision.projection_dim", cfg.text_config.hidden_size)
    g.arr("clip.vision.image_mean", GGUF_F32, CLIP_MEAN)
    g.arr("clip.vision.image_std", GGUF_F32, CLIP_STD)
    if kind != "qwen2vl":
        g.boolean("clip.use_silu", True)
        g.u32("clip.vision.n_wa_pattern", vc.fullatt_block_indexes[0] + 1)

    def t(name, tensor):
        g.tensor(name, tensor, GGML_F16 if tensor.dim() >= 2 else GGML_F32)
    if legacy:
        import torch
        g.tensor("v.position_embd.weight", torch.zeros(10, 10), GGML_F32)
    w = sd["patch_embed.proj.weight"]          # [hidden, 3, 2, 14, 14]
    t("v.patch_embd.weight", w[:, :, 0].contiguous())
    t("v.patch_embd.weight.1", w[:, :, 1].contiguous())
    for i in range(vc.depth):
        p, b = "blocks.%d." % i, "v.blk.%d." % i
        t(b + "ln1.weight", sd[p + "norm1.weight"])
        if kind == "qwen2vl":
            t(b + "ln1.bias", sd[p + "norm1.bias"])
        qkv_w, qkv_b = sd[p + "attn.qkv.weight"], sd[p + "attn.qkv.bias"]
        for j, x in enumerate("qkv"):
            t(b + "attn_%s.weight" % x, qkv_w[j * hidden:(j + 1) * hidden].contiguous())
            t(b + "attn_%s.bias" % x, qkv_b[j * hidden:(j + 1) * hidden].contiguous())
        t(b + "attn_out.weight", sd[p + "attn.proj.weight"])
        t(b + "attn_out.bias", sd[p + "attn.proj.bias"])
        t(b + "ln2.weight", sd[p + "norm2.weight"])
        if kind == "qwen2vl":
            t(b + "ln2.bias", sd[p + "norm2.bias"])
            up, down = ("ffn_down", "ffn_up") if legacy else ("ffn_up", "ffn_down")
            t(b + up + ".weight", sd[p + "mlp.fc1.weight"])
            t(b + up + ".bias", sd[p + "mlp.fc1.bias"])
            t(b + down + ".weight", sd[p + "mlp.fc2.weight"])
            t(b + down + ".bias", sd[p + "mlp.fc2.bias"])
        else:
            for x in ("gate", "up", "down"):
                t(b + "ffn_%s.weight" % x, sd[p + "mlp.%s_proj.weight" % x])
                t(b + "ffn_%s.bias" % x, sd[p + "mlp.%s_proj.bias" % x])
    t("v.post_ln.weight", sd["merger.ln_q.weight"])
    if kind == "qwen2vl":
        t("v.post_ln.bias", sd["merger.ln_q.bias"])
    t("mm.0.weight", sd["merger.mlp.0.weight"])
    t("mm.0.bias", sd["merger.mlp.0.bias"])
    t("mm.2.weight", sd["merger.mlp.2.weight"])
    t("mm.2.bias", sd["merger.mlp.2.bias"])
    g.write(path)


def first_tensor(x):
    import torch
    if isinstance(x, torch.Tensor):
        return x
    if isinstance(x, (tuple, list)):
        return first_tensor(x[0])
    for attr in ("pooler_output", "last_hidden_state"):
        v = getattr(x, attr, None)
        if v is not None:
            return v
    if hasattr(x, "to_tuple"):
        return first_tensor(x.to_tuple())
    die("cannot find a tensor in %r" % type(x))


def image_features(model, pv, grid):
    """Merged image embeddings [tokens, hidden] for pixel values of one or more images."""
    import torch
    inner = model.model
    fn = getattr(inner, "get_image_features", None) or getattr(model, "get_image_features")
    out = fn(pixel_values=pv, image_grid_thw=grid)
    if hasattr(out, "pooler_output") and out.pooler_output is not None:
        out = out.pooler_output
    if isinstance(out, (tuple, list)):
        if all(isinstance(o, torch.Tensor) for o in out):
            return torch.cat(list(out), dim=0)
        out = out[0]
        if isinstance(out, (tuple, list)):
            return torch.cat(list(out), dim=0)
    return first_tensor(out)


def rope_index(model, ids, grid, image_token_id):
    import torch
    fn = model.model.get_rope_index
    mm_types = (ids == image_token_id).long()
    for kw in (dict(input_ids=ids, image_grid_thw=grid, attention_mask=torch.ones_like(ids), mm_token_type_ids=mm_types),
               dict(input_ids=ids, image_grid_thw=grid, attention_mask=torch.ones_like(ids)),
               dict(input_ids=ids, image_grid_thw=grid)):
        try:
            pos, _ = fn(**kw)
            return pos[:, 0, :]
        except TypeError as e:
            print("get_rope_index attempt failed:", e)
    die("could not call get_rope_index")


def forward(model, ids, pv, grid, image_token_id):
    """A full forward pass; transformers 5 wants mm_token_type_ids (1 = image token) for M-RoPE."""
    try:
        return model(input_ids=ids, pixel_values=pv, image_grid_thw=grid,
                     mm_token_type_ids=(ids == image_token_id).long())
    except TypeError:
        return model(input_ids=ids, pixel_values=pv, image_grid_thw=grid)


def prompt_inputs(torch, tok, pil_images):
    """pixel values per image, grids, and the chat prompt's input ids (see the module docstring)."""
    import transformers
    proc_cls = getattr(transformers, "Qwen2VLImageProcessorPil", None)
    if proc_cls is None:
        try:
            from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil as proc_cls
        except ImportError:
            from transformers import Qwen2VLImageProcessor as proc_cls
    proc = proc_cls(do_resize=True, resample=3, do_rescale=True, rescale_factor=1 / 255, do_normalize=True,
                    image_mean=CLIP_MEAN, image_std=CLIP_STD, do_convert_rgb=True, min_pixels=3136,
                    max_pixels=12845056, patch_size=14, temporal_patch_size=2, merge_size=2)
    pvs, grids = [], []
    for img in pil_images:
        o = proc(images=[img], return_tensors="pt")
        pvs.append(o["pixel_values"].float())
        grids.append(o["image_grid_thw"])
    grid = torch.cat(grids, dim=0)
    text = "<|im_start|>system\n%s<|im_end|>\n<|im_start|>user\n" % SYSTEM
    for g in grid.tolist():
        text += "<|vision_start|>" + "<|image_pad|>" * (g[0] * g[1] * g[2] // 4) + "<|vision_end|>"
    text += QUESTION + "<|im_end|>\n<|im_start|>assistant\n"
    ids = torch.tensor([tok.encode(text, add_special_tokens=False).ids])
    return pvs, grids, grid, ids


def choose_weights(torch, model, kind, tok, pil_images):
    """Draw weights with successive seeds until the prompt's logits have a top-1/top-2 margin of at
    least 0.03 at every position and a greedy step from the prompt does not just repeat the last
    token: then "same top-1 token" is a meaningful check, not a coin flip between near-ties."""
    pvs, _, grid, ids = prompt_inputs(torch, tok, pil_images)
    pv = torch.cat(pvs, dim=0)
    image_token_id = tok.token_to_id("<|image_pad|>")
    for attempt in range(40):
        seed = (1234 if kind == "qwen2vl" else 4321) + attempt
        randomize(torch, model, kind, seed)
        with torch.no_grad():
            lg = forward(model, ids, pv, grid, image_token_id).logits[0]
        top2 = lg.topk(2, dim=-1).values
        margin = float((top2[:, 0] - top2[:, 1]).min())
        nxt = int(lg[-1].argmax())
        print("seed %d: min margin %.4f, next %d" % (seed, margin, nxt))
        if margin >= 0.03 and nxt != int(ids[0, -1]):
            return seed
    die("no seed gave well separated logits")


def run_model(kind, tok, vocab_size, images, pil_images, out_root):
    import numpy as np
    import torch
    import transformers
    from safetensors.torch import save_file
    print("==", kind)
    cfg = make_config(kind, tok, vocab_size)
    if kind == "qwen2vl":
        from transformers import Qwen2VLForConditionalGeneration as M
    else:
        from transformers import Qwen2_5_VLForConditionalGeneration as M
    torch.manual_seed(0)
    model = M(cfg).eval()
    choose_weights(torch, model, kind, tok, pil_images)
    d = os.path.join(out_root, kind)
    hf = os.path.join(d, "hf")
    os.makedirs(hf, exist_ok=True)
    tied = kind == "qwen2vl"
    if kind == "qwen2vl":
        sd = hub_state_dict(model, tied)
        save_file(sd, os.path.join(hf, "model.safetensors"), metadata={"format": "pt"})
        write_hub_config(os.path.join(hf, "config.json"), cfg, tok, vocab_size)
    else:
        # A bf16 copy is saved; the float32 model itself stays untouched (its rotary inv_freq
        # buffers must not go through bf16).
        import copy
        copy.deepcopy(model).to(torch.bfloat16).save_pretrained(hf, max_shard_size="100KB")
    tokenizer_files(tok, hf)
    write_text_gguf(os.path.join(d, "text.gguf"), model, cfg, tok, vocab_size, kind)
    write_mmproj_gguf(os.path.join(d, "mmproj.gguf"), model, cfg, kind)
    if kind == "qwen2vl":
        write_mmproj_gguf(os.path.join(d, "mmproj-legacy.gguf"), model, cfg, kind, legacy=True)

    pvs, grids, grid, ids = prompt_inputs(torch, tok, pil_images)
    pv = torch.cat(pvs, dim=0)
    ref = {}
    for i, p in enumerate(pvs):
        ref["pixel_values.%d" % i] = p
    ref["image_grid_thw"] = grid.to(torch.int32)
    image_token_id = tok.token_to_id("<|image_pad|>")
    ref["input_ids"] = ids[0].to(torch.int32)
    ref["position_ids"] = rope_index(model, ids, grid, image_token_id).to(torch.int32).contiguous()

    lm, visual, _ = parts(model)
    hooks, caught = [], {}

    def hook(name):
        def f(_m, _inp, out):
            caught[name] = first_tensor(out).detach().float().clone()
        return f
    with torch.no_grad():
        # Vision alone, image by image (the embeddings) and image 0 with block hooks.
        for i, (p, g) in enumerate(zip(pvs, grids)):
            if i == 0:
                hooks.append(visual.patch_embed.register_forward_hook(hook("vision.patch_embed.0")))
                for L, blk in enumerate(visual.blocks):
                    hooks.append(blk.register_forward_hook(hook("vision.block.0.%d" % L)))
            ref["image_embeds.%d" % i] = image_features(model, p, g).float()
            for h in hooks:
                h.remove()
            hooks = []
        for name, v in caught.items():
            ref[name] = v.reshape(-1, v.shape[-1])
        caught.clear()
        # Whole prompt: per-layer outputs, input embeddings, logits.
        hooks.append(lm.embed_tokens.register_forward_hook(hook("raw_embeds")))
        for L, layer in enumerate(lm.layers):
            hooks.append(layer.register_forward_hook(hook("text.layer.%d" % L)))
        out = forward(model, ids, pv, grid, image_token_id)
        for h in hooks:
            h.remove()
        for L in range(len(lm.layers)):
            ref["text.layer.%d" % L] = caught["text.layer.%d" % L][0]
        emb = caught["raw_embeds"][0].clone()
        img_rows = (ids[0] == image_token_id).nonzero().flatten()
        all_embeds = torch.cat([ref["image_embeds.0"], ref["image_embeds.1"]], dim=0)
        emb[img_rows] = all_embeds
        ref["text.embeds"] = emb
        ref["logits"] = out.logits[0].float()
        # Greedy continuation without a stop token: full forward each step.
        gen = []
        cur = ids
        for _ in range(N_GENERATE):
            o = forward(model, cur, pv, grid, image_token_id)
            nxt = int(o.logits[0, -1].argmax())
            gen.append(nxt)
            cur = torch.cat([cur, torch.tensor([[nxt]])], dim=1)
        ref["generated"] = torch.tensor(gen, dtype=torch.int32)
    lg = ref["logits"]
    top2 = lg.topk(2, dim=-1).values
    margin = float((top2[:, 0] - top2[:, 1]).min())
    print("tokens", ids.shape[1], "image tokens", int((ids == image_token_id).sum()), "vocab", lg.shape[1],
          "min top1-top2 logit margin %.4f" % margin, "generated", gen)
    meta = {"system": SYSTEM, "question": QUESTION,
            "versions": "torch %s transformers %s" % (torch.__version__, transformers.__version__)}
    save_file({k: v.contiguous() for k, v in ref.items()}, os.path.join(d, "reference.safetensors"), metadata=meta)
    for root, _, files in os.walk(d):
        for f in sorted(files):
            print("  %-60s %8d" % (os.path.join(root, f), os.path.getsize(os.path.join(root, f))))


def main():
    if len(sys.argv) != 2:
        die("usage: make_model_fixtures.py OUT_DIR")
    out_root = sys.argv[1]
    import numpy as np
    from PIL import Image
    os.makedirs(os.path.join(out_root, "images"), exist_ok=True)
    images, pil_images = [], []
    for name, (w, h), seed in (("image_a", (224, 168), 11), ("image_b", (130, 90), 12)):
        arr = synthetic_image(np, w, h, seed)
        path = os.path.join(out_root, "images", name + ".ppm")
        write_ppm(path, arr)
        img = Image.open(path)
        img.load()
        if img.mode != "RGB" or img.size != (w, h) or not np.array_equal(np.asarray(img), arr):
            die("PPM round trip changed " + name)
        images.append(arr)
        pil_images.append(img)
    tok = build_tokenizer()
    n = tok.get_vocab_size(with_added_tokens=True)
    vocab_size = (n + 63) // 64 * 64
    print("tokenizer: %d tokens, model vocab_size %d" % (n, vocab_size))
    for kind in ("qwen2vl", "qwen25vl"):
        run_model(kind, tok, vocab_size, images, pil_images, out_root)


if __name__ == "__main__":
    main()
