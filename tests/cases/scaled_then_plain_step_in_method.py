import torch


class Engine:
    def __init__(self, model, optimizer):
        self.model = model
        self.optimizer = optimizer
        self.grad_scaler = torch.amp.GradScaler("cuda")

    def step(self, batch):
        with torch.autocast("cuda"):
            loss = self.model(batch)
        self.grad_scaler.scale(loss).backward()
        self.optimizer.step()
        self.optimizer.zero_grad()
