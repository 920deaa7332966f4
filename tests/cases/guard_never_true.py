"""A trainer's step updates the scaler only `if update:`, a parameter that defaults to False
and that no call of the file passes: the update never runs, and the second step raises."""
import torch


class Trainer:
    def __init__(self, model, optimizer):
        self.model = model
        self.optimizer = optimizer
        self.scaler = torch.amp.GradScaler("cuda")

    def step(self, loss, update=False):
        self.scaler.scale(loss).backward()
        self.scaler.step(self.optimizer)
        if update:
            self.scaler.update()
        self.optimizer.zero_grad()

    def fit(self, loader):
        for x, y in loader:
            with torch.autocast("cuda"):
                loss = self.model(x, y)
            self.step(loss)
