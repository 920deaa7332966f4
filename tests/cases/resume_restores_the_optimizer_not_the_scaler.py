"""The checkpoint holds the scaler's state, but --resume restores only the model and the
optimizer: the resumed run starts again at scale 65536."""
import argparse

import torch

parser = argparse.ArgumentParser()
parser.add_argument("--resume", default="")
args = parser.parse_args()

scaler = torch.amp.GradScaler("cuda")
start = 0
if args.resume:
    ckpt = torch.load(args.resume, map_location="cpu")
    model.load_state_dict(ckpt["model"])
    optimizer.load_state_dict(ckpt["optimizer"])
    start = ckpt["epoch"] + 1
for epoch in range(start, 100):
    for x, y in loader:
        with torch.autocast("cuda"):
            loss = criterion(model(x), y)
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad()
    torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(), "scaler": scaler.state_dict(), "epoch": epoch}, "last.pt")
