"""Clipping the scaled gradients at a threshold scaled the same way clips them right."""
import torch

scaler = torch.amp.GradScaler("cuda")
for x, y in loader:
    with torch.autocast("cuda"):
        loss = criterion(model(x), y)
    scaler.scale(loss).backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm * scaler.get_scale())
    scaler.step(optimizer)
    scaler.update()
    optimizer.zero_grad()


def step(model, loss, optimizer, scaler, clip):
    scaler.scale(loss).backward()
    threshold = clip * scaler.get_scale()
    torch.nn.utils.clip_grad_value_(model.parameters(), clip_value=threshold)
    scaler.step(optimizer)
    scaler.update()
