"""The same script done right, the ways real code does it: an optional scaler, the checkpoint
dict built over several statements, a save helper of the file handed the scaler, the
scaler's state restored only when there is one."""
import argparse
import os

import torch
import torch.nn as nn

parser = argparse.ArgumentParser()
parser.add_argument("--epochs", type=int, default=100)
parser.add_argument("--amp", action="store_true")
parser.add_argument("--resume", default="")
args = parser.parse_args()


def build(args):
    model = nn.Linear(128, 10).cuda()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    scaler = torch.amp.GradScaler("cuda") if args.amp else None
    return model, optimizer, scaler


def save_checkpoint(path, epoch, model, optimizer, loss_scaler=None):
    state = {"epoch": epoch, "model": model.state_dict()}
    state["optimizer"] = optimizer.state_dict()
    if loss_scaler is not None:
        state["scaler"] = loss_scaler.state_dict()
    torch.save(state, path)


def main():
    model, optimizer, scaler = build(args)
    start_epoch = 0
    if args.resume:
        ckpt = torch.load(args.resume, map_location="cpu")
        model.load_state_dict(ckpt["model"])
        optimizer.load_state_dict(ckpt["optimizer"])
        if scaler is not None and "scaler" in ckpt:
            scaler.load_state_dict(ckpt["scaler"])
        start_epoch = ckpt["epoch"] + 1
    for epoch in range(start_epoch, args.epochs):
        for x, y in loader:
            optimizer.zero_grad(set_to_none=True)
            with torch.autocast("cuda", dtype=torch.float16, enabled=scaler is not None):
                loss = nn.functional.cross_entropy(model(x.cuda()), y.cuda())
            if scaler is not None:
                scaler.scale(loss).backward()
                scaler.step(optimizer)
                scaler.update()
            else:
                loss.backward()
                optimizer.step()
        save_checkpoint(os.path.join("runs", "last.pt"), epoch, model, optimizer, loss_scaler=scaler)


if __name__ == "__main__":
    main()
