# The same loop where float16 cannot be chosen (bfloat16 or nothing), or where nothing in the
# file says what the precision is (no choices, no default): no loss scale is assumed.
import argparse

import torch
from accelerate import Accelerator


def train(accelerator, model, optimizer, loader):
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    for batch in loader:
        with accelerator.autocast():
            loss = model(**batch).loss
        accelerator.backward(loss)
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad()


def main_bf16():
    parser = argparse.ArgumentParser()
    parser.add_argument("--precision", type=str, default="no", choices=["no", "bf16"])
    args = parser.parse_args()
    train(Accelerator(mixed_precision=args.precision), *build())


def main_configured():
    parser = argparse.ArgumentParser()
    parser.add_argument("--mp", type=str)
    args = parser.parse_args()
    train(Accelerator(mixed_precision=args.mp), *build())
