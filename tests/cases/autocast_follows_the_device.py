"""Autocast regions that match where the code runs, or say they are meant for CUDA only."""
import pytest
import torch
import torch.nn as nn

device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
use_amp = torch.cuda.is_available()
cpu_device = torch.device("cpu")


def train_step(model, images, labels, optimizer, scaler):
    with torch.autocast(device_type=device.type, dtype=torch.bfloat16):
        loss = nn.functional.cross_entropy(model(images.to(device)), labels.to(device))
    loss.backward()
    optimizer.step()


def train_step_cuda_only(model, images, labels, optimizer, scaler):
    with torch.cuda.amp.autocast(enabled=use_amp):
        loss = nn.functional.cross_entropy(model(images.to(device)), labels.to(device))
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()


def predict(model, images):
    if device.type == "cuda":
        with torch.autocast("cuda"):
            return model(images.to(device))
    return model(images.to(device))


def gpu_only_script(model, loader, args):
    model = model.cuda()
    for images, _ in loader:
        with torch.autocast("cuda"):
            out = model(images.cuda(non_blocking=True))
        outputs.append(out.to(cpu_device))
    other = Net().to(args.device)
    with torch.autocast("cuda"):
        other(images.to(args.device))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="requires CUDA")
def test_autocast_matmul():
    a = torch.randn(4, 4, device=device)
    with torch.autocast("cuda"):
        assert (a @ a).dtype == torch.float16
