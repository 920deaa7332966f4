"""Several optimizers, each unscaled once per update in a loop over them, clipped, stepped;
and a second unscale in the other branch of an if, which never runs with the first."""
import torch

scaler = torch.amp.GradScaler("cuda")
for x, y in loader:
    with torch.autocast("cuda"):
        loss = criterion(model(x), y)
    scaler.scale(loss).backward()
    for optimizer in optimizers:
        scaler.unscale_(optimizer)
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    for optimizer in optimizers:
        scaler.step(optimizer)
    scaler.update()

for x, y in loader:
    with torch.autocast("cuda"):
        loss = criterion(model(x), y)
    scaler.scale(loss).backward()
    if clip_encoder:
        scaler.unscale_(optimizer)
        torch.nn.utils.clip_grad_norm_(model.encoder.parameters(), 1.0)
    else:
        scaler.unscale_(optimizer)
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    scaler.step(optimizer)
    scaler.update()
