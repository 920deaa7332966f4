# accelerate's own example layout: the precision is chosen on the command line, and "fp16" is
# one of the choices. Run with --mixed_precision fp16, the clip after accelerator.backward
# sees gradients that still carry the loss scale; accelerator.clip_grad_norm_ unscales first.
import argparse

import torch
from accelerate import Accelerator


def training_function(args, model, optimizer, loader):
    accelerator = Accelerator(cpu=args.cpu, mixed_precision=args.mixed_precision)
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    for batch in loader:
        outputs = model(**batch)
        accelerator.backward(outputs.loss)
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad()


def training_function_right(args, model, optimizer, loader):
    accelerator = Accelerator(cpu=args.cpu, mixed_precision=args.mixed_precision)
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    for batch in loader:
        with accelerator.autocast():
            outputs = model(**batch)
        accelerator.backward(outputs.loss)
        if accelerator.sync_gradients:
            accelerator.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad()


def main():
    parser = argparse.ArgumentParser(description="Simple example of training script.")
    parser.add_argument(
        "--mixed_precision",
        type=str,
        default=None,
        choices=["no", "fp16", "bf16", "fp8"],
        help="Whether to use mixed precision.",
    )
    parser.add_argument("--cpu", action="store_true", help="If passed, will train on the CPU.")
    args = parser.parse_args()
    training_function(args, *build())
    training_function_right(args, *build())
