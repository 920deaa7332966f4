"""A transformer block trained under float16 autocast. Its attention scores are meant to be a
float32 island, but the `.float()` casts sit inside the autocast region, which casts the
inputs of every matrix product back to float16. The rotary frequencies are done right: an
island under `autocast(enabled=False)`."""

import math

import torch
import torch.nn as nn
import torch.nn.functional as F


class Attention(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.out = nn.Linear(dim, dim)
        self.register_buffer("inv_freq", 1.0 / (10000 ** (torch.arange(0, dim // heads, 2).float() / dim)))

    def rotary(self, positions):
        with torch.autocast(device_type="cuda", enabled=False):
            freqs = self.inv_freq[None, :, None].float() @ positions[:, None, :].float()
        return freqs.transpose(1, 2)

    def forward(self, x, mask):
        b, n, d = x.shape
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        q = q.view(b, n, self.heads, -1).transpose(1, 2)
        k = k.view(b, n, self.heads, -1).transpose(1, 2)
        v = v.view(b, n, self.heads, -1).transpose(1, 2)
        # "Compute the scores in float32 to avoid overflow."
        q32 = q.float() / math.sqrt(q.shape[-1])
        scores = q32 @ k.float().transpose(-2, -1)
        scores = scores.masked_fill(~mask, float("-inf"))
        attn = scores.float().softmax(dim=-1)
        # One cast beside an uncast operand: the mask made float, not an island.
        counts = torch.matmul(mask.float(), v.new_ones(n, 1))
        out = (attn.to(v.dtype) @ v).transpose(1, 2).reshape(b, n, d)
        return self.out(out) / counts.clamp(min=1).mean()


class Model(nn.Module):
    def __init__(self, vocab, dim, heads):
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.attn = Attention(dim, heads)
        self.head = nn.Linear(dim, vocab)

    def forward(self, tokens, mask):
        return self.head(self.attn(self.embed(tokens), mask))


def train(loader, vocab=1000):
    model = Model(vocab, 256, 8).cuda()
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4)
    scaler = torch.amp.GradScaler("cuda")
    for tokens, mask, targets in loader:
        optimizer.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.float16):
            logits = model(tokens, mask)
            # The output cast for the loss: correct.
            loss = F.cross_entropy(logits.float().view(-1, vocab), targets.view(-1))
            # float64 is not eligible for autocast: this does run in float64.
            check = tokens.double() @ tokens.double().T
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
