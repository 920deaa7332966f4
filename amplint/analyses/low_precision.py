"""What the casts add up to: a module trained or averaged in low precision.

A cast that may cast a module to a dtype (`model.half()`, `unet.to(dtype=weight_dtype)`) is
paired with an optimizer that then trains the module's parameters in that dtype, or with a
loop that then decays them in place (an EMA kept in that dtype): the optimizer holds them on
a way the cast can take, nothing that may keep float32 master weights takes it, it is built
or some optimizer steps after the cast (what may run after it: `Successors`), and nothing
after the cast casts the module back to float32 or hands it to code that may (adapters,
`cast_training_params`; `adapters`). A frozen module that nothing makes trainable again is
trained by no optimizer (diffusers freezes the unet it casts to `weight_dtype`).
"""

from __future__ import annotations

from dataclasses import replace
from typing import FrozenSet, Iterator, List, Optional, Tuple

import libcst as cst

from amplint import work
from amplint.analyses.adapters import adapter_effect, adapter_entry
from amplint.analyses.averages import InPlaceAverage
from amplint.analyses.module_casts import ModuleCast
from amplint.analyses.module_paths import ModulePath, contradicts, guard_facts, handed_modules, module_chain, nested
from amplint.analyses.optimizers import OptimizerBuild
from amplint.analyses.precision_facts import FoundPrecision, PrecisionFacts, PrecisionFinder
from amplint.semantic import CallRecord, Successors, calls_within, dotted_name, names_read, roots, split_args
from amplint.semantic.pytorch import vocabulary
from amplint.semantic.pytorch.api import MODULE_CHAIN


def trained_in(precision: FoundPrecision, dtype: str) -> Iterator[Tuple[ModuleCast, OptimizerBuild]]:
    """Casts that may cast a module to `dtype`, each with an optimizer that then trains its
    parameters in that dtype (see `Precision.trained_in_low_precision`)."""
    facts: PrecisionFacts = precision.found
    optimizers = [o for o in facts.optimizers if o.wrapped_by is None and o.trains]
    for cast in facts.casts:
        if dtype not in cast.dtypes or not copied_after(precision, cast):
            continue
        candidates = [
            optimizer
            for optimizer in optimizers
            if any(
                cast.covers(path) and not contradicts(cast.facts, held | optimizer.facts)
                for path, ways in optimizer.trains.items()
                for held in ways
            )
        ]
        if not candidates:
            continue
        after = precision.successors.calls_after(cast.record)
        if cast.held:
            # A pipeline's cast casts each module it holds: one trained module not cast back
            # is enough (a text encoder cast back to float32 undoes nothing for the unet).
            trained = [path for optimizer in candidates for path in optimizer.trains]
            own = frozenset(p for p in cast.paths if p not in cast.held)
            kept = [
                path
                for path in cast.held
                if any(nested(path, t) for t in trained) and not undone(precision, cast, after, own | {path})
            ]
            if not kept:
                continue
            cast = replace(cast, held={kept[0]: cast.held[kept[0]]})
        elif undone(precision, cast, after) or frozen_untrained(precision, cast, candidates):
            continue
        ids = {id(r.node) for r in after}
        steps = any(_is_step(precision.model.classify(r)) for r in after)
        for optimizer in candidates:
            if (id(optimizer.node) in ids or steps) and not _fresh_object(precision, cast, optimizer):
                yield cast, optimizer
                break


def averaged_in(precision: FoundPrecision, dtype: str) -> Iterator[Tuple[ModuleCast, InPlaceAverage]]:
    """Casts that may cast a module to `dtype` whose parameters a loop then decays in place
    (an EMA kept in that dtype)."""
    facts: PrecisionFacts = precision.found
    for cast in facts.casts:
        if dtype not in cast.dtypes:
            continue
        averages = [a for a in facts.averages if cast.covers(a.module)]
        if not averages or not copied_after(precision, cast):
            continue
        after = precision.successors.calls_after(cast.record)
        if undone(precision, cast, after):
            continue
        ids = {id(r.node) for r in after}
        for average in averages:
            # The loop runs after the cast (its `.parameters()`/`.state_dict()` call does).
            if ids & precision.successors.calls_within([average.loop]):
                yield cast, average
                break


