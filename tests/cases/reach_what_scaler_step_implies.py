# A function handed the scaler: `scaler.step(optimizer)` expects scaled gradients, so a clip
# before it with no unscale_ clips them scaled, wherever the backward ran.
import torch


def clip_and_step(model, optimizer, scaler, max_norm=1.0):
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    scaler.step(optimizer)
    scaler.update()


def unscale_clip_and_step(model, optimizer, scaler, max_norm=1.0):
    scaler.unscale_(optimizer)
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    scaler.step(optimizer)
    scaler.update()


def clip_then_step(model, optimizer, grad_scaler):
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    grad_scaler.step(optimizer)


def caller_unscales_first(model, optimizer, batch):
    scaler = torch.amp.GradScaler("cuda")
    with torch.autocast("cuda"):
        loss = model(batch)
    scaler.scale(loss).backward()
    scaler.unscale_(optimizer)
    clip_then_step(model, optimizer, scaler)
