# A scaler parameter beside a disabled local of the same name, self.ctx in two classes,
# a walrus-bound scaled loss, and an unscale_ done in a helper method: all correct.
import torch
from torch.nn.utils import clip_grad_norm_
from sklearn.preprocessing import MinMaxScaler


def train(model, opt, loader, scaler):
    for x in loader:
        with torch.autocast("cuda"):
            loss = model(x)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()


def debug_fp32(model):
    scaler = torch.amp.GradScaler("cuda", enabled=False)
    return scaler


class A:
    def __init__(self):
        self.ctx = torch.autocast("cuda")


class B:
    def __init__(self, model):
        self.ctx = model.no_sync()

    def step(self, loss):
        with self.ctx:
            loss.backward()


def walrus(loss, scaler, opt):
    if (s := scaler.scale(loss)) is not None:
        s.backward()
    scaler.step(opt)


class T:
    def unscale_grads(self):
        self.scaler.unscale_(self.optimizer)

    def step(self, loss):
        self.scaler.scale(loss).backward()
        self.unscale_grads()
        clip_grad_norm_(self.model.parameters(), 1.0)
        self.scaler.step(self.optimizer)
