"""A mixture-of-experts layer that gathers its experts' outputs into a float32 buffer."""

import torch
import torch.nn as nn
import torch.nn.functional as F


class MoE(nn.Module):
    def __init__(self, dim, experts=4):
        super().__init__()
        self.router = nn.Linear(dim, experts)
        self.experts = nn.ModuleList(nn.Linear(dim, dim) for _ in range(experts))

    def expert(self, e, x):
        return F.linear(x, self.experts[e].weight, self.experts[e].bias)

    def forward(self, x):
        flat = x.reshape(-1, x.shape[-1])
        choice = self.router(flat).argmax(-1)
        out = torch.zeros(flat.shape[0], flat.shape[1], device=x.device)
        cast = torch.zeros(flat.shape[0], flat.shape[1], device=x.device)
        same = torch.zeros(flat.shape[0], flat.shape[1], device=x.device, dtype=x.dtype)
        for e in range(len(self.experts)):
            idx = torch.nonzero(choice == e).squeeze(-1)
            out.index_add_(0, idx, self.expert(e, flat[idx]))
            cast.index_add_(0, idx, self.expert(e, flat[idx]).to(cast.dtype))
            same.index_add_(0, idx, self.expert(e, flat[idx]))
        return out.view_as(x) + cast.view_as(x) + same.view_as(x)


def train(model, loader, optimizer):
    moe = MoE(128)
    for x in loader:
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = moe(x).pow(2).mean()
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
