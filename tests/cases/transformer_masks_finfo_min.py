"""A transformer trained under float16 autocast whose attention masks are written for float32, fixed: `torch.finfo(scores.dtype).min`."""

import math

import torch
import torch.nn as nn
import torch.nn.functional as F


class SelfAttention(nn.Module):
    def __init__(self, dim, heads=8):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(dim, dim * 3)
        self.out = nn.Linear(dim, dim)

    def forward(self, x, key_padding_mask=None, causal=False):
        b, n, d = x.shape
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        q = q.view(b, n, self.heads, -1).transpose(1, 2)
        k = k.view(b, n, self.heads, -1).transpose(1, 2)
        v = v.view(b, n, self.heads, -1).transpose(1, 2)
        scores = torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(q.size(-1))
        if key_padding_mask is not None:
            scores = scores.masked_fill(key_padding_mask[:, None, None, :], torch.finfo(scores.dtype).min)
        if causal:
            future = torch.ones(n, n, dtype=torch.bool, device=x.device).triu(1)
            scores = torch.where(future, torch.finfo(scores.dtype).min, scores)
        attn = F.softmax(scores, dim=-1)
        return self.out((attn @ v).transpose(1, 2).reshape(b, n, d))


class Classifier(nn.Module):
    def __init__(self, dim, classes):
        super().__init__()
        self.attention = SelfAttention(dim)
        self.head = nn.Linear(dim, classes)

    def forward(self, x, mask):
        return self.head(self.attention(x, mask, causal=True).mean(1))


def train(loader, epochs=10):
    model = Classifier(256, 10).cuda()
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4)
    scaler = torch.amp.GradScaler("cuda")
    for _ in range(epochs):
        for x, mask, y in loader:
            optimizer.zero_grad(set_to_none=True)
            with torch.autocast("cuda", dtype=torch.float16):
                loss = F.cross_entropy(model(x.cuda(), mask.cuda()), y.cuda())
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
