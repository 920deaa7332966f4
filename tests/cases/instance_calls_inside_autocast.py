# Objects whose calls do the training step, called inside the autocast region: a callable
# class's `__call__` (backward and step under autocast), and an nn.Module's `forward` reached
# as `self.head(...)`, built in `__init__`, that steps its own optimizer.
import torch
from torch import nn


class TrainStep:
    def __init__(self, optimizer):
        self.optimizer = optimizer

    def __call__(self, loss):
        loss.backward()
        self.optimizer.step()
        self.optimizer.zero_grad()


def train(model, loader, optimizer):
    train_step = TrainStep(optimizer)
    for x, y in loader:
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(x).sum()
            train_step(loss)


class SelfTrainingHead(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.proj = nn.Linear(dim, dim)
        self.optimizer = torch.optim.SGD(self.proj.parameters(), lr=0.1)

    def forward(self, x):
        loss = self.proj(x).pow(2).mean()
        loss.backward()
        self.optimizer.step()
        return loss


class Wrapper(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.head = SelfTrainingHead(dim).to("cuda")

    def run(self, loader):
        for x in loader:
            with torch.autocast("cuda", dtype=torch.bfloat16):
                self.head(x)
