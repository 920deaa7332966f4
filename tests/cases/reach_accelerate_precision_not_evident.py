# Without float16 evident in the code (bf16, or chosen at launch), nothing is assumed.
import torch
from accelerate import Accelerator


def train_bf16(model, optimizer, loader):
    accelerator = Accelerator(mixed_precision="bf16")
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    for batch in loader:
        loss = model(**batch).loss
        accelerator.backward(loss)
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad()


def train_configured(model, optimizer, loader, args):
    accelerator = Accelerator(mixed_precision=args.mixed_precision)
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    for batch in loader:
        loss = model(**batch).loss
        accelerator.backward(loss)
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad()
