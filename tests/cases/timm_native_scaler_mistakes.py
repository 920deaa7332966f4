# Mistakes around timm's NativeScaler: called inside the autocast region (its backward and
# its optimizer step run under autocast), and the gradients of a held-back micro-batch
# (update_grad=False: scaled, not unscaled) clipped by hand.
import torch
from timm.utils import NativeScaler


def train(model, loader, optimizer, loss_fn):
    loss_scaler = NativeScaler()
    for input, target in loader:
        with torch.autocast("cuda", dtype=torch.float16):
            loss = loss_fn(model(input), target)
            loss_scaler(loss, optimizer, parameters=model.parameters())
        optimizer.zero_grad()


def train_accumulating(model, loader, optimizer, loss_fn, accum_iter):
    loss_scaler = NativeScaler()
    for step, (input, target) in enumerate(loader):
        with torch.autocast("cuda", dtype=torch.float16):
            loss = loss_fn(model(input), target)
        if (step + 1) % accum_iter != 0:
            loss_scaler(loss / accum_iter, optimizer, update_grad=False)
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            continue
        loss_scaler(loss / accum_iter, optimizer, clip_grad=1.0, parameters=model.parameters())
        optimizer.zero_grad()
