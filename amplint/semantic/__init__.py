"""amplint's semantic core: what one file's mixed-precision code does, built once per file and
queried by every rule, analysis and summary. Everything outside the core imports it from this
package only (its `__all__`, the core's public surface), or PyTorch's data from
`amplint.semantic.pytorch`; `tests/test_layers.py` checks it.

    model = analyze(cst.parse_module(source))

The core is per-file and generic; each part in its own module:
- `walk`: a fast read-only walk over LibCST trees;
- `node_classes`: `isinstance` against LibCST's node classes without ABCMeta's slow check
  (given to the classes when the core is imported);
- `names`: names as written (`dotted_name`, `source_text`, `names_read`, `names_used`);
- `index`: one walk collecting scopes, bindings, code units and every call with its context;
- `resolve`: what a name refers to, and which dtypes and devices an expression can be;
- `conditions`: what taking a branch tells about the variables it tests;
- `scalers`: which variables hold GradScalers and optimizers, and which frameworks scale;
- `framework_settings`: whether a framework's precision settings may be float16;
- `regions`: autocast regions and the region each call runs in;
- `calls`: what each call is (an AMP event, a helper of the file, or nothing);
- `flow`: the order of events through each unit and helper, and the gradients' state, by
  the abstract `interpreter` over each unit, with `summaries` of the helpers it calls;
- `successors`: what may run after a call (read off the tree: the rest of its block, a
  loop's next iteration, the helpers it runs and their callers' next steps);
- `foreign`: what other linted modules' summaries say, read back (the project layer,
  `amplint.project`, writes them);
- `gradient_use`: what a read of `p.grad` is for (a norm, noise);
- `types`: the public types (`Occurrence`, `AmpEvent`, `FlowState`, ...);
- `model`: `SemanticModel`, the query API, and `Analysis`, the base of fact families;
- `pytorch/`: PyTorch knowledge as data: the API names (`api`), autocast's op lists
  (`autocast_ops`), the deprecated per-device API (`deprecated_api`), frameworks
  (`frameworks`), and the naming conventions amplint falls back on (`vocabulary`).

Fact families (whatever number of rules use them) live beside the core, in
`amplint.analyses`, each built on first use: `model.facts(Checkpoints)`. `rules/README.md`
says where a new fact goes.
"""

from __future__ import annotations

from amplint.semantic.node_classes import plain_checks

plain_checks()  # before any tree is read: every isinstance against a node class is cheaper

from amplint.semantic.calls import Classified, HelperCall  # noqa: E402
from amplint.semantic.conditions import Assumption, assumptions
from amplint.semantic.foreign import (
    SUMMARY_VERSION,
    ExternalModules,
    ForeignHook,
    LookupRecorder,
    import_targets,
    imported_module,
    imports_of,
    local_chain,
)
from amplint.semantic.index import (
    Binding,
    CallRecord,
    CodeUnit,
    GuardFrame,
    LoopFrame,
    ModuleIndex,
    ProductRecord,
    Scope,
    WithFrame,
    all_bindings,
    binding_key,
    values_derived_from,
)
from amplint.semantic.model import Analysis, SemanticModel, analyze
from amplint.semantic.names import dotted_name, names_bound, names_read, names_used, roots, source_text
from amplint.semantic.regions import callers_autocast
from amplint.semantic.resolve import (
    KNOWN_DEVICES,
    Resolver,
    argument,
    drawn_from,
    field_default,
    is_infinity,
    keyword_argument,
    passed_for,
    passed_for_parameter,
    split_args,
)
from amplint.semantic.framework_settings import class_scaler_key, framework_of, precisions, settings_float16
from amplint.semantic.scalers import ScalerFacts
from amplint.semantic.successors import Successors, calls_within
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
from amplint.semantic.walk import children, iter_tree, own_returns, remembered_children

__all__ = [
    # The model and what it is built from
    "analyze",
    "Analysis",
    "SemanticModel",
    "AMP_VOCABULARY",
    # What the model's queries answer with
    "AmpEvent",
    "Assumption",
    "assumptions",
    "AutocastRegion",
    "Classified",
    "EventKind",
    "FlowState",
    "GradientState",
    "HelperCall",
    "Occurrence",
    "Ref",
    "ScalerFacts",
    "ScalerInfo",
    "UNKNOWN_SCALER",
    # The index: scopes, bindings, code units, calls and where they run
    "Binding",
    "CallRecord",
    "CodeUnit",
    "GuardFrame",
    "LoopFrame",
    "ModuleIndex",
    "ProductRecord",
    "Scope",
    "WithFrame",
    "all_bindings",
    "binding_key",
    "values_derived_from",
    # What may run after a call
    "Successors",
    "calls_within",
    # Names and trees
    "children",
    "dotted_name",
    "iter_tree",
    "names_bound",
    "names_read",
    "names_used",
    "own_returns",
    "remembered_children",
    "roots",
    "source_text",
    # Values and arguments
    "KNOWN_DEVICES",
    "Resolver",
    "argument",
    "drawn_from",
    "field_default",
    "is_infinity",
    "keyword_argument",
    "passed_for",
    "passed_for_parameter",
    "split_args",
    # Scalers, frameworks and autocast
    "callers_autocast",
    "class_scaler_key",
    "framework_of",
    "precisions",
    "settings_float16",
    # Other modules' summaries, as read back
    "ExternalModules",
    "ForeignHook",
    "LookupRecorder",
    "SUMMARY_VERSION",
    "import_targets",
    "imported_module",
    "imports_of",
    "local_chain",
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
