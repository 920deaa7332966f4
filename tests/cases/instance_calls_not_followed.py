# Calls of objects whose class is not certain, or whose call does nothing for AMP: never
# followed. An instance bound twice (to two classes), a parameter, an object of a class
# that is not an nn.Module and has no `__call__` (its `forward` is not what calling it
# runs), and an nn.Module whose forward does no AMP work (the region's own rules decide).
import torch
from torch import nn


class StepA:
    def __init__(self, optimizer):
        self.optimizer = optimizer

    def __call__(self, loss):
        loss.backward()
        self.optimizer.step()


class StepB:
    def __call__(self, loss):
        return loss


class NotAModule:
    def forward(self, loss, optimizer):
        loss.backward()
        optimizer.step()


class Block(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.proj = nn.Linear(dim, dim)

    def forward(self, x):
        return self.proj(x).relu()


def train(model, loader, optimizer, fast, given_step):
    step = StepA(optimizer)
    if fast:
        step = StepB()
    other = NotAModule()
    block = Block(8)
    for x, y in loader:
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = block(model(x)).sum()
            step(loss)
            given_step(loss)
            other(loss, optimizer)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
