# timm/deit/mae-style training script: an optional NativeScaler built in main, handed to the
# epoch function, called on the loss (scale, backward, unscale before its clip, step,
# update), accumulation through update_grad=, and its state_dict() in the checkpoint.
import argparse

import torch
from timm.utils import NativeScaler

parser = argparse.ArgumentParser()
parser.add_argument("--amp", action="store_true")
parser.add_argument("--clip-grad", type=float, default=None)
parser.add_argument("--accum-iter", type=int, default=1)


def train_one_epoch(model, loader, optimizer, loss_fn, args, loss_scaler=None):
    amp_autocast = torch.autocast if loss_scaler is not None else torch.no_grad
    for step, (input, target) in enumerate(loader):
        with torch.autocast("cuda", dtype=torch.float16, enabled=loss_scaler is not None):
            output = model(input)
            loss = loss_fn(output, target)
        if loss_scaler is not None:
            loss_scaler(
                loss, optimizer, clip_grad=args.clip_grad, parameters=model.parameters(),
                update_grad=(step + 1) % args.accum_iter == 0,
            )
            if (step + 1) % args.accum_iter == 0:
                optimizer.zero_grad()
        else:
            loss.backward()
            if args.clip_grad is not None:
                torch.nn.utils.clip_grad_norm_(model.parameters(), args.clip_grad)
            optimizer.step()
            optimizer.zero_grad()


def main(model, loader, loss_fn):
    args = parser.parse_args()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    loss_scaler = NativeScaler() if args.amp else None
    for epoch in range(10):
        train_one_epoch(model, loader, optimizer, loss_fn, args, loss_scaler=loss_scaler)
        state = {"model": model.state_dict(), "optimizer": optimizer.state_dict(), "epoch": epoch}
        if loss_scaler is not None:
            state["scaler"] = loss_scaler.state_dict()
        torch.save(state, "checkpoint.pth")
