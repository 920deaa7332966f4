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


def backward(total_loss, scaler):
    if scaler is not None:
        scaler.scale(total_loss).backward()
    else:
        total_loss.backward()


def train_one_epoch(model, loader, optimizer, scaler):
    # The helper's `scaler is not None` is the caller's, with the argument in its place.
    for x in loader:
        with torch.autocast("cuda"):
            loss = model(x)
        backward(loss, scaler)
        if scaler is not None:
            scaler.step(optimizer)
            scaler.update()
        else:
            optimizer.step()


class TrainStep:
    @staticmethod
    def run_backward(task, loss):
        if task.amp_type == "pytorch":
            task.amp_grad_scaler.scale(loss).backward()
        else:
            loss.backward()

    @staticmethod
    def run_optimizer_step(task):
        if task.amp_type == "pytorch":
            task.amp_grad_scaler.step(task.optimizer)
            task.amp_grad_scaler.update()
        else:
            task.optimizer.step()

    def __call__(self, task, loss):
        self.run_backward(task, loss)
        self.run_optimizer_step(task)
