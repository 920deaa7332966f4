"""Several optimizers and one GradScaler, done right in each way real trainers write it: one
update after the loop over the optimizers; the update held back until the last optimizer
(`idx is None or idx == last`, the default meaning "the only one"); a loop over one
optimizer; a GradScaler per optimizer drawn with it; networks trained on alternate
iterations."""
import torch

scaler = torch.amp.GradScaler("cuda")
optimizers = [opt_g, opt_d]

for x in loader:
    for i, optimizer in enumerate(optimizers):
        with torch.autocast("cuda"):
            loss = losses[i](x)
        scaler.scale(loss).backward()
        scaler.step(optimizer)
    scaler.update()

for x in loader:
    for optimizer in [optimizer_main]:
        with torch.autocast("cuda"):
            loss = model(x)
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()

scalers = [torch.amp.GradScaler("cuda") for _ in optimizers]
for x in loader:
    for optimizer, own_scaler, loss_fn in zip(optimizers, scalers, losses):
        with torch.autocast("cuda"):
            loss = loss_fn(x)
        own_scaler.scale(loss).backward()
        own_scaler.step(optimizer)
        own_scaler.update()

for step, x in enumerate(loader):
    for i, optimizer in enumerate(optimizers):
        if step % len(optimizers) != i:
            continue
        with torch.autocast("cuda"):
            loss = losses[i](x)
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()


class Trainer:
    def __init__(self, optimizers):
        self.optimizers = optimizers
        self.scaler = torch.amp.GradScaler("cuda")

    def optimizer_step(self, optimizer, idx=None):
        self.scaler.step(optimizer)
        if idx is None or idx == len(self.optimizers) - 1:
            self.scaler.update()
        optimizer.zero_grad()

    def fit(self, loader):
        for batch in loader:
            for idx, optimizer in enumerate(self.optimizers):
                with torch.autocast("cuda"):
                    loss = self.loss(batch, idx)
                self.scaler.scale(loss).backward()
                self.optimizer_step(optimizer, idx)
