"""Where a file shards a model with FSDP's first API (a fact family: `Sharding`).

`FullyShardedDataParallel(module, ...)` leaves each rank a flat shard of every gradient, so a
plain GradScaler's inf/NaN check sees one shard (AMP017). A wrap counts when it shards: not
`sharding_strategy=ShardingStrategy.NO_SHARD` (every rank holds everything), and not a
`MixedPrecision(param_dtype=torch.bfloat16)` policy (bfloat16 has float32's range: a scale
of 65536 overflows nothing). A helper that returns such a wrap (`def shard_model(m): return
FSDP(m, ...)`) is exported in the module's summary, so that its call in another module
(`model = shard_model(model)`) counts as the wrap there.
"""

from __future__ import annotations

from typing import Any, Dict, Optional

import libcst as cst

from amplint.semantic import (
    Analysis,
    CallRecord,
    CodeUnit,
    SemanticModel,
    dotted_name,
    keyword_argument,
    own_returns,
    source_text,
)

# FSDP's first API: each rank holds a flat shard of the parameters and of their gradients,
# as plain tensors.
FSDP = frozenset(
    {
        "torch.distributed.fsdp.FullyShardedDataParallel",
        "torch.distributed.fsdp.fully_sharded_data_parallel.FullyShardedDataParallel",
    }
)


class Sharding(Analysis):
    """`model.facts(Sharding).wraps(record)`: whether a call shards a model with FSDP."""

    SUMMARY_KEY = "sharding"

    def wraps(self, record: CallRecord) -> bool:
        """A `FullyShardedDataParallel(module, ...)` call that shards, or a call of another
        linted module's function that returns one (`shard_model(model)`)."""
        return shards(record.node, self.model) or self.foreign_wrap(record) is not None

    def foreign_wrap(self, record: CallRecord) -> Optional[str]:
        """The file of another linted module whose function, called here, returns a sharding
        wrap; None when the call is no such function."""
        if self.model.external is None:
            return None
        found = self.model.exported_facts(record.node.func, record.unit.scope, self.SUMMARY_KEY)
        return found[1] if found is not None else None

    @classmethod
    def export(cls, model: SemanticModel, path: str) -> Dict[str, Any]:
        """The module's top-level functions that return a sharding wrap of what they are
        handed (`return FSDP(module, ...)`, or a variable every value of which is one): each ->
        its line, and the words an importer's rules look for."""
        exported: Dict[str, Any] = {}
        for unit in model.units:
            if unit.is_module or unit.scope.parent is not model.index.module_scope or not isinstance(unit.node, cst.FunctionDef):
                continue
            if any(shards(record.node, model) for record in unit.calls) and _returns_a_wrap(unit, model):
                exported[unit.node.name.value] = {"line": model.index.top_level_line(unit.node), "words": ["FullyShardedDataParallel"]}
        return exported


def shards(call: cst.Call, model: SemanticModel) -> bool:
    """A `FullyShardedDataParallel(module, ...)` call that shards (not `NO_SHARD`, not a
    bfloat16 `MixedPrecision` policy)."""
    if model.qualified(call.func) not in FSDP:
        return False
    strategy = keyword_argument(call, "sharding_strategy")
    if strategy is not None and source_text(strategy).endswith("NO_SHARD"):
        return False
    policy = keyword_argument(call, "mixed_precision")
    dtype = keyword_argument(policy, "param_dtype") if isinstance(policy, cst.Call) else None
    return dtype is None or model.qualified(dtype) != "torch.bfloat16"


def _returns_a_wrap(unit: CodeUnit, model: SemanticModel) -> bool:
    for node in own_returns(unit.node):
        if node.value is None:
            continue
        value = node.value
        if isinstance(value, cst.Call) and shards(value, model):
            return True
        name = dotted_name(value)
        values = model.resolver.values(name, unit.scope) if name is not None else []
        if values and all(isinstance(v, cst.Call) and shards(v, model) for v, _ in values):
            return True
    return False


