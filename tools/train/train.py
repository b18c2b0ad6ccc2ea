#!/usr/bin/python3
"""Train one of clade's two shipped models on the King James Bible and
export it as GGUF (F16 matrices, F32 norms, the corpus vocabulary).

    /usr/bin/python3 tools/train/train.py --preset target --out models/kjv-target-f16.gguf
    /usr/bin/python3 tools/train/train.py --preset draft  --out models/kjv-draft-f16.gguf

Everything is seeded: the same command on the same torch build gives the
same weights (CPU, 2 threads). tools/train/train.sh installs what it needs
and runs both.
"""
import argparse
import json
import math
import os
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import corpus  # noqa: E402
import gguf  # noqa: E402
import spm  # noqa: E402
from model import Config, Llama  # noqa: E402

VOCAB = 4096
CTX = 512
PRESETS = {
    # ~12.6M parameters: 6 layers, 6 query heads sharing 2 KV heads.
    "target": dict(cfg=dict(dim=384, layers=6, heads=6, kv_heads=2, ff=1024, dropout=0.1),
                   steps=450, batch=16, lr=1e-3),
    # ~1.8M parameters: same vocabulary, 4 narrow layers.
    "draft": dict(cfg=dict(dim=128, layers=4, heads=4, kv_heads=2, ff=384, dropout=0.0),
                  steps=800, batch=16, lr=2e-3),
}


def data():
    train_text, held_text = corpus.split()
    vocab = spm.train(train_text, VOCAB)
    return vocab, np.array(vocab.encode(train_text), dtype=np.int64), \
        np.array(vocab.encode(held_text), dtype=np.int64)


def perplexity(model, ids, ctx):
    """llama.cpp's way: chunks of ctx tokens, each starting with BOS in place
    of its first token, the second half of each scored."""
    model.eval()
    nll, count = 0.0, 0
    with torch.no_grad():
        for start in range(0, len(ids) - ctx + 1, ctx):
            x = torch.from_numpy(ids[start:start + ctx][None].copy())
            x[0, 0] = spm.BOS
            logp = F.log_softmax(model(x[:, :-1]).float(), dim=-1)
            first = ctx // 2
            tgt = x[0, first + 1:]
            nll -= logp[0, first:].gather(1, tgt[:, None]).sum().item()
            count += len(tgt)
    model.train()
    return math.exp(nll / count)


