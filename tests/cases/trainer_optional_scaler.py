import torch
from torch.cuda.amp import GradScaler, autocast


class Trainer:
    def __init__(self, model, optimizer, use_amp, max_grad_norm=1.0):
        self.model = model
        self.optimizer = optimizer
        self.scaler = GradScaler() if use_amp else None
        self.max_grad_norm = max_grad_norm

    def train_step(self, batch):
        self.optimizer.zero_grad()
        with autocast(enabled=self.scaler is not None):
            loss = self.model(**batch).loss
        if self.scaler is not None:
            self.scaler.scale(loss).backward()
            self.scaler.unscale_(self.optimizer)
        else:
            loss.backward()
        if self.max_grad_norm:
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.max_grad_norm)
        if self.scaler is not None:
            self.scaler.step(self.optimizer)
            self.scaler.update()
        else:
            self.optimizer.step()
        return loss.detach()
