"""A Llama-architecture transformer in PyTorch, laid out as GGUF stores it:
RMSNorm, rotary position embedding on adjacent pairs (llama.cpp's "normal"
RoPE, so Q and K are exported without the permutation Hugging Face
checkpoints need), grouped-query attention, SwiGLU feed-forward, and an
untied output matrix."""
import math
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass
class Config:
    vocab: int
    dim: int
    layers: int
    heads: int
    kv_heads: int
    ff: int
    ctx: int
    rope_base: float = 10000.0
    eps: float = 1e-5
    dropout: float = 0.0  # on the residual branches, in training only

    @property
    def head_dim(self):
        return self.dim // self.heads


class RMSNorm(nn.Module):
    def __init__(self, dim, eps):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def rope_tables(cfg, n):
    hd = cfg.head_dim
    inv = cfg.rope_base ** (-torch.arange(0, hd, 2, dtype=torch.float64) / hd)
    ang = torch.arange(n, dtype=torch.float64)[:, None] * inv[None, :]
    return torch.cos(ang).float(), torch.sin(ang).float()


def rope(x, cos, sin):
    # x: [batch, heads, seq, hd]; pairs (2i, 2i+1) rotate by angle i.
    x0, x1 = x[..., 0::2], x[..., 1::2]
    r0 = x0 * cos - x1 * sin
    r1 = x0 * sin + x1 * cos
    return torch.stack((r0, r1), dim=-1).flatten(-2)


class Block(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        hd = cfg.head_dim
        self.attn_norm = RMSNorm(cfg.dim, cfg.eps)
        self.wq = nn.Linear(cfg.dim, cfg.heads * hd, bias=False)
        self.wk = nn.Linear(cfg.dim, cfg.kv_heads * hd, bias=False)
        self.wv = nn.Linear(cfg.dim, cfg.kv_heads * hd, bias=False)
        self.wo = nn.Linear(cfg.heads * hd, cfg.dim, bias=False)
        self.ffn_norm = RMSNorm(cfg.dim, cfg.eps)
        self.w_gate = nn.Linear(cfg.dim, cfg.ff, bias=False)
        self.w_up = nn.Linear(cfg.dim, cfg.ff, bias=False)
        self.w_down = nn.Linear(cfg.ff, cfg.dim, bias=False)
        self.drop = nn.Dropout(cfg.dropout)

    def forward(self, x, cos, sin, mask):
        c = self.cfg
        b, n, _ = x.shape
        h = self.attn_norm(x)
        q = self.wq(h).view(b, n, c.heads, c.head_dim).transpose(1, 2)
        k = self.wk(h).view(b, n, c.kv_heads, c.head_dim).transpose(1, 2)
        v = self.wv(h).view(b, n, c.kv_heads, c.head_dim).transpose(1, 2)
        q, k = rope(q, cos, sin), rope(k, cos, sin)
        g = c.heads // c.kv_heads  # query head j reads kv head j // g
        k = k.repeat_interleave(g, dim=1)
        v = v.repeat_interleave(g, dim=1)
        att = (q @ k.transpose(-1, -2)) * (1.0 / math.sqrt(c.head_dim)) + mask
        o = torch.softmax(att, dim=-1) @ v
        x = x + self.drop(self.wo(o.transpose(1, 2).reshape(b, n, -1)))
        h = self.ffn_norm(x)
        return x + self.drop(self.w_down(F.silu(self.w_gate(h)) * self.w_up(h)))


class Llama(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        self.tok = nn.Embedding(cfg.vocab, cfg.dim)
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.layers))
        self.norm = RMSNorm(cfg.dim, cfg.eps)
        self.out = nn.Linear(cfg.dim, cfg.vocab, bias=False)
        cos, sin = rope_tables(cfg, cfg.ctx)
        self.register_buffer("cos", cos, persistent=False)
        self.register_buffer("sin", sin, persistent=False)
        for name, p in self.named_parameters():
            if p.dim() == 2:
                std = 0.02
                if name.endswith("wo.weight") or name.endswith("w_down.weight"):
                    std = 0.02 / math.sqrt(2 * cfg.layers)
                nn.init.normal_(p, 0.0, std)

    def forward(self, ids):
        n = ids.shape[1]
        mask = torch.full((n, n), float("-inf"), device=ids.device).triu(1)
        x = self.tok(ids)
        cos, sin = self.cos[:n], self.sin[:n]
        for blk in self.blocks:
            x = blk(x, cos, sin, mask)
        return self.out(self.norm(x))

    def n_params(self):
        return sum(p.numel() for p in self.parameters())