def direct_first(found: Iterator[Tuple[ModuleCast, object]]) -> Iterator[Tuple[ModuleCast, object]]:
    """One finding per mistake: a copy that inherits a cast is left out where a cast of its
    own is reported with the same optimizer or average (`self.ema = deepcopy(model)` after
    `model.half()`, then `self.ema.half()`)."""
    pairs = list(found)

    def key(other) -> int:
        return id(other.loop) if isinstance(other, InPlaceAverage) else id(other.node)

    direct = {key(other) for cast, other in pairs if cast.inherits is None}
    for cast, other in pairs:
        if cast.inherits is None or key(other) not in direct:
            yield cast, other


def copied_after(precision: FoundPrecision, cast: ModuleCast) -> bool:
    """For a copy that inherits a cast (`ema = deepcopy(model)` after `model.half()`): whether
    the copy may run after the cast it inherits, and the module is not cast back to float32
    (or to an unknown dtype) on the way; True for any other cast."""
    original = cast.inherits
    if original is None:
        return True
    after = precision.successors.calls_after(original.record)
    if not any(r.node is cast.record.node for r in after):
        return False
    ids = {id(r.node) for r in after}
    for other in precision.found.casts:
        if other.inherits is None and other is not original and id(other.node) in ids and ("float32" in other.dtypes or not other.dtypes):
            if any(other.covers(path) for path in original.paths):
                if not any(r.node is cast.record.node for r in precision.successors.calls_after(other.record)):
                    continue  # cast back only after the copy
                return False
    return True


def _trains_after(precision: FoundPrecision, record: CallRecord) -> bool:
    """Whether an optimizer is built or steps after `record`."""
    after = precision.successors.calls_after(record)
    built = {id(o.node) for o in precision.found.optimizers}
    return any(id(r.node) in built or _is_step(precision.model.classify(r)) for r in after)


def _fresh_object(precision: FoundPrecision, cast: ModuleCast, optimizer: OptimizerBuild) -> bool:
    """Whether, after the optimizer took the module's parameters, the cast variable was
    rebound to a new object before the cast: `text_encoder = load_text_encoder(...)`, then
    `text_encoder.to(weight_dtype)` for validation casts that copy, not the trained one."""
    if optimizer.unit is not cast.unit:
        return False
    finder: PrecisionFinder = precision.finder
    successors: Successors = precision.successors
    after_optimizer = successors.calls_within(successors.statements_after(optimizer.record))
    records = {id(r.node): r for r in cast.unit.calls}
    if cast.inherits is not None or not isinstance(cast.node, cst.Call) or not isinstance(cast.node.func, cst.Attribute):
        return False
    root = dotted_name(module_chain(cast.node.func.value)[1])
    if root is None:
        return False
    for binding in finder.resolver.bindings(root, cast.unit.scope):
        source = binding.source if isinstance(binding.source, cst.Call) else None
        if source is None or root in roots(names_read(source)):
            continue  # `model = model.to(device)`, `model, opt = accelerator.prepare(model, opt)`: the same module
        record = records.get(id(source))
        if record is None or id(source) not in after_optimizer:
            continue
        if id(cast.node) in successors.calls_within(successors.statements_after(record)):
            return True
    return False


def _is_step(item) -> bool:
    kind = getattr(item, "kind", None)
    return kind is not None and kind.name in ("OPTIMIZER_STEP", "SCALER_STEP")


def undone(precision: FoundPrecision, cast: ModuleCast, after: List[CallRecord], paths: Optional[FrozenSet[ModulePath]] = None) -> bool:
    """Whether, after the cast, the module (those of its `paths` that matter, all by default)
    may be cast back to float32 (`model.float()`), or handed to code that may change its
    trainable parameters' precision (adapters, upcasting helpers:
    `vocabulary.may_change_parameter_precision`)."""
    facts: PrecisionFacts = precision.found
    paths = cast.paths if paths is None else paths
    work.charge(2 * len(after))  # the calls after the cast, judged one by one below (N4)
    ids = {id(r.node) for r in after}
    for other in facts.casts:
        if other is not cast and id(other.node) in ids and ("float32" in other.dtypes or not other.dtypes):
            # not `model.bn.float()`, nor `model.float()` for saving once training is over
            if any(other.covers(path) for path in paths) and _trains_after(precision, other.record):
                return True
    # Each parameter assigned anew in a loop over the module's parameters after the cast:
    # `p.data = p.data.float()` may undo it, whatever the loop casts to.
    for loop, path in facts.reassigned:
        if any(nested(path, own) for own in paths) and ids & calls_within([loop.iter]):
            return True
    finder: PrecisionFinder = precision.finder
    for record in after:
        call = record.node
        callee = dotted_name(call.func) or ""
        if isinstance(call.func, cst.Attribute) and call.func.attr.value in MODULE_CHAIN:
            continue  # `model.bn.float()` is a cast, weighed above
        if adapter_effect(call) in ("creates", "keeps"):
            continue  # adapters in the cast dtype (see `adapters_added`), or no dtype changed
        if not vocabulary.may_change_parameter_precision(callee):
            continue
        handed = handed_modules(finder, call, record.unit.scope)
        for name in handed:
            if name is None:
                continue
            handed_paths = finder.paths(name, record.unit.scope)
            if any(root == path[0] and path[1][: len(rest)] == rest for path in handed_paths for root, rest in paths):
                if _trains_after(precision, record):
                    return True
    return False


