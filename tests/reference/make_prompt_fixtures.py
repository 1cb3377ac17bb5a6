#!/usr/bin/env python3
"""Reference token ids and M-RoPE position ids for a two-image Qwen2-VL chat prompt.

Run on a machine with torch + transformers (no internet needed):
    python3 tests/reference/make_prompt_fixtures.py TOKENIZER_JSON OUT_DIR
TOKENIZER_JSON is ../shared/data/qwen2-tokenizer/tokenizer.json. Writes OUT_DIR/two_images.txt:
    versions ...               (library versions, informational)
    question <text escaped as JSON string>
    system <text as JSON string>
    image <grid_t> <grid_h> <grid_w>   (one line per image, patch grid as image_grid_thw)
    ids <n> id...              (input_ids after the processor expanded each <|image_pad|>)
    pos_t <n> ... / pos_h <n> ... / pos_w <n> ...  (get_rope_index rows)
The C test (tests/test_prompt.c) builds the same prompt with ocellus and compares.
"""
import json
import os
import sys

import numpy as np
import torch
import transformers
from transformers import (PreTrainedTokenizerFast, Qwen2VLConfig,
                          Qwen2VLForConditionalGeneration, Qwen2VLImageProcessor)

SYSTEM = "You are a helpful assistant."
QUESTION = "Which image has more red shapes? Answer with 1 or 2."
SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|vision_start|>", "<|vision_end|>",
           "<|vision_pad|>", "<|image_pad|>", "<|video_pad|>"]


def main():
    tok_json, out_dir = sys.argv[1], sys.argv[2]
    os.makedirs(out_dir, exist_ok=True)
    tok = PreTrainedTokenizerFast(tokenizer_file=tok_json)
    tok.add_special_tokens({"additional_special_tokens": SPECIAL})
    # Images whose sides are multiples of 28 need no resize: grids are exact.
    sizes = [(56, 84), (112, 56)]   # (height, width)
    rng = np.random.default_rng(7)
    images = [rng.integers(0, 256, size=(h, w, 3), dtype=np.uint8) for h, w in sizes]
    proc = Qwen2VLImageProcessor(do_resize=False)
    pix = proc(images=images, return_tensors="pt")
    grid = pix["image_grid_thw"]
    merge = 2
    # Chat text as Qwen2-VL's template renders it: images first in the user turn, in order.
    text = f"<|im_start|>system\n{SYSTEM}<|im_end|>\n<|im_start|>user\n"
    for g in grid.tolist():
        n = g[0] * g[1] * g[2] // (merge * merge)
        text += "<|vision_start|>" + "<|image_pad|>" * n + "<|vision_end|>"
    text += f"{QUESTION}<|im_end|>\n<|im_start|>assistant\n"
    ids = tok(text, add_special_tokens=False, return_tensors="pt")["input_ids"]
    assert int((ids == 151655).sum()) == sum(g[0] * g[1] * g[2] // 4 for g in grid.tolist())

    cfg = Qwen2VLConfig(
        text_config=dict(vocab_size=151936, hidden_size=64, intermediate_size=128, num_hidden_layers=1,
                         num_attention_heads=2, num_key_value_heads=1,
                         rope_scaling={"type": "mrope", "rope_type": "default", "mrope_section": [4, 6, 6]}),
        vision_config=dict(depth=1, embed_dim=32, hidden_size=64, num_heads=2, mlp_ratio=2),
        image_token_id=151655, video_token_id=151656, vision_start_token_id=151652,
        vision_end_token_id=151653)
    model = Qwen2VLForConditionalGeneration(cfg).eval()
    mm_types = (ids == 151655).long()
    fn = model.model.get_rope_index
    attempts = [
        dict(input_ids=ids, image_grid_thw=grid, attention_mask=torch.ones_like(ids), mm_token_type_ids=mm_types),
        dict(input_ids=ids, image_grid_thw=grid, attention_mask=torch.ones_like(ids)),
        dict(input_ids=ids, image_grid_thw=grid),
    ]
    pos = None
    for kw in attempts:
        try:
            pos, _ = fn(**kw)
            break
        except TypeError as e:
            print("get_rope_index signature attempt failed:", e)
    if pos is None:
        raise SystemExit("could not call get_rope_index")
    pos = pos[:, 0, :].tolist()   # [3, n]
    n = ids.shape[1]
    with open(os.path.join(out_dir, "two_images.txt"), "w") as f:
        f.write(f"versions torch={torch.__version__} transformers={transformers.__version__}\n")
        f.write("system " + json.dumps(SYSTEM) + "\n")
        f.write("question " + json.dumps(QUESTION) + "\n")
        for g in grid.tolist():
            f.write("image %d %d %d\n" % tuple(g))
        f.write(f"ids {n} " + " ".join(str(i) for i in ids[0].tolist()) + "\n")
        for name, row in zip(("pos_t", "pos_h", "pos_w"), pos):
            f.write(f"{name} {n} " + " ".join(str(p) for p in row) + "\n")
    print("wrote", os.path.join(out_dir, "two_images.txt"), "tokens", n)


if __name__ == "__main__":
    main()
