#!/usr/bin/env python3
"""probe.py HF_DIR OUT.json [--items 100] [--max-images 16]: is the long model's attention
structured? (issue 17, must-show 2). For each decoder layer and query head, over the image-token
queries of `--items` items of the evaluation stream (seed 1000001, what `ocellus eval --suite long`
asks), the share of attention mass that falls
  own:   on keys of the query's own image,
  sink:  on "image sinks" in other images: image tokens whose mean received mass (over all image
         queries of that head and item) is at least 10x the uniform share 1 / n_image_tokens,
  text:  on text tokens (system prompt, "Picture N:" labels, question, vision start/end),
  other: on the remaining image tokens of other images.
The four shares sum to 1 per query; the table is their mean over queries and items.

Runs transformers with eager attention and output_attentions (float32) on the GPU machine; items
are cut to --max-images images (the attention maps of all layers of an 8K-token prompt would not
fit) and their side is as drawn. Writes OUT.json: {"layers": [[[own, sink, text, other] per head]
per layer], "items": n, ...} and prints a table.
"""
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import train  # noqa: E402  (the generator, prompt and positions, shared with training)


def main():
    import argparse
    ap = argparse.ArgumentParser()
    ap.add_argument("hf")
    ap.add_argument("out")
    ap.add_argument("--items", type=int, default=100)
    ap.add_argument("--max-images", type=int, default=16)
    ap.add_argument("--so", default="/tmp")
    args = ap.parse_args()
    import numpy as np
    import torch
    from tokenizers import Tokenizer
    from transformers import Qwen2_5_VLForConditionalGeneration
    dev = torch.device("cuda")
    try:
        model = Qwen2_5_VLForConditionalGeneration.from_pretrained(args.hf, dtype=torch.float32,
                                                                   attn_implementation="eager")
    except TypeError:
        model = Qwen2_5_VLForConditionalGeneration.from_pretrained(args.hf, torch_dtype=torch.float32,
                                                                   attn_implementation="eager")
    model = model.float().to(dev).eval()
    tok = Tokenizer.from_file(os.path.join(args.hf, "tokenizer.json"))
    scenes = train.Scenes(train.build_scene_so(args.so))
    image_token_id = tok.token_to_id("<|image_pad|>")
    vision_start_id = tok.token_to_id("<|vision_start|>")
    mean = torch.tensor(train.CLIP_MEAN, device=dev)
    std = torch.tensor(train.CLIP_STD, device=dev)
    cfg = model.config.text_config if hasattr(model.config, "text_config") else model.config
    L_, H_ = cfg.num_hidden_layers, cfg.num_attention_heads
    acc = np.zeros((L_, H_, 4))
    n_q = 0
    tokens = []
    for i in range(args.items):
        d, it = scenes.describe(train.EVAL_SEED, i, train.MIN_IMAGES, args.max_images)
        grid = d.side_px // 28
        ids = tok.encode(train.prompt_text(it.question.decode(), d.n_images, grid), add_special_tokens=False).ids
        tokens.append(len(ids))
        imgs = torch.from_numpy(scenes.pixels(d)).to(dev)
        pv = train.patchify(torch, imgs, mean, std)
        g = d.side_px // 14
        thw = torch.tensor([[1, g, g]] * d.n_images, device=dev)
        idt = torch.tensor([ids], device=dev)
        with torch.no_grad():
            out = model(input_ids=idt, attention_mask=torch.ones_like(idt), pixel_values=pv, image_grid_thw=thw,
                        mm_token_type_ids=(idt == image_token_id).long(), output_attentions=True)
        idv = idt[0]
        is_img = idv == image_token_id
        img_no = torch.cumsum((idv == vision_start_id).long(), 0)      # image number of each position
        q_idx = is_img.nonzero().squeeze(1)
        same = (img_no[q_idx][:, None] == img_no[None, :]) & is_img[None, :]   # [Q, K]
        n_img_tok = int(is_img.sum())
        for li, a in enumerate(out.attentions):
            A = a[0][:, q_idx, :].float()                                   # [H, Q, K]
            recv = A.mean(1)                                                # [H, K] mean received mass
            sink_key = (recv >= 10.0 / n_img_tok) & is_img[None, :]          # [H, K]
            own = (A * same[None]).sum(-1)
            sink = (A * (sink_key[:, None, :] & ~same[None])).sum(-1)
            text = (A * (~is_img)[None, None, :]).sum(-1)
            other = 1.0 - own - sink - text
            acc[li] += torch.stack([own.sum(1), sink.sum(1), text.sum(1), other.sum(1)], -1).cpu().numpy()
        n_q += len(q_idx)
        del out
        print("item %d: %d tokens, %d images of %d px" % (i, len(ids), d.n_images, d.side_px), flush=True)
    share = acc / max(1, n_q)
    res = {"items": args.items, "max_images": args.max_images, "seed": train.EVAL_SEED,
           "mean_prompt_tokens": float(np.mean(tokens)), "image_queries": n_q,
           "columns": ["own", "sink", "text", "other"], "layers": share.tolist()}
    with open(args.out, "w") as f:
        json.dump(res, f, indent=1)
    print("layer head   own  sink  text other")
    for li in range(L_):
        for h in range(H_):
            print("%5d %4d %5.2f %5.2f %5.2f %5.2f" % ((li, h) + tuple(share[li, h])))


if __name__ == "__main__":
    main()
