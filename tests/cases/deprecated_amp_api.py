"""The per-device AMP API as older PyTorch examples wrote it: every use warns (FutureWarning)."""
import functools

from torch.cuda import amp
from torch.cuda.amp import GradScaler, autocast, custom_bwd, custom_fwd
from torch.autograd import Function


class ScaledMatmul(Function):
    @staticmethod
    @custom_fwd(cast_inputs=torch.float32)
    def forward(ctx, a, b):
        ctx.save_for_backward(a, b)
        return a @ b

    @staticmethod
    @custom_bwd
    def backward(ctx, grad):
        a, b = ctx.saved_tensors
        return grad @ b.t(), a.t() @ grad


class Trainer:
    def __init__(self, model, optimizer, use_amp):
        self.model, self.optimizer = model, optimizer
        self.scaler = GradScaler(enabled=use_amp)
        self.autocast = functools.partial(amp.autocast, enabled=use_amp)

    def step(self, x, y):
        with autocast(True, torch.float16):
            loss = loss_fn(self.model(x), y)
        self.scaler.scale(loss).backward()
        self.scaler.step(self.optimizer)
        self.scaler.update()


def cpu_inference(model, x):
    import torch

    with torch.cpu.amp.autocast():
        return model(x)
