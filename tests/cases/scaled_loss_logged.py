"""The scaled loss kept under the loss's name and then logged, accumulated, compared and
returned: each reports the loss scale times the loss."""
import torch

scaler = torch.amp.GradScaler("cuda")


def train_one_epoch(model, loader, optimizer, writer, best):
    running_loss = 0.0
    for step, (x, y) in enumerate(loader):
        with torch.autocast("cuda"):
            loss = criterion(model(x), y)
        loss = scaler.scale(loss)
        loss.backward()
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad()
        running_loss += loss.item()
        writer.add_scalar("train/loss", loss, step)
        if loss < best:
            best = loss
    return running_loss / len(loader)


def train_step(model, batch, optimizer):
    with torch.autocast("cuda"):
        loss = model(batch)
    scaled = scaler.scale(loss)
    scaled.backward()
    scaler.step(optimizer)
    scaler.update()
    return scaled
