"""A multi-label classifier whose loss is written by hand from probabilities under float16
autocast: the logs of `sigmoid` and `1 - sigmoid` reach log(0) at ordinary logits, and
`binary_cross_entropy` raises on CUDA. A focal loss helper called inside the region guards
with an epsilon that float16 rounds to 0."""

import torch
import torch.nn as nn
import torch.nn.functional as F

EPS = 1e-8


def focal_loss(logits, targets, gamma=2.0):
    p = torch.sigmoid(logits)
    pos = -targets * (1 - p) ** gamma * torch.log(p + EPS)
    neg = -(1 - targets) * p ** gamma * torch.log(1 - p + EPS)
    return (pos + neg).mean()


def safe_focal_loss(logits, targets, gamma=2.0):
    ce = F.binary_cross_entropy_with_logits(logits, targets, reduction="none")
    p = torch.sigmoid(logits)
    p_t = p * targets + (1 - p) * (1 - targets)
    return (ce * (1 - p_t) ** gamma).mean()


class Trainer:
    def __init__(self, model, lr):
        self.model = model
        self.optimizer = torch.optim.SGD(model.parameters(), lr=lr)
        self.scaler = torch.cuda.amp.GradScaler()
        self.criterion = nn.BCELoss()

    def step(self, x, y, use_focal):
        self.optimizer.zero_grad()
        with torch.cuda.amp.autocast():
            logits = self.model(x)
            if use_focal:
                loss = focal_loss(logits, y) + safe_focal_loss(logits, y)
            else:
                probs = torch.sigmoid(logits)
                loss = -(y * torch.log(probs) + (1 - y) * torch.log(1 - probs)).mean()
                loss = loss + self.criterion(probs, y)
        self.scaler.scale(loss).backward()
        self.scaler.step(self.optimizer)
        self.scaler.update()
        return loss.item()
