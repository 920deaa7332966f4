"""Version shims by the spellings real projects use, and the tests that are not shims."""
import functools

import torch
from packaging.version import Version

_TORCH_GE_2_4 = Version(torch.__version__) >= Version("2.4")


def is_torch_min_version(version):
    return Version(torch.__version__) >= Version(version)


def torch_has_new_amp():
    return Version(torch.__version__.split("+")[0]) >= Version("2.4")


if is_torch_min_version("2.4.0a0"):
    custom_fwd = functools.partial(torch.amp.custom_fwd, device_type="cuda")
    custom_bwd = functools.partial(torch.amp.custom_bwd, device_type="cuda")
else:
    custom_fwd = torch.cuda.amp.custom_fwd
    custom_bwd = torch.cuda.amp.custom_bwd

if not hasattr(torch.amp, "custom_fwd"):
    torch.amp.custom_fwd = torch.cuda.amp.custom_fwd


def make_scaler(enabled):
    if torch_has_new_amp():
        return torch.amp.GradScaler("cuda", enabled=enabled)
    return torch.cuda.amp.GradScaler(enabled=enabled)


def autocast_for(dtype):
    return torch.autocast("cuda", dtype=dtype) if _TORCH_GE_2_4 else torch.cuda.amp.autocast(dtype=dtype)


def log_images(pl_module, batch):
    if hasattr(pl_module, "log_images"):  # not about torch: the old API below is a use
        with torch.cuda.amp.autocast():
            return pl_module.log_images(batch)


def train_step(model, x, use_torch_amp):
    if use_torch_amp:  # a setting, not a version: a use
        scaler = torch.cuda.amp.GradScaler()
        return scaler
