import torch
from torch.nn.utils import clip_grad_norm_


class Trainer:
    def __init__(self, model, optimizer, grad_clip):
        self.model = model
        self.optimizer = optimizer
        self.grad_clip = grad_clip
        self.scaler = torch.amp.GradScaler("cuda")

    def _run_batch(self, source, targets):
        self.optimizer.zero_grad(set_to_none=True)
        with torch.autocast(device_type="cuda", dtype=torch.float16):
            _, loss = self.model(source, targets)
        self.scaler.scale(loss).backward()
        clip_grad_norm_(self.model.parameters(), self.grad_clip)
        self.scaler.step(self.optimizer)
        self.scaler.update()
        return loss.item()
