"""Autocast objects built in one place and entered in another: every one is used."""
import contextlib
import functools

import torch
from torch.amp import autocast


def build_context(args):
    if args.amp:
        return torch.autocast("cuda", dtype=torch.float16)
    return contextlib.nullcontext()


def train(model, loader, optimizer, scaler, args):
    amp_context = torch.autocast("cuda", dtype=torch.float16, enabled=args.amp)
    for images, targets in loader:
        with amp_context:
            loss = torch.nn.functional.cross_entropy(model(images), targets)
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad()


def train_with_stack(model, loader, optimizer, scaler):
    for images, targets in loader:
        with contextlib.ExitStack() as stack:
            ctx = autocast("cuda")
            stack.enter_context(ctx)
            loss = model(images).mean()
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()


class Runner:
    def __init__(self, model, dtype):
        self.model = model
        self.autocast = torch.autocast("cuda", dtype=dtype)
        self.forward = torch.autocast("cuda", dtype=dtype)(model.forward)
        self.contexts = [torch.autocast("cuda"), torch.autocast("cpu")]

    def run(self, batch):
        with self.autocast:
            return self.model(batch)


@torch.autocast("cuda", dtype=torch.float16)
def forward(model, batch):
    return model(batch)


bf16_autocast = functools.partial(torch.autocast, "cuda", dtype=torch.bfloat16)


def manual(model, batch):
    ctx = torch.autocast("cuda")
    ctx.__enter__()
    try:
        return model(batch)
    finally:
        ctx.__exit__(None, None, None)


def handed_on(model, batch):
    ctx = torch.autocast("cuda")
    return run_under(ctx, model, batch)
