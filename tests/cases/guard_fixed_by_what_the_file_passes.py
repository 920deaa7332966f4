"""Guards the file's own values decide: accumulation over `self.accum` steps where every
construction leaves `accum` at 1 (the unscale and the update run every iteration), an update
flag every call passes True, and a step helper handed a GradScaler built disabled by every
call (its clip is on gradients nothing scaled)."""
import torch


class Trainer:
    def __init__(self, model, optimizer, accum=1):
        self.model = model
        self.optimizer = optimizer
        self.accum = accum
        self.scaler = torch.amp.GradScaler("cuda")

    def step(self, loss, update=False):
        self.scaler.step(self.optimizer)
        if update:
            self.scaler.update()

    def fit(self, loader):
        for i, (x, y) in enumerate(loader):
            with torch.autocast("cuda"):
                loss = self.model(x, y) / self.accum
            self.scaler.scale(loss).backward()
            self.scaler.unscale_(self.optimizer)
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)
            if (i + 1) % self.accum == 0:
                self.step(loss, update=True)
                self.optimizer.zero_grad()


def train_step(model, x, y, optimizer, scaler):
    with torch.autocast("cuda", dtype=torch.bfloat16):
        loss = model(x, y)
    scaler.scale(loss).backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    scaler.step(optimizer)
    scaler.update()


def main(model, loader, optimizer):
    trainer = Trainer(model, optimizer)
    trainer.fit(loader)
    scaler = torch.amp.GradScaler("cuda", enabled=False)
    for x, y in loader:
        train_step(model, x, y, optimizer, scaler)
