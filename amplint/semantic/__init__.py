"""amplint's semantic core: what a file's mixed-precision code does, built once per file and
queried by every rule. Rules import from this package only (its `__all__`).

    model = analyze(cst.parse_module(source))

The core holds the facts two or more rules need, each part in its own module:
- `walk`: a fast read-only walk over LibCST trees;
- `names`: names as written (`dotted_name`, `source_text`, `names_read`, `names_used`);
- `index`: one walk collecting scopes, bindings, code units and every call with its context;
- `resolve`: what a name refers to, and which dtypes and devices an expression can be;
- `conditions`: what taking a branch tells about the variables it tests;
- `scalers`: which variables hold GradScalers and optimizers, and which frameworks scale;
- `regions`: autocast regions and the region each call runs in;
- `calls`: what each call is (an AMP event, a helper of the file, or nothing);
- `flow`: the order of events through each unit and helper, and the gradients' state;
- `exports`: what a module tells the modules that import it (the second phase of a run);
- `gradient_use`: what a read of `p.grad` is for (a norm, noise);
- `types`: the public types rules see (`Occurrence`, `AmpEvent`, `FlowState`, ...);
- `model`: `SemanticModel`, the query API, and `Analysis`, the base of fact families;
- `pytorch/`: PyTorch knowledge as data: the API names (`api`), autocast's op lists
  (`autocast_ops`), the deprecated per-device API (`deprecated_api`), and the naming
  conventions amplint falls back on (`vocabulary`).

Facts one rule (or one family of rules) needs live beside the core, in `amplint.analyses`,
each built on first use: `model.facts(Checkpoints)`. `rules/README.md` says where a new fact
goes.
"""

from __future__ import annotations

from amplint.semantic.index import Binding, CallRecord, CodeUnit, GuardFrame, LoopFrame, WithFrame
from amplint.semantic.model import Analysis, SemanticModel, analyze
from amplint.semantic.names import dotted_name, names_bound, names_read, roots, source_text
from amplint.semantic.resolve import KNOWN_DEVICES
from amplint.semantic.types import (
    UNKNOWN_SCALER,
    AmpEvent,
    AutocastRegion,
    EventKind,
    FlowState,
    GradientState,
    Occurrence,
    Ref,
    ScalerInfo,
)
from amplint.semantic.walk import iter_tree

__all__ = [
    "AMP_VOCABULARY",
    "KNOWN_DEVICES",
    "UNKNOWN_SCALER",
    "AmpEvent",
    "Analysis",
    "AutocastRegion",
    "Binding",
    "CallRecord",
    "CodeUnit",
    "EventKind",
    "FlowState",
    "GradientState",
    "GuardFrame",
    "LoopFrame",
    "Occurrence",
    "Ref",
    "ScalerInfo",
    "SemanticModel",
    "WithFrame",
    "analyze",
    "dotted_name",
    "iter_tree",
    "names_bound",
    "names_read",
    "roots",
    "source_text",
]

# What a file must mention for the model to find an autocast region, a GradScaler or a
# framework's loss scaling in it: a scaler is known by its construction, by `unscale_`, by
# `.scale(loss)` feeding a backward, or by `scaler.step(optimizer)`; frameworks by their
# `mixed_precision=` / `precision=` settings, a DeepSpeed config dict's float16 section,
# Hugging Face's TrainingArguments, ignite's `amp_mode=` (`amplint.semantic.pytorch.frameworks`).
AMP_VOCABULARY = (
    "autocast", "GradScaler", "unscale_", ".scale(", "caler.step(", "mixed_precision", "precision=",
    '"fp16": {', "'fp16': {", "TrainingArguments", "amp_mode",
)
