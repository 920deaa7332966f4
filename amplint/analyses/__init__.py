"""Fact families beside the semantic core: each a class built from a file's `SemanticModel`
on first use, and kept for the file (ruff's `analyze/`, Fixit's metadata dependencies).

    restore = model.facts(Checkpoints).restored_before(record, scaler)

- `checkpoints.Checkpoints`: where optimizers' and scalers' state is saved and restored;
- `repetition.Repetitions`: which loops run a call again each iteration;
- `precision.Precision`: module casts, optimizers and what they train, in-place averages
  (its parts: `module_paths`, `module_casts`, `optimizers`, `averages`, `precision_facts`,
  `low_precision`, `adapters`, `loss_feeds`, `parameter_casts`);
- `devices.Devices`: where code places tensors, and what an autocast region is gated on;
- `region_ops.RegionOps`: the ops evaluated under autocast and what their inputs are;
- `deprecations.Deprecations`: uses of the deprecated per-device AMP API;
- `training.Training`: whether gradients reach an optimizer and scaling serves a step;
- `sharding.Sharding`: where a model is sharded with FSDP, and helpers that return one;
- `held_scalers.HeldScalers`: GradScalers an instance of a class keeps on an attribute;
- `lowered_values.LoweredValues`: which expressions hold a value autocast lowered, per device
  and dtype;
- `float16_hazards.Float16Hazards`: the float16 hazards on those values (AMP020-AMP023), per
  function and context, for the file's own regions and, through the project's ambient pass
  (`amplint.project.ambient`), other files'.

An analysis imports the semantic core (and other analyses), never the other way round;
`tests/test_layers.py` checks it. `rules/README.md` says when a fact belongs here.

A family whose facts another module needs (an EMA class defined in one module, constructed
with a float16 model in another) exports them into the module's summary: a `SUMMARY_KEY` and
a classmethod `export(model, path)` (`amplint.project.summary.ExportsFacts`), and a place in
`EXPORTING`, which `amplint.project.summary.export_summary` writes. The importing side reads them back
with `model.exported_facts(func, scope, SUMMARY_KEY)`.
"""

from amplint.analyses.precision import Precision
from amplint.analyses.held_scalers import HeldScalers
from amplint.analyses.sharding import Sharding

# The fact families whose facts cross modules, in the order they are exported.
EXPORTING = (Precision, Sharding, HeldScalers)
