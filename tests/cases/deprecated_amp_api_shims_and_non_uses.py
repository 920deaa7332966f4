"""Code that mentions the deprecated AMP API without calling it, or calls it only where the
new API is missing (a compatibility shim)."""
import torch
from packaging import version

try:
    from torch.amp import GradScaler, autocast
except ImportError:  # PyTorch < 2.3
    from torch.cuda.amp import GradScaler, autocast

from torch.cuda.amp import custom_fwd  # noqa: F401  (imported, never used)

TORCH_GE_2_4 = version.parse(torch.__version__) >= version.parse("2.4")


def make_scaler(enabled):
    if version.parse(torch.__version__) >= version.parse("2.3"):
        return torch.amp.GradScaler("cuda", enabled=enabled)
    return GradScaler(enabled=enabled)


def step(model, x, scaler):
    # torch.cuda.amp.autocast() is deprecated: use torch.amp.autocast("cuda")
    with autocast("cuda", dtype=torch.float16):
        loss = model(x).sum()
    scaler.scale(loss).backward()
    assert isinstance(scaler, torch.cuda.amp.GradScaler) or "torch.cuda.amp.GradScaler" in repr(scaler)


def legacy(model, x):
    if hasattr(torch, "autocast"):
        ctx = torch.autocast("cuda")
    else:
        ctx = torch.cuda.amp.autocast()
    with ctx:
        return model(x)
