"""detectron2's AMPTrainer before its fix: the trainer checkpoints the optimizer through its
base class's state_dict(), and the GradScaler it builds is in neither state_dict() nor
load_state_dict()."""
import torch
from torch.cuda.amp import GradScaler, autocast


class SimpleTrainer:
    def __init__(self, model, data_loader, optimizer):
        self.model = model
        self.data_loader = data_loader
        self._data_loader_iter = iter(data_loader)
        self.optimizer = optimizer

    def state_dict(self):
        return {"optimizer": self.optimizer.state_dict()}

    def load_state_dict(self, state_dict):
        self.optimizer.load_state_dict(state_dict["optimizer"])


class AMPTrainer(SimpleTrainer):
    def __init__(self, model, data_loader, optimizer, grad_scaler=None):
        super().__init__(model, data_loader, optimizer)
        if grad_scaler is None:
            grad_scaler = GradScaler()
        self.grad_scaler = grad_scaler

    def run_step(self):
        data = next(self._data_loader_iter)
        with autocast():
            loss_dict = self.model(data)
            losses = sum(loss_dict.values())
        self.optimizer.zero_grad()
        self.grad_scaler.scale(losses).backward()
        self.grad_scaler.step(self.optimizer)
        self.grad_scaler.update()
