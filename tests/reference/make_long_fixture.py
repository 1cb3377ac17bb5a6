#!/usr/bin/env python3
"""make_long_fixture.py HF_DIR|TEXT.gguf,MMPROJ.gguf OUT.json: transformers' results for the long
model (examples/long/, trained by examples/long/train.py) on fixed items of the long suite, for the
parity check of the converted GGUF (tests/test_long.c). The items are stream 77 (never trained
on: training uses seed 1, evaluation 1000001), 8 images of 224 px, one per question type
(type mask 1 << t), index 0.

HF_DIR is the checkpoint train.py saved. A GGUF pair (the shipped files) is read back into
transformers first (gguf_init.py, the tokenizer from the file's token list), Q8_0 dequantized, and
saved as train.py saves (f16): that is how the fixture of the shipped run-5 model was remade when
the list question changed (TRAINING.md, run 6), its PyTorch checkpoint being long gone.

Per item it writes: type, question, answer, n_prompt_tokens, the prompt's last-position logits
(float32 model, sdpa attention, f16 weights as saved), and the greedy continuation (at most 48 new
tokens, stopping at <|im_end|>) as token ids and text. Run on the GPU machine (torch +
transformers + tokenizers), from the repository root.
"""
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "examples", "long"))
import train  # noqa: E402

SEED, N_IMAGES, SIDE = 77, 8, 224


def hf_from_gguf(pair, hf):
    """The GGUF pair as a transformers checkpoint in hf (f16 safetensors + tokenizer files)."""
    import types
    import torch
    import gguf_init
    text, mmproj = pair.split(",")
    tok = train.gguf_tokenizer(text)
    n_tok = tok.get_vocab_size(with_added_tokens=True)
    shape = types.SimpleNamespace(ffn=1024, layers=12, vision_layers=6)   # the shipped model's (TRAINING.md)
    model = train.make_model(tok, (n_tok + 63) // 64 * 64, shape)
    n, _ = gguf_init.load_into(torch, model, text, mmproj)
    os.makedirs(hf, exist_ok=True)
    train.save_f16(model, hf)
    train.save_tokenizer_files(tok, hf)
    print("%s: %d tensors -> %s" % (pair, n, hf), flush=True)


def main():
    hf, out_path = sys.argv[1], sys.argv[2]
    if hf.endswith(".gguf"):
        import tempfile
        tmp = tempfile.mkdtemp(prefix="long-hf-")
        hf_from_gguf(hf, tmp)
        hf = tmp
    import torch
    from tokenizers import Tokenizer
    from transformers import Qwen2_5_VLForConditionalGeneration
    dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        model = Qwen2_5_VLForConditionalGeneration.from_pretrained(hf, dtype=torch.float32)
    except TypeError:
        model = Qwen2_5_VLForConditionalGeneration.from_pretrained(hf, torch_dtype=torch.float32)
    model = model.float().to(dev).eval()
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    tok = Tokenizer.from_file(os.path.join(hf, "tokenizer.json"))
    scenes = train.Scenes(train.build_scene_so("/tmp"))
    image_token_id, im_end_id = tok.token_to_id("<|image_pad|>"), tok.token_to_id("<|im_end|>")
    mean = torch.tensor(train.CLIP_MEAN, device=dev)
    std = torch.tensor(train.CLIP_STD, device=dev)
    items = []
    for t in range(len(train.TYPE_NAMES)):
        d, it = scenes.describe(SEED, 0, N_IMAGES, N_IMAGES, SIDE, SIDE, 1 << t)
        q = it.question.decode()
        ids = tok.encode(train.prompt_text(q, N_IMAGES, SIDE // 28), add_special_tokens=False).ids
        pv = train.patchify(torch, torch.from_numpy(scenes.pixels(d)).to(dev), mean, std)
        g = SIDE // 14
        thw = torch.tensor([[1, g, g]] * N_IMAGES, device=dev)
        gen, last = [], None
        cur = list(ids)
        with torch.no_grad():
            for _ in range(48):   # no cache: each step is transformers' plain forward of the whole sequence
                idt = torch.tensor([cur], device=dev)
                logits = model(input_ids=idt, attention_mask=torch.ones_like(idt), pixel_values=pv,
                               image_grid_thw=thw, mm_token_type_ids=(idt == image_token_id).long()).logits[0, -1]
                if last is None:
                    last = logits.float().cpu().tolist()
                nxt = int(logits.argmax())
                if nxt == im_end_id:
                    break
                gen.append(nxt)
                cur.append(nxt)
        items.append({"type": train.TYPE_NAMES[t], "seed": SEED, "index": 0, "type_mask": 1 << t,
                      "n_images": N_IMAGES, "side_px": SIDE, "question": q, "answer": it.answer.decode(),
                      "n_prompt_tokens": len(ids), "last_logits": last, "generated_ids": gen,
                      "generated": tok.decode(gen, skip_special_tokens=False)})
        print(train.TYPE_NAMES[t], q, "| expected", it.answer.decode(), "| got", items[-1]["generated"], flush=True)
    with open(out_path, "w") as f:
        json.dump({"items": items, "versions": "torch %s" % torch.__version__}, f)


if __name__ == "__main__":
    main()
