# Helpers summarised by everything they do, in order, with their parameters mapped to the
# caller's arguments.
import torch
from torch.nn.utils import clip_grad_norm_


class StepAlsoUnscales:
    def __init__(self, model, optimizer):
        self.model, self.optimizer = model, optimizer
        self.scaler = torch.amp.GradScaler("cuda")

    def step_optimizer(self):
        self.scaler.unscale_(self.optimizer)
        clip_grad_norm_(self.model.parameters(), 1.0)
        self.scaler.step(self.optimizer)
        self.scaler.update()

    def train(self, batch):
        with torch.autocast("cuda"):
            loss = self.model(batch)
        loss.backward()  # the scaler steps, but this loss was never scaled
        self.step_optimizer()

    def train_right(self, batch):
        with torch.autocast("cuda"):
            loss = self.model(batch)
        self.scaler.scale(loss).backward()
        self.step_optimizer()


def apply_step(s, opt):
    s.step(opt)
    s.update()


def train(model, loader, opt):
    scaler = torch.amp.GradScaler("cuda")
    for x in loader:
        with torch.autocast("cuda"):
            loss = model(x)
        loss.backward()  # stepped through `apply_step(scaler, opt)`: never scaled
        apply_step(scaler, opt)


def train_without_amp(model, loader, opt):
    off = torch.amp.GradScaler("cuda", enabled=False)
    for x in loader:
        loss = model(x)
        loss.backward()
        apply_step(off, opt)
