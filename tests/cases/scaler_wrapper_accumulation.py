"""A loss-scaler wrapper (timm's NativeScaler shape) that unscales and clips on every call but
steps and updates every `accum` calls: called every micro-batch, the second unscale_ raises.
Written with `if accum > 1: ... else: ...` in the loop below, the accumulation branch does
the same."""
import torch


class LossScaler:
    def __init__(self, accum):
        self.scaler = torch.amp.GradScaler("cuda")
        self.accum = accum
        self.calls = 0

    def __call__(self, loss, optimizer, parameters, clip_grad=1.0):
        self.scaler.scale(loss).backward()
        self.calls += 1
        self.scaler.unscale_(optimizer)
        torch.nn.utils.clip_grad_norm_(parameters, clip_grad)
        if self.calls % self.accum == 0:
            self.scaler.step(optimizer)
            self.scaler.update()
            optimizer.zero_grad()


loss_scaler = LossScaler(accum=4)
for x, y in loader:
    with torch.autocast("cuda"):
        loss = criterion(model(x), y) / 4
    loss_scaler(loss, optimizer, model.parameters())

scaler = torch.amp.GradScaler("cuda")
for i, (x, y) in enumerate(loader):
    with torch.autocast("cuda"):
        loss = criterion(model(x), y)
    if accum > 1:
        scaler.scale(loss / accum).backward()
        scaler.unscale_(optimizer)
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        if (i + 1) % accum == 0:
            scaler.step(optimizer)
            scaler.update()
            optimizer.zero_grad()
    else:
        scaler.scale(loss).backward()
        scaler.unscale_(optimizer)
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad()
