"""gguf_init.py: loads a shipped ocellus-long GGUF pair (text + mmproj, as `ocellus convert` wrote
them) back into transformers' Qwen2_5_VLForConditionalGeneration, so training can go on from the
shipped model (train.py --init-gguf) instead of from scratch: the session that trained it kept no
PyTorch checkpoint, only the GGUF files in the repository.

The mapping is the inverse of examples/tools/convert_text.c and convert_vision.c:
- text: token_embd / blk.N.{attn_norm, attn_q, attn_k, attn_v, attn_output, ffn_norm, ffn_gate,
  ffn_up, ffn_down} / output_norm -> embed_tokens / layers.N.{...} / norm (tied output);
- vision: v.patch_embd.weight and .weight.1 are the two temporal slices of the Conv3d kernel
  [E, C, T=2, P, P]; v.blk.N.attn_{q,k,v} are the three row blocks of attn.qkv; ln1/ln2 -> norm1/2,
  attn_out -> attn.proj, ffn_* -> mlp.*_proj; v.post_ln -> merger.ln_q, mm.0/mm.2 -> merger.mlp.0/2.
GGUF stores ne innermost first, so a tensor's bytes are PyTorch's row-major layout of the reversed
shape. Types read: F32, F16, BF16 and Q8_0 (blocks of 32: an f16 scale, 32 int8), dequantized to
f32: a Q8_0 file gives weights within half a quantization step of the trained ones.

Standard library + numpy; the caller copies the arrays into the model."""
import struct

GGUF_MAGIC = b"GGUF"
# value types of GGUF metadata: size in bytes of the fixed-size ones
_SCALAR = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}
T_STRING, T_ARRAY = 8, 9
F32, F16, Q8_0, BF16 = 0, 1, 8, 30


