"""A training script whose author believes it trains in mixed precision: the autocast
objects are built, but never entered."""
import torch
from torch.cuda.amp import autocast as amp_autocast


def train_one_epoch(model, loader, optimizer, scaler, use_amp):
    model.train()
    for images, targets in loader:
        optimizer.zero_grad(set_to_none=True)
        torch.autocast("cuda", dtype=torch.float16, enabled=use_amp)
        outputs = model(images)
        loss = torch.nn.functional.cross_entropy(outputs, targets)
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()


def evaluate(model, loader):
    context = torch.amp.autocast(device_type="cuda", dtype=torch.float16)
    correct = 0
    with torch.no_grad():
        for images, targets in loader:
            correct += (model(images).argmax(1) == targets).sum().item()
    return correct


def legacy_step(model, batch, optimizer):
    amp_autocast()
    loss = model(batch).mean()
    loss.backward()
    optimizer.step()


class Trainer:
    def __init__(self, model, optimizer):
        self.model = model
        self.optimizer = optimizer
        self.scaler = torch.amp.GradScaler("cuda")
        self._mixed_precision = torch.autocast("cuda", dtype=torch.bfloat16)

    def step(self, batch):
        loss = self.model(batch).mean()
        self.scaler.scale(loss).backward()
        self.scaler.step(self.optimizer)
        self.scaler.update()
