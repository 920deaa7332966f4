"""The scaled loss goes into its backward only: straight, through accumulation, a finiteness
check and a framework's backward; the loss logged is the unscaled one; a helper returns the
scaled loss to its caller's backward."""
import torch

scaler = torch.amp.GradScaler("cuda")


def scale(loss):
    return scaler.scale(loss)


def train_one_epoch(model, loader, optimizer, accum):
    running_loss = 0.0
    for step, (x, y) in enumerate(loader):
        with torch.autocast("cuda"):
            loss = criterion(model(x), y)
        scaled = scaler.scale(loss)
        if not torch.isfinite(scaled):
            continue
        (scaled / accum).backward()
        if (step + 1) % accum == 0:
            scaler.step(optimizer)
            scaler.update()
            optimizer.zero_grad()
        running_loss += loss.item()
        scale(loss.detach()).backward()
    return running_loss
