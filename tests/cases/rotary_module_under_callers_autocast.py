# A rotary embedding module casts its operands to float32 in `forward`, but the caller's
# autocast region recasts the matmul to bfloat16 (diffusers 6e8c8c4cac, x-transformers
# 4adbfc2: positions past 256 collide). Reached as an instance built in the loop's function,
# and as `self.rotary(...)` built in `__init__`. The fixed module switches autocast off
# around the matmul.
import torch
from torch import nn


class Rotary(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.register_buffer("inv_freq", 1.0 / (10000 ** (torch.arange(0, dim, 2).float() / dim)))

    def forward(self, position_ids):
        inv = self.inv_freq[None, :, None].float()
        pos = position_ids[:, None, :].float()
        freqs = (inv @ pos).transpose(1, 2)
        return freqs.cos(), freqs.sin()


class FixedRotary(Rotary):
    def forward(self, position_ids):
        inv = self.inv_freq[None, :, None].float()
        pos = position_ids[:, None, :].float()
        with torch.autocast("cuda", enabled=False):
            freqs = (inv @ pos).transpose(1, 2)
        return freqs.cos(), freqs.sin()


class Model(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.rotary = Rotary(dim)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x, pos):
        cos, sin = self.rotary(pos)
        return self.proj(x * cos + sin)


def train(loader, optimizer):
    rot = Rotary(64)
    fixed = FixedRotary(64)
    model = Model(64)
    for x, pos in loader:
        with torch.autocast("cuda", dtype=torch.bfloat16):
            cos, sin = rot(pos)
            cos2, sin2 = fixed(pos)
            loss = model(x, pos).sum() + (cos * sin * cos2 * sin2).sum()
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
