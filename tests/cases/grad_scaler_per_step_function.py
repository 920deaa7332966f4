"""A training step factored into a function that builds its own GradScaler: every step gets
a new scaler at 65536, so the scale never adapts. The function is called from the epoch's
batch loop."""
import torch
import torch.nn as nn
from torch.cuda.amp import GradScaler, autocast


def train_step(model, optimizer, images, targets, use_amp=True):
    scaler = GradScaler(enabled=use_amp)
    optimizer.zero_grad()
    with autocast(enabled=use_amp):
        loss = nn.functional.cross_entropy(model(images), targets)
    scaler.scale(loss).backward()
    scaler.unscale_(optimizer)
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    scaler.step(optimizer)
    scaler.update()
    return loss.item()


def main(args):
    model = build_model(args).cuda()
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr)
    for epoch in range(args.epochs):
        model.train()
        for images, targets in train_loader:
            loss = train_step(model, optimizer, images.cuda(), targets.cuda(), use_amp=args.amp)
        print(f"epoch {epoch}: loss {loss:.4f}")
