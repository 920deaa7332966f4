# Devices chosen at run time: on CUDA, autocast's default dtype is float16.
import torch

device = torch.device("cuda" if torch.cuda.is_available() else "cpu")


def train(model, loader, opt):
    for x, y in loader:
        with torch.autocast(device_type=str(device)):
            loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad()


def train_type(model, loader, opt):
    for x, y in loader:
        with torch.autocast(device.type):
            loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad()


class Runner:
    def __init__(self, model, opt, fp16):
        if fp16:
            dtype = torch.float16
        else:
            dtype = torch.bfloat16
        self.model, self.opt = model, opt
        self.amp = torch.autocast("cuda", dtype=dtype)

    def step(self, x):
        with self.amp:
            loss = self.model(x).mean()
        loss.backward()
        self.opt.step()


def train_disabled_scaler(model, loader, opt):
    scaler = torch.amp.GradScaler("cuda", enabled=False)
    for x in loader:
        with torch.autocast("cuda"):
            loss = model(x).mean()
        scaler.scale(loss).backward()  # a disabled scaler's scale() is the identity
        scaler.step(opt)
        scaler.update()


def train_unknown_device(model, loader, opt, args):
    for x in loader:
        with torch.autocast(device_type=args.device):
            loss = model(x).mean()
        loss.backward()
        opt.step()
