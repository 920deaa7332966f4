"""Clipping each sub-network separately, unscaling the one optimizer again for each (the
second `unscale_` raises); and a clip helper that unscales after the loop already did."""
import torch

scaler = torch.amp.GradScaler("cuda")


def clip(scaler, optimizer, module):
    scaler.unscale_(optimizer)
    torch.nn.utils.clip_grad_norm_(module.parameters(), 1.0)


for x, y in loader:
    with torch.autocast("cuda"):
        loss = criterion(model(x), y)
    scaler.scale(loss).backward()
    for module in [model.encoder, model.decoder]:
        scaler.unscale_(optimizer)
        torch.nn.utils.clip_grad_norm_(module.parameters(), 1.0)
    scaler.step(optimizer)
    scaler.update()
    optimizer.zero_grad()

for x, y in loader:
    with torch.autocast("cuda"):
        loss = criterion(model(x), y)
    scaler.scale(loss).backward()
    scaler.unscale_(optimizer)
    clip(scaler, optimizer, model)
    scaler.step(optimizer)
    scaler.update()
    optimizer.zero_grad()
