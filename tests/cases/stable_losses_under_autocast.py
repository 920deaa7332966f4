"""Losses under autocast that stay finite: the with-logits forms, guards float16 can hold,
log(softmax) where softmax runs in float32 (CUDA), a sigmoid of float32 logits, bfloat16
regions for log(sigmoid), binary_cross_entropy under CPU autocast, a BPR loss whose scores
autocast makes float32, and logs of things that are no probabilities."""

import torch
import torch.nn.functional as F


def train_step(model, x, y, t, optimizer, scaler, alphas_cumprod):
    with torch.autocast("cuda", dtype=torch.float16):
        logits = model(x)
        bce = F.binary_cross_entropy_with_logits(logits, y)
        log_p = F.logsigmoid(logits)
        log_not_p = F.logsigmoid(-logits)
        ce = F.nll_loss(F.log_softmax(logits, dim=-1), t)
        # On CUDA softmax autocasts to float32: no worse than in float32.
        kl = (F.softmax(logits, -1) * torch.log(F.softmax(logits, -1))).sum(-1).mean()
        # Guards float16 can hold.
        p = torch.sigmoid(logits)
        guarded = -(y * torch.log(p.clamp(min=1e-4)) + (1 - y) * torch.log((1 - p).clamp(min=1e-4))).mean()
        # Computed from float32 logits.
        p32 = torch.sigmoid(logits.float())
        hand32 = -(y * torch.log(p32) + (1 - y) * torch.log(1 - p32)).mean()
        # Not probabilities from a sigmoid.
        schedule = torch.log(1.0 - alphas_cumprod)
        loss = bce + log_p.mean() + log_not_p.mean() + ce + kl + guarded + hand32 + schedule.mean()
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()


def bf16_step(model, x, optimizer):
    with torch.autocast("cuda", dtype=torch.bfloat16):
        # bfloat16 has float32's range: a sigmoid does not underflow at ordinary logits.
        loss = -torch.log(torch.sigmoid(model(x))).mean()
    loss.backward()
    optimizer.step()


def cpu_step(model, x, y, optimizer):
    with torch.autocast("cpu", dtype=torch.bfloat16):
        # CPU autocast runs binary_cross_entropy in float32; only CUDA's raises.
        loss = F.binary_cross_entropy(torch.sigmoid(model(x)), y)
    loss.backward()
    optimizer.step()


def bpr_step(user_embedding, item_embedding, users, positives, negatives, optimizer, scaler):
    with torch.autocast("cuda", dtype=torch.float16):
        u = user_embedding(users)
        # `sum` autocasts to float32 on CUDA: the scores, and their sigmoid, are float32.
        pos = torch.mul(u, item_embedding(positives)).sum(dim=1)
        neg = torch.mul(u, item_embedding(negatives)).sum(dim=1)
        loss = -torch.log(torch.sigmoid(pos - neg) + 1e-10).mean()
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