class Reader:
    def __init__(self, path):
        with open(path, "rb") as f:
            self.buf = f.read()
        self.off = 0
        if self.buf[:4] != GGUF_MAGIC:
            raise ValueError("%s: not a GGUF file" % path)
        self.off = 4
        version, n_tensors, n_kv = self._u32(), self._u64(), self._u64()
        if version not in (2, 3):
            raise ValueError("%s: GGUF version %d" % (path, version))
        self.meta = {}
        for _ in range(n_kv):
            key = self._str()
            self.meta[key] = self._value(self._u32())
        self.tensors = {}
        for _ in range(n_tensors):
            name = self._str()
            n_dims = self._u32()
            ne = [self._u64() for _ in range(n_dims)]
            ttype, off = self._u32(), self._u64()
            self.tensors[name] = (ne, ttype, off)
        align = int(self.meta.get("general.alignment", 32))
        self.data = (self.off + align - 1) // align * align
        self.path = path

    def _take(self, fmt):
        v = struct.unpack_from(fmt, self.buf, self.off)[0]
        self.off += struct.calcsize(fmt)
        return v

    def _u32(self):
        return self._take("<I")

    def _u64(self):
        return self._take("<Q")

    def _str(self):
        n = self._u64()
        s = self.buf[self.off:self.off + n].decode("utf-8", "surrogateescape")
        self.off += n
        return s

    def _value(self, t):
        if t in _SCALAR:
            return self._take(_SCALAR[t])
        if t == T_STRING:
            return self._str()
        if t == T_ARRAY:
            et, n = self._u32(), self._u64()
            return [self._value(et) for _ in range(n)]
        raise ValueError("%s: metadata type %d" % (self.path, t))

    def array(self, name):
        """The tensor as float32 numpy, in PyTorch's shape (ne reversed)."""
        import numpy as np
        ne, t, off = self.tensors[name]
        n = 1
        for d in ne:
            n *= d
        p = self.data + off
        if t == F32:
            a = np.frombuffer(self.buf, np.float32, n, p)
        elif t == F16:
            a = np.frombuffer(self.buf, np.float16, n, p).astype(np.float32)
        elif t == BF16:
            a = (np.frombuffer(self.buf, np.uint16, n, p).astype(np.uint32) << 16).view(np.float32)
        elif t == Q8_0:
            blocks = np.frombuffer(self.buf, np.uint8, n // 32 * 34, p).reshape(-1, 34)
            d = blocks[:, :2].copy().view(np.float16).astype(np.float32)          # [nb, 1]
            q = blocks[:, 2:].copy().view(np.int8).astype(np.float32)             # [nb, 32]
            a = (q * d).reshape(-1)
        else:
            raise ValueError("%s: tensor %s has type %d (read: F32, F16, BF16, Q8_0)" % (self.path, name, t))
        return a.reshape(list(reversed(ne))).copy()


def hf_arrays(text_path, mmproj_path):
    """{HF-relative name: float32 array}: text names relative to the language model
    ("layers.0.self_attn.q_proj.weight", "embed_tokens.weight", "norm.weight"), vision names
    prefixed "visual." ("visual.blocks.0.attn.qkv.weight", ...). Also returns the text GGUF's token
    strings for the caller's tokenizer check."""
    import numpy as np
    out = {}
    tr = Reader(text_path)
    tmap = {"attn_norm.weight": "input_layernorm.weight", "attn_output.weight": "self_attn.o_proj.weight",
            "ffn_norm.weight": "post_attention_layernorm.weight", "ffn_gate.weight": "mlp.gate_proj.weight",
            "ffn_up.weight": "mlp.up_proj.weight", "ffn_down.weight": "mlp.down_proj.weight"}
    for p in "qkv":
        for s in ("weight", "bias"):
            tmap["attn_%s.%s" % (p, s)] = "self_attn.%s_proj.%s" % (p, s)
    for name in tr.tensors:
        if name == "token_embd.weight":
            out["embed_tokens.weight"] = tr.array(name)
        elif name == "output_norm.weight":
            out["norm.weight"] = tr.array(name)
        elif name == "output.weight":
            out["lm_head.weight"] = tr.array(name)
        elif name.startswith("blk."):
            _, i, rest = name.split(".", 2)
            if rest not in tmap:
                raise ValueError("%s: unknown tensor %s" % (text_path, name))
            out["layers.%s.%s" % (i, tmap[rest])] = tr.array(name)
        else:
            raise ValueError("%s: unknown tensor %s" % (text_path, name))
    vr = Reader(mmproj_path)
    vmap = {"ln1.weight": "norm1.weight", "ln2.weight": "norm2.weight", "attn_out.weight": "attn.proj.weight",
            "attn_out.bias": "attn.proj.bias"}
    for f in ("gate", "up", "down"):
        for s in ("weight", "bias"):
            vmap["ffn_%s.%s" % (f, s)] = "mlp.%s_proj.%s" % (f, s)
    qkv = {}
    for name in vr.tensors:
        if name in ("v.patch_embd.weight", "v.patch_embd.weight.1"):
            continue
        if name == "v.post_ln.weight":
            out["visual.merger.ln_q.weight"] = vr.array(name)
        elif name.startswith("mm."):
            _, i, s = name.split(".")
            out["visual.merger.mlp.%s.%s" % (i, s)] = vr.array(name)
        elif name.startswith("v.blk."):
            _, _, i, rest = name.split(".", 3)
            if rest[:5] == "attn_" and rest[5] in "qkv" and rest[6] == ".":
                qkv.setdefault((i, rest[7:]), {})[rest[5]] = vr.array(name)
            elif rest in vmap:
                out["visual.blocks.%s.%s" % (i, vmap[rest])] = vr.array(name)
            else:
                raise ValueError("%s: unknown tensor %s" % (mmproj_path, name))
        else:
            raise ValueError("%s: unknown tensor %s" % (mmproj_path, name))
    for (i, s), parts in qkv.items():
        out["visual.blocks.%s.attn.qkv.%s" % (i, s)] = np.concatenate([parts[p] for p in "qkv"], 0)
    # Conv3d [E, C, 2, P, P] from the two temporal slices [E, C, P, P]
    out["visual.patch_embed.proj.weight"] = np.stack([vr.array("v.patch_embd.weight"),
                                                      vr.array("v.patch_embd.weight.1")], 2)
    return out, tr.meta.get("tokenizer.ggml.tokens", [])


def load_into(torch, model, text_path, mmproj_path):
    """Copies the GGUF pair into `model` (every tensor of its state dict but a tied lm_head must be
    found, with the same shape); returns (n_loaded, gguf token strings)."""
    arrays, tokens = hf_arrays(text_path, mmproj_path)
    sd = model.state_dict()
    used = set()
    n = 0
    for key, param in sd.items():
        if "visual." in key:
            rel = "visual." + key.split("visual.", 1)[1]
        elif key.startswith("lm_head.") or key.endswith(".lm_head.weight"):
            rel = "lm_head.weight"
            if rel not in arrays:        # tied to embed_tokens
                continue
        else:
            rel = key.split("language_model.", 1)[1] if "language_model." in key else key.split("model.", 1)[-1]
        if rel not in arrays:
            raise ValueError("--init-gguf: no tensor in the GGUF files for %s (%s)" % (key, rel))
        a = arrays[rel]
        if tuple(a.shape) != tuple(param.shape):
            # the GGUF's embedding may have fewer rows than the model's padded vocabulary
            if rel == "embed_tokens.weight" and a.shape[1] == param.shape[1] and a.shape[0] <= param.shape[0]:
                with torch.no_grad():
                    param[:a.shape[0]].copy_(torch.from_numpy(a))
                used.add(rel)
                n += 1
                continue
            raise ValueError("--init-gguf: %s is %s in the GGUF, %s in the model" % (rel, a.shape, tuple(param.shape)))
        with torch.no_grad():
            param.copy_(torch.from_numpy(a))
        used.add(rel)
        n += 1
    unused = sorted(set(arrays) - used)
    if unused:
        raise ValueError("--init-gguf: GGUF tensors the model has no place for: %s" % ", ".join(unused[:5]))
    return n, tokens