# What may make a frozen module's parameters trainable again, or give it new ones, by name.
_UNFREEZING_FRAGMENTS = ("freeze", "trainable", "requires_grad", "grad")


def frozen_untrained(precision: FoundPrecision, cast: ModuleCast, optimizers: List[OptimizerBuild]) -> bool:
    """Whether nothing the optimizers hold of the cast module is trainable: each such module is
    frozen (`unet.requires_grad_(False)`) in the cast's function, on every way the cast takes,
    before the optimizer is built, and nothing in the file may make it trainable again
    (`requires_grad_(True)`, `p.requires_grad = True`, a helper named like `unfreeze`) or give it
    adapters (`add_adapter`, `get_peft_model`, a helper named like `add_lora`). Then the
    optimizer steps no float16 parameter: diffusers freezes the unet it casts to `weight_dtype`
    and trains only the parameters that require gradients."""
    held = [path for optimizer in optimizers for path in optimizer.trains if cast.covers(path)]
    if not held:
        return False
    finder: PrecisionFinder = precision.finder
    index = finder.index
    freezes = [
        record
        for record in index.calls_to("requires_grad_")
        if record.unit is cast.unit and _literal_false(record.node) and record.immediate and guard_facts(record) <= cast.facts
    ]
    if not freezes or _may_unfreeze(finder):
        return False
    for path in held:
        frozen = False
        for record in freezes:
            receiver = record.node.func.value if isinstance(record.node.func, cst.Attribute) else None
            name = dotted_name(receiver) if receiver is not None else None
            if name is None or not any(f[0] == path[0] and path[1][: len(f[1])] == f[1] for f in finder.paths(name, record.unit.scope)):
                continue
            after = {id(r.node) for r in precision.successors.calls_after(record)}
            if all(id(o.node) in after for o in optimizers if o.unit is cast.unit):
                frozen = True
                break
        if not frozen or _handed_away(precision, path):
            return False
    return True


def _literal_false(call: cst.Call) -> bool:
    """`requires_grad_(False)`, `requires_grad_(requires_grad=False)`."""
    positional, keywords = split_args(call.args)
    value = positional[0] if positional else keywords.get("requires_grad")
    return isinstance(value, cst.Name) and value.value == "False"


def _may_unfreeze(finder: PrecisionFinder) -> bool:
    """Whether the file may make some parameters trainable again: `requires_grad_()` or
    `requires_grad_(True)` (or anything but a literal False), `p.requires_grad = True`."""
    for record in finder.index.calls_to("requires_grad_"):
        if not _literal_false(record.node):
            return True
    for binding in finder.bindings:
        if binding.name.endswith(".requires_grad") or binding.name == "requires_grad":
            value = binding.value
            if not (isinstance(value, cst.Name) and value.value == "False"):
                return True
    return False


def _handed_away(precision: FoundPrecision, path: ModulePath) -> bool:
    """Whether a call anywhere in the file hands the module at `path` (or one containing it or
    within it) to code that may add trainable parameters or make its own trainable: an adapter
    call of the table, a helper named like one (`add_lora(unet)`), or like an unfreezing one."""
    finder: PrecisionFinder = precision.finder
    for record in finder.index.calls:
        call = record.node
        callee = dotted_name(call.func) or ""
        last = callee.rsplit(".", 1)[-1].lower()
        if adapter_effect(call) == "keeps":
            continue
        if adapter_entry(call) is None and not vocabulary.may_change_parameter_precision(callee) and not any(
            fragment in last for fragment in _UNFREEZING_FRAGMENTS
        ):
            continue
        if last == "requires_grad_":
            continue  # weighed by `_may_unfreeze`
        handed = handed_modules(finder, call, record.unit.scope)
        for name in handed:
            if name is not None and any(nested(path, other) for other in finder.paths(name, record.unit.scope)):
                return True
    return False
