"""Float32 islands that stay float32 under autocast, and casts that are no islands."""

import torch
import torch.nn.functional as F


def gram(features):
    with torch.autocast(device_type=features.device.type, enabled=False):
        f = features.float()
        return f.transpose(1, 2) @ f / f.shape[1]


def step(model, x, target, optimizer, scaler, style_weight):
    with torch.autocast("cuda", dtype=torch.float16):
        features = model(x)
        style = F.mse_loss(gram(features), gram(target))
        # A float32 product autocast leaves alone: `dot` promotes to the widest input.
        energy = torch.dot(features.flatten().float(), features.flatten().float())
        # Inside a nested region switched off.
        with torch.autocast("cuda", enabled=False):
            sim = torch.einsum("bnd,bmd->bnm", features.float(), target.float())
        loss = style_weight * style + sim.mean() * 0 + energy * 0
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
    optimizer.zero_grad()


def evaluate(model, x, labels):
    with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16):
        logits = model(x)
        one_hot = F.one_hot(labels, logits.shape[-1])
        # An integer one-hot made float to multiply: one cast, no island.
        picked = torch.bmm(one_hot.float()[:, None, :], logits[:, :, None])
    return picked.float().mean()


@torch.autocast("cuda", dtype=torch.float32)
def reference_scores(q, k):
    # autocast with dtype=float32 switches autocast off (PyTorch warns and disables it).
    return q.float() @ k.float().T