def export(model, vocab, path, name):
    c = model.cfg
    meta = {
        "general.architecture": "llama",
        "general.name": name,
        "general.file_type": 1,
        "general.license": "public domain text; weights under clade's license",
        "llama.vocab_size": c.vocab,
        "llama.context_length": c.ctx,
        "llama.embedding_length": c.dim,
        "llama.block_count": c.layers,
        "llama.feed_forward_length": c.ff,
        "llama.attention.head_count": c.heads,
        "llama.attention.head_count_kv": c.kv_heads,
        "llama.rope.dimension_count": c.head_dim,
        "llama.rope.freq_base": float(c.rope_base),
        "llama.attention.layer_norm_rms_epsilon": float(c.eps),
        "tokenizer.ggml.model": "llama",
        "tokenizer.ggml.tokens": ("str", vocab.tokens),
        "tokenizer.ggml.scores": ("f32", vocab.scores),
        "tokenizer.ggml.token_type": ("i32", vocab.types),
        "tokenizer.ggml.bos_token_id": spm.BOS,
        "tokenizer.ggml.eos_token_id": spm.EOS,
        "tokenizer.ggml.unknown_token_id": spm.UNK,
        "tokenizer.ggml.add_bos_token": True,
        "tokenizer.ggml.add_eos_token": False,
        "tokenizer.ggml.add_space_prefix": True,
    }
    sd = {k: v.detach().float().numpy() for k, v in model.state_dict().items()}
    f16 = lambda a: a.astype(np.float16)  # noqa: E731
    tensors = [("token_embd.weight", f16(sd["tok.weight"]))]
    for i in range(c.layers):
        p = "blocks.%d." % i
        g = "blk.%d." % i
        tensors += [
            (g + "attn_norm.weight", sd[p + "attn_norm.weight"]),
            (g + "attn_q.weight", f16(sd[p + "wq.weight"])),
            (g + "attn_k.weight", f16(sd[p + "wk.weight"])),
            (g + "attn_v.weight", f16(sd[p + "wv.weight"])),
            (g + "attn_output.weight", f16(sd[p + "wo.weight"])),
            (g + "ffn_norm.weight", sd[p + "ffn_norm.weight"]),
            (g + "ffn_gate.weight", f16(sd[p + "w_gate.weight"])),
            (g + "ffn_up.weight", f16(sd[p + "w_up.weight"])),
            (g + "ffn_down.weight", f16(sd[p + "w_down.weight"])),
        ]
    tensors += [("output_norm.weight", sd["norm.weight"]), ("output.weight", f16(sd["out.weight"]))]
    gguf.write(path, meta, tensors)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--preset", choices=sorted(PRESETS), required=True)
    ap.add_argument("--out", required=True, help="GGUF file to write")
    ap.add_argument("--steps", type=int, help="optimizer steps (default: the preset's)")
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--checkpoint", help="also save the PyTorch state here")
    ap.add_argument("--resume", help="start from this checkpoint's weights (a second phase: its own steps and "
                    "schedule, with --lr and --dropout)")
    ap.add_argument("--lr", type=float, help="peak learning rate (default: the preset's)")
    ap.add_argument("--dropout", type=float, help="dropout (default: the preset's)")
    args = ap.parse_args()
    pre = PRESETS[args.preset]
    steps = args.steps or pre["steps"]
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    rng = np.random.RandomState(args.seed)

    t0 = time.time()
    vocab, train_ids, held_ids = data()
    unigram = np.bincount(train_ids, minlength=VOCAB) + 1.0
    unigram /= unigram.sum()
    scored = np.concatenate([held_ids[s + CTX // 2 + 1:s + CTX]
                             for s in range(0, len(held_ids) - CTX + 1, CTX)])
    uni_ppl = math.exp(-np.log(unigram[scored]).mean())
    print("corpus: %d train tokens, %d held-out tokens, vocabulary %d; unigram perplexity %.2f (%.1f s)"
          % (len(train_ids), len(held_ids), VOCAB, uni_ppl, time.time() - t0), flush=True)

    cfg_args = dict(pre["cfg"])
    if args.dropout is not None:
        cfg_args["dropout"] = args.dropout
    cfg = Config(vocab=VOCAB, ctx=CTX, **cfg_args)
    model = Llama(cfg)
    if args.resume:
        model.load_state_dict(torch.load(args.resume)["state"])
        print("resumed from %s" % args.resume, flush=True)
    peak = args.lr or pre["lr"]
    print("%s: %.2fM parameters, %d steps of %d x %d tokens"
          % (args.preset, model.n_params() / 1e6, steps, pre["batch"], CTX), flush=True)
    decay = [p for p in model.parameters() if p.dim() == 2]
    other = [p for p in model.parameters() if p.dim() != 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": other, "weight_decay": 0.0}],
                            lr=peak, betas=(0.9, 0.95))
    warm = max(1, steps // 20)
    t1 = time.time()
    for step in range(steps):
        lr = peak * (step + 1) / warm if step < warm else \
            peak * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * (step - warm) / max(1, steps - warm))))
        for g in opt.param_groups:
            g["lr"] = lr
        starts = rng.randint(0, len(train_ids) - CTX - 1, size=pre["batch"])
        x = torch.from_numpy(np.stack([train_ids[s:s + CTX + 1] for s in starts]))
        with torch.autocast("cpu", dtype=torch.bfloat16):
            logits = model(x[:, :-1])
        loss = F.cross_entropy(logits.float().reshape(-1, VOCAB), x[:, 1:].reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if step % 50 == 0 or step == steps - 1:
            el = time.time() - t1
            print("step %d/%d loss %.3f lr %.2e %.0f tok/s %.0f s" %
                  (step + 1, steps, loss.item(), lr, (step + 1) * pre["batch"] * CTX / el, el), flush=True)
        if (step + 1) % 250 == 0 and step + 1 < steps:
            print("held-out perplexity after %d steps: %.3f" % (step + 1, perplexity(model, held_ids, CTX)), flush=True)
    train_s = time.time() - t1
    ppl = perplexity(model, held_ids, CTX)
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    export(model, vocab, args.out, "clade-kjv-" + args.preset)
    if args.checkpoint:
        torch.save({"cfg": cfg.__dict__, "state": model.state_dict()}, args.checkpoint)
    summary = dict(preset=args.preset, params=model.n_params(), steps=steps, batch=pre["batch"], ctx=CTX,
                   seed=args.seed, resumed=bool(args.resume), lr=peak, dropout=cfg.dropout, train_seconds=round(train_s), held_out_ppl_torch=round(ppl, 3),
                   unigram_ppl=round(uni_ppl, 3))
    print(json.dumps(summary), flush=True)


if __name__ == "__main__":
    main()
