# accelerate owns the GradScaler when mixed_precision="fp16": its backward scales, its clip
# unscales first, and the optimizers it prepares step through the scaler.
import torch
from accelerate import Accelerator

accelerator = Accelerator(mixed_precision="fp16")


def train(model, optimizer, loader):
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    for batch in loader:
        loss = model(**batch).loss
        loss.backward()  # accelerate's scaler then steps gradients it never scaled
        optimizer.step()
        optimizer.zero_grad()


def train_clip(model, optimizer, loader):
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    for batch in loader:
        loss = model(**batch).loss
        accelerator.backward(loss)
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)  # clips scaled gradients
        optimizer.step()
        optimizer.zero_grad()


def train_right(model, optimizer, loader):
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    for batch in loader:
        loss = model(**batch).loss
        accelerator.backward(loss)
        accelerator.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad()
