"""Float32 islands inside autocast spelled without `.float()`: `type_as` a float32 buffer,
`.to(F32)` through an alias, `.to(dtype=torch.float)`, an einsum over them; and on a CPU
region, `torch.tensordot`, which autocast lists nowhere but runs on a cast-down `mm`. Beside
them, the same code done right (autocast off around the island) and spellings that are no
float32 cast (`type_as` a tensor whose dtype is not shown, `tensordot` on CUDA, which autocast
promotes)."""

import torch
import torch.nn as nn

F32 = torch.float32


class RelativeBias(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.heads = heads
        self.proj = nn.Linear(dim, 3 * dim)
        self.register_buffer("scale", torch.full((heads, 1, 1), dim**-0.5, dtype=torch.float32))

    def forward(self, x):
        q, k, v = self.proj(x).chunk(3, dim=-1)
        scores = torch.einsum("bid,bjd->bij", q.type_as(self.scale), k.type_as(self.scale))
        bias = q.to(F32) @ k.to(dtype=torch.float).transpose(-1, -2)
        return (scores + bias).softmax(-1) @ v


class Exact(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.proj = nn.Linear(dim, 2 * dim)

    def forward(self, x, ref):
        q, k = self.proj(x).chunk(2, dim=-1)
        loose = q.type_as(ref) @ k.type_as(ref).transpose(-1, -2)
        with torch.autocast("cuda", enabled=False):
            exact = torch.einsum("bid,bjd->bij", q.float(), k.float())
        return loose, exact


def train(loader):
    model = RelativeBias(64, 4).cuda()
    exact = Exact(64).cuda()
    opt = torch.optim.AdamW(list(model.parameters()) + list(exact.parameters()), lr=1e-4)
    scaler = torch.amp.GradScaler("cuda")
    for x, y in loader:
        with torch.autocast("cuda", dtype=torch.float16):
            out = model(x)
            loose, tight = exact(x, y)
            promoted = torch.tensordot(out.float(), y.float(), dims=2)
            loss = (out - y).pow(2).mean() + loose.mean() + tight.mean() + promoted
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        opt.zero_grad()


def cpu_features(a, b):
    with torch.autocast("cpu", dtype=torch.bfloat16):
        return torch.tensordot(a.float(), b.float(), dims=([1], [0]))
