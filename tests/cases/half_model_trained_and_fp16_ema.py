"""A detector trainer in the style of yolov5 before its FP32-EMA fix: the model is trained
in float16 with no master copy, and the EMA is kept in float16 too."""
import argparse
import math
from copy import deepcopy

import torch
import torch.nn as nn


class ModelEMA:
    def __init__(self, model, decay=0.9999, tau=2000, updates=0):
        self.ema = deepcopy(model).eval()
        self.ema.half()  # FP16 EMA
        self.updates = updates
        self.decay = lambda x: decay * (1 - math.exp(-x / tau))
        for p in self.ema.parameters():
            p.requires_grad_(False)

    def update(self, model):
        self.updates += 1
        d = self.decay(self.updates)
        msd = model.state_dict()
        with torch.no_grad():
            for k, v in self.ema.state_dict().items():
                if v.dtype.is_floating_point:
                    v *= d
                    v += (1 - d) * msd[k].detach()


def train(opt, device):
    model = Net().to(device)
    if opt.half:
        model.half()
    g0, g1 = [], []
    for v in model.modules():
        if hasattr(v, "bias") and isinstance(v.bias, nn.Parameter):
            g1.append(v.bias)
        if isinstance(v, nn.BatchNorm2d):
            g0.append(v.weight)
    optimizer = torch.optim.SGD(g0, lr=opt.lr, momentum=0.937, nesterov=True)
    optimizer.add_param_group({"params": g1})
    ema = ModelEMA(model)
    for epoch in range(opt.epochs):
        for imgs, targets in loader:
            imgs = imgs.to(device).half() if opt.half else imgs.to(device).float()
            loss = compute_loss(model(imgs), targets)
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()
            ema.update(model)
    torch.save({"model": deepcopy(model).half(), "ema": deepcopy(ema.ema).half()}, "last.pt")


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--half", action="store_true")
    train(parser.parse_args(), torch.device("cuda:0"))
