"""The amplint rules: one module per rule, registered here in code order."""

from amplint.rules.amp001_unscaled_backward import UnscaledBackward
from amplint.rules.amp002_fp16_without_scaler import Fp16WithoutScaler
from amplint.rules.amp003_clip_before_unscale import ClipBeforeUnscale
from amplint.rules.amp004_step_inside_autocast import StepInsideAutocast
from amplint.rules.amp005_scaled_loss_plain_step import ScaledLossPlainStep
from amplint.rules.amp006_backward_inside_autocast import BackwardInsideAutocast
from amplint.rules.amp007_scaler_state_not_checkpointed import ScalerStateNotCheckpointed
from amplint.rules.amp008_grad_scaler_in_loop import GradScalerInLoop
from amplint.rules.amp009_scaled_gradients_read import ScaledGradientsRead
from amplint.rules.amp010_half_precision_master_weights import HalfPrecisionMasterWeights
from amplint.rules.amp011_autocast_device_mismatch import AutocastDeviceMismatch
from amplint.rules.amp012_float32_island_undone import Float32IslandUndone
from amplint.rules.amp013_unsafe_log_under_autocast import UnsafeLogUnderAutocast
from amplint.rules.amp014_deprecated_amp_api import DeprecatedAmpApi
from amplint.rules.amp015_scaler_update_missing import ScalerUpdateMissing
from amplint.rules.amp016_autocast_never_entered import AutocastNeverEntered
from amplint.rules.amp017_fsdp_plain_grad_scaler import FsdpPlainGradScaler
from amplint.rules.amp018_scaler_updated_twice import ScalerUpdatedTwice
from amplint.rules.amp019_scaled_loss_reported import ScaledLossReported
from amplint.rules.amp020_fill_overflows_float16 import FillOverflowsFloat16
from amplint.rules.amp021_constant_rounds_to_infinity import ConstantRoundsToInfinity
from amplint.rules.amp022_epsilon_rounded_away import EpsilonRoundedAway
from amplint.rules.amp023_lowered_write_into_float32 import LoweredWriteIntoFloat32
from amplint.rules.amp100_unused_noqa import UnusedNoqa

ALL_RULES = (
    UnscaledBackward,
    Fp16WithoutScaler,
    ClipBeforeUnscale,
    StepInsideAutocast,
    ScaledLossPlainStep,
    BackwardInsideAutocast,
    ScalerStateNotCheckpointed,
    GradScalerInLoop,
    ScaledGradientsRead,
    HalfPrecisionMasterWeights,
    AutocastDeviceMismatch,
    Float32IslandUndone,
    UnsafeLogUnderAutocast,
    DeprecatedAmpApi,
    ScalerUpdateMissing,
    AutocastNeverEntered,
    FsdpPlainGradScaler,
    ScalerUpdatedTwice,
    ScaledLossReported,
    FillOverflowsFloat16,
    ConstantRoundsToInfinity,
    EpsilonRoundedAway,
    LoweredWriteIntoFloat32,
    UnusedNoqa,  # runs after the others: it reads which `# noqa` they used
)

__all__ = ["ALL_RULES"]
