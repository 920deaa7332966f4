"""The amplint rules: one module per rule, registered here in code order."""

from amplint.rules.amp001_unscaled_backward import UnscaledBackward
from amplint.rules.amp002_fp16_without_scaler import Fp16WithoutScaler
from amplint.rules.amp003_clip_before_unscale import ClipBeforeUnscale
from amplint.rules.amp004_step_inside_autocast import StepInsideAutocast
from amplint.rules.amp005_scaled_loss_plain_step import ScaledLossPlainStep
from amplint.rules.amp006_backward_inside_autocast import BackwardInsideAutocast
from amplint.rules.amp009_scaled_gradients_read import ScaledGradientsRead
from amplint.rules.amp012_float32_island_undone import Float32IslandUndone
from amplint.rules.amp013_unsafe_log_under_autocast import UnsafeLogUnderAutocast

ALL_RULES = (
    UnscaledBackward,
    Fp16WithoutScaler,
    ClipBeforeUnscale,
    StepInsideAutocast,
    ScaledLossPlainStep,
    BackwardInsideAutocast,
    ScaledGradientsRead,
    Float32IslandUndone,
    UnsafeLogUnderAutocast,
)

__all__ = ["ALL_RULES"]
