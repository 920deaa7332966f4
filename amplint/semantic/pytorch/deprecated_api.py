"""The deprecated per-device AMP API and what replaces it: data from PyTorch.

`torch.cuda.amp.*` and `torch.cpu.amp.*` raise a FutureWarning when called; `torch.amp.*`
takes the device type instead. Finding the uses is `amplint.analyses.deprecations`.
"""

from __future__ import annotations

# deprecated name -> (its replacement in torch.amp, the device type it implied, the kind)
DEPRECATED = {
    "torch.cuda.amp.autocast": ("torch.amp.autocast", "cuda", "autocast"),
    "torch.cuda.amp.autocast_mode.autocast": ("torch.amp.autocast", "cuda", "autocast"),
    "torch.cpu.amp.autocast": ("torch.amp.autocast", "cpu", "autocast"),
    "torch.cpu.amp.autocast_mode.autocast": ("torch.amp.autocast", "cpu", "autocast"),
    "torch.cuda.amp.GradScaler": ("torch.amp.GradScaler", "cuda", "scaler"),
    "torch.cuda.amp.grad_scaler.GradScaler": ("torch.amp.GradScaler", "cuda", "scaler"),
    "torch.cpu.amp.GradScaler": ("torch.amp.GradScaler", "cpu", "scaler"),
    "torch.cpu.amp.grad_scaler.GradScaler": ("torch.amp.GradScaler", "cpu", "scaler"),
    "torch.cuda.amp.custom_fwd": ("torch.amp.custom_fwd", "cuda", "custom_fwd"),
    "torch.cuda.amp.autocast_mode.custom_fwd": ("torch.amp.custom_fwd", "cuda", "custom_fwd"),
    "torch.cuda.amp.custom_bwd": ("torch.amp.custom_bwd", "cuda", "custom_bwd"),
    "torch.cuda.amp.autocast_mode.custom_bwd": ("torch.amp.custom_bwd", "cuda", "custom_bwd"),
}
# Names that are the replacement (or the same class under another path).
SAME_AS = {
    "torch.amp.autocast": ("torch.amp.autocast", "torch.autocast", "torch.amp.autocast_mode.autocast"),
    "torch.amp.GradScaler": ("torch.amp.GradScaler", "torch.amp.grad_scaler.GradScaler"),
    "torch.amp.custom_fwd": ("torch.amp.custom_fwd", "torch.amp.autocast_mode.custom_fwd"),
    "torch.amp.custom_bwd": ("torch.amp.custom_bwd", "torch.amp.autocast_mode.custom_bwd"),
}
# The old autocast's positional parameters; the new one takes (device_type, dtype, enabled, cache_enabled).
LEGACY_AUTOCAST_PARAMETERS = ("enabled", "dtype", "cache_enabled")
