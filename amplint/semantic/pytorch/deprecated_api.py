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
# The first torch release with each replacement, by every name a fix may write: a rewrite is
# safe only for a project whose oldest supported torch has it. `torch.autocast` came in 1.10,
# its `torch.amp` spelling in 1.12; `torch.amp.GradScaler` in 2.3; `torch.amp.custom_fwd` and
# `custom_bwd` (with `device_type`) in 2.4, the release that deprecated the old names.
SINCE = {
    "torch.autocast": (1, 10),
    "torch.amp.autocast": (1, 12),
    "torch.amp.autocast_mode.autocast": (1, 12),
    "torch.amp.GradScaler": (2, 3),
    "torch.amp.grad_scaler.GradScaler": (2, 3),
    "torch.amp.custom_fwd": (2, 4),
    "torch.amp.autocast_mode.custom_fwd": (2, 4),
    "torch.amp.custom_bwd": (2, 4),
    "torch.amp.autocast_mode.custom_bwd": (2, 4),
}
# The first release where calling the old names raises a FutureWarning: a project whose
# declared torch never reaches it sees no warning (AMP014 reports nothing there).
WARNS_SINCE = (2, 4)
# Deprecated names no older than their replacement: code that calls them already needs that
# torch, so rewriting them never raises what it needs (`torch.cpu.amp.GradScaler` came in 2.3,
# together with `torch.amp.GradScaler`).
DEPRECATED_SINCE = {
    "torch.cpu.amp.GradScaler": (2, 3),
    "torch.cpu.amp.grad_scaler.GradScaler": (2, 3),
}
