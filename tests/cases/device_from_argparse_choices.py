import argparse

import torch

parser = argparse.ArgumentParser()
parser.add_argument("--device", default="cuda", choices=["cuda", "cpu", "mps"])
parser.add_argument("--gpu_or_cpu", default="cuda", choices=["cuda", "cpu"])
parser.add_argument("--any_device", default="cuda")
parser.add_argument("--backend", default="auto", choices=["auto", "cuda", "mps"])
args = parser.parse_args()


def train_may_be_mps(model, loader, optimizer):
    # `--device mps` runs the model on MPS, where a CUDA autocast changes nothing.
    device = torch.device(args.device)
    model.to(device)
    for x, y in loader:
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(x.to(device), y.to(device))
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()


def train_follows_the_choice(model, loader, optimizer):
    device = torch.device(args.device)
    model.to(device)
    for x, y in loader:
        with torch.autocast(device.type, dtype=torch.bfloat16):
            loss = model(x.to(device), y.to(device))
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()


def train_cuda_or_cpu(model, loader, optimizer):
    # The CPU is the fallback of a machine without a GPU: not flagged.
    model.to(args.gpu_or_cpu)
    for x, y in loader:
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(x.to(args.gpu_or_cpu), y.to(args.gpu_or_cpu))
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()


def train_unknown(model, loader, optimizer):
    # No `choices`: any device, unknown; "auto" is no device name: unknown too.
    model.to(args.any_device)
    for x, y in loader:
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(x.to(args.any_device), y.to(args.backend))
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()


def train_on_the_accelerators_device(model, loader, optimizer):
    # `accelerator.device` is accelerate's choice, not the `--device` option: unknown.
    from accelerate import Accelerator

    accelerator = Accelerator()
    model.to(accelerator.device)
    for x, y in loader:
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(x.to(accelerator.device), y.to(accelerator.device))
        accelerator.backward(loss)
        optimizer.step()
        optimizer.zero_grad()


def main(args):
    # A parameter named `args` holds the parsed options.
    model = torch.nn.Linear(4, 4).to(args.device)
    with torch.autocast("cuda", dtype=torch.bfloat16):
        return model(torch.ones(4, device=args.device))


def benchmark_on_cuda(model):
    # Leaves first unless the option chose CUDA: the region runs on CUDA only.
    if args.device != "cuda":
        return None
    with torch.autocast("cuda", dtype=torch.bfloat16):
        return model(torch.ones(4, device=args.device))


def train_amp(model, args):
    # Called only where the option chose CUDA (below).
    model.to(args.device)
    with torch.autocast("cuda", dtype=torch.bfloat16):
        return model(torch.ones(4, device=args.device))


if __name__ == "__main__":
    if args.device == "cuda":
        train_amp(torch.nn.Linear(4, 4), args)
