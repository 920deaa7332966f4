"""Where modules' parameters are cast, which optimizers train them, and which copies are
averaged in place: the precision facts that live outside autocast (a fact family:
`Precision`), and what they add up to (a module trained or averaged in low precision).

The family's parts, each in its module:
- `module_paths`: which module a name is (paths through aliases, parameters, pipelines);
- `module_casts`: casts of modules, pipelines and copies (`ModuleCast`);
- `optimizers`: optimizer constructions, what they train, and master weights (`OptimizerBuild`);
- `averages`: in-place averages, an EMA's update (`InPlaceAverage`);
- `precision_facts`: the one pass that finds them all, and what the queries read (`FoundPrecision`);
- `low_precision`: the casts paired with an optimizer or an average, unless undone or frozen;
- `adapters`: adapters created on a cast module, or re-created when a run resumes;
- `loss_feeds`: what a loss is computed from (`modules_feeding`, `trained_module_feeds`);
- `parameter_casts`: functions that leave a module they are handed cast, across modules;
- what may run after a call is the core's (`amplint.semantic.Successors`).

Here: the family itself and what crosses modules through its summary (`SUMMARY_KEY`): the
classes of a module that keep a copy of a module they are handed and decay it in place (an
EMA class: `exported_averages`), and the instances built here of such classes of other modules
(`ForeignAverage`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, FrozenSet, Iterator, List, Optional, Set, Tuple

import libcst as cst

from amplint.analyses import loss_feeds, parameter_casts
from amplint.analyses.averages import InPlaceAverage, assigns_data_of, decayed_paths, decaying_update, iterates_state
from amplint.analyses.low_precision import averaged_in, copied_after, direct_first, trained_in, undone
from amplint.analyses.module_casts import ModuleCast, copied
from amplint.analyses.module_paths import ModulePath, guard_facts, nested
from amplint.analyses.optimizers import OptimizerBuild
from amplint.analyses.precision_facts import FoundPrecision
from amplint.semantic import Binding, CallRecord, CodeUnit, Scope, SemanticModel, dotted_name, iter_tree, names_bound, passed_for, source_text


@dataclass(frozen=True, eq=False)
class ForeignAverage:
    """An instance of another module's class built from a cast module, where that class keeps
    a copy of the module it is handed and a method of it decays the copy in place: `ema =
    ModelEMA(model)` after `model.half()`, with `ModelEMA` of `utils.py` (its summary's
    `precision` facts: `exported_averages`). Also an instance of such a class of this file
    whose copy is cast from outside the class (`ema.ema.half()`)."""

    # The construction, which inherits the cast of the module handed to it; or a cast of the
    # copy after the construction (`ema.ema.half()`).
    cast: ModuleCast
    class_name: str  # `ModelEMA`
    where: str  # the class's file and line: `utils.py:12`, or `line 12` in this file
    attribute: str  # where the class keeps the copy: `self.ema`
    copy: str  # the copy, quoted: "`deepcopy(de_parallel(model))`"
    update: str  # the decay, quoted: "`v *= d`"
    methods: FrozenSet[str]  # the methods that run the decay: `update`
    instance: FrozenSet[ModulePath]  # what the instance is (the variable the construction fills)
    construction: CallRecord  # `ModelEMA(model)`


class Precision(FoundPrecision):
    """Casts of modules, optimizer constructions and what they train, in-place averages, and
    the low-precision training they add up to: `model.facts(Precision)`."""

    def __init__(self, model: SemanticModel) -> None:
        super().__init__(model)
        self._foreign: Optional[List[ForeignAverage]] = None

    @classmethod
    def export(cls, model: SemanticModel, path: str) -> Dict[str, Any]:
        """What another module needs to know of this one's classes and functions:
        `exported_averages`, and `parameter_casts.exported_parameter_casts`."""
        exported = exported_averages(model)
        casts = model.facts(Precision).casts
        if casts:
            exported.update(parameter_casts.exported_parameter_casts(model, casts))
        return exported

    @property
    def foreign_averages(self) -> List[ForeignAverage]:
        """The instances of other modules' averaging classes built here from a cast module,
        and of this file's whose copy is cast after they are built (`ema.ema.half()`): none
        without a cast in the file (no summary is looked up)."""
        if self._foreign is None:
            self._foreign = _foreign_averages(self) if self.casts else []
        return self._foreign

    def averaged_elsewhere_in_low_precision(self, dtype: str = "float16") -> Iterator[Tuple[ForeignAverage, CallRecord]]:
        """Instances of another module's averaging class built from a module that may be cast to
        `dtype` (the copy the class keeps has that dtype), each with the call of this file that
        then runs the class's in-place decay on it: `ema = ModelEMA(model)` after
        `model.half()`, then `ema.update(model)`. Not when the construction may come before
        the cast, the module is cast back to float32 first, or the instance (or the copy it
        keeps) is cast after it. And a cast of the copy itself after the construction
        (`ema.ema.half()`), which the decay then runs after."""
        done: Set[int] = set()
        for average in self.foreign_averages:
            cast = average.cast
            if dtype not in cast.dtypes or id(cast.node) in done or not copied_after(self, cast):
                continue
            if cast.inherits is None and not any(r.node is cast.node for r in self.successors.calls_after(average.construction)):
                continue  # the copy cast before it is made: another object
            after = self.successors.calls_after(cast.record)
            if undone(self, cast, after):
                continue
            update = next((record for record in after if self._runs_on(record, average)), None)
            if update is not None:
                done.add(id(cast.node))
                yield average, update

    def _runs_on(self, record: CallRecord, average: ForeignAverage) -> bool:
        """Whether `record` calls a method of `average`'s instance that runs its decay."""
        func = record.node.func
        if not isinstance(func, cst.Attribute) or func.attr.value not in average.methods:
            return False
        receiver = dotted_name(func.value)
        return receiver is not None and bool(self.finder.paths(receiver, record.unit.scope) & average.instance)

    def trained_by(self, optimizer: str) -> FrozenSet[ModulePath]:
        """`loss_feeds.trained_by`."""
        return loss_feeds.trained_by(self, optimizer)

    def modules_feeding(self, tensor: cst.BaseExpression, unit: CodeUnit) -> FrozenSet[ModulePath]:
        """`loss_feeds.modules_feeding`."""
        return loss_feeds.modules_feeding(self, tensor, unit)

    def trained_module_feeds(self, tensor: cst.BaseExpression, unit: CodeUnit, optimizer: str) -> bool:
        """`loss_feeds.trained_module_feeds`."""
        return loss_feeds.trained_module_feeds(self, tensor, unit, optimizer)

    def trained_in_low_precision(self, dtype: str = "float16") -> Iterator[Tuple[ModuleCast, OptimizerBuild]]:
        """Casts that may cast a module to `dtype` (`model.half()`, `unet.to(dtype=weight_dtype)`),
        each with an optimizer that then trains the module's parameters in that dtype: it holds
        them on a way the cast can take (their branch conditions do not contradict), nothing
        that may keep float32 master weights takes it (apex, DeepSpeed, accelerate), it is
        built or some optimizer steps after the cast, and nothing after the cast casts the
        module back to float32 or hands it to code that may (adapters, `cast_training_params`)."""
        return direct_first(trained_in(self, dtype))

    def averaged_in_low_precision(self, dtype: str = "float16") -> Iterator[Tuple[ModuleCast, InPlaceAverage]]:
        """Casts that may cast a module to `dtype` whose parameters a loop that runs after the
        cast decays in place: an EMA kept in that dtype (`ema = deepcopy(model).half()`,
        then `e.mul_(d).add_(p, alpha=1 - d)`)."""
        return direct_first(averaged_in(self, dtype))


# --------------------------------------------------------------------------- across modules


def exported_averages(model: SemanticModel) -> Dict[str, Any]:
    """The module's top-level classes whose `__init__` keeps a copy of a module it is handed,
    and decays that copy in place in a method (an EMA: `self.ema = deepcopy(model)`, then
    `e.mul_(d).add_(p, alpha=1 - d)`; `{n: p.detach().clone() for n, p in
    model.named_parameters()}`), for the modules that construct one: the copy has the dtype of
    the module handed to it there. Each class -> its line and, for each such copy: the
    parameter (and its position after `self`), the attribute, the copy and the decay as
    written, and the methods that run the decay. Not a copy cast here (`deepcopy(model).float()`,
    `self.ema.half()`, a loop that assigns each parameter anew), nor an attribute set more than
    once: its dtype is not simply the one it is handed."""
    index = model.index
    module_scope = index.module_scope
    candidates: List[Tuple[Scope, str, Binding]] = []
    for scope in index.scopes:
        if scope.kind != "class" or scope.parent is not module_scope:
            continue
        for attribute, bindings in scope.attributes.items():
            if len(bindings) != 1:
                continue
            binding = bindings[0]
            home = binding.home
            if binding.kind == "assign" and binding.value is not None and home is not None and home.name == f"{scope.name}.__init__" and _may_copy(binding.value):
                candidates.append((scope, attribute, binding))
    if not candidates:
        return {}
    precision = model.facts(Precision)
    finder = precision.finder
    found: Dict[str, Any] = {}
    for scope, attribute, binding in candidates:
        init = binding.value_scope
        copy = copied(finder, binding.value)
        if copy is None or not isinstance(init.node, cst.FunctionDef):
            continue
        node, _, source, _ = copy
        parts = source.split(".")
        param = parts[0]
        if param == "self" or param not in init.params or any(b.kind != "param" for b in init.bindings.get(param, ())):
            continue
        own = finder.paths(attribute, init)
        if any(nested(path, mine) for cast in finder.facts.casts for path in cast.paths for mine in own):
            continue  # cast in this module: its own dtype (a float16 one is reported here)
        decays = _decays_of(precision, scope, attribute, own)
        if not decays:
            continue
        positional = [p.name.value for p in (*init.node.params.posonly_params, *init.node.params.params)]
        position = positional.index(param) - 1 if param in positional and positional[:1] == ["self"] else None
        copy = f"`{source_text(binding.value)}`" if isinstance(node, cst.Call) else f"copies of `{source}`'s tensors"
        entry = found.setdefault(scope.name, {"line": model.index.top_level_line(scope.node), "averages": [], "words": []})
        methods = _running(model, scope, {unit.name.rsplit(".", 1)[-1] for unit, _ in decays})
        update = f"`{source_text(decays[0][1])}`"
        entry["averages"].append(
            {
                "param": param,
                "position": position,
                "path": [part for part in parts[1:] if part != "module"],
                "attribute": attribute,
                "copy": copy,
                "update": update,
                "methods": sorted(methods),
            }
        )
        entry["words"].append(update)
    return found


def _may_copy(value: cst.BaseExpression) -> bool:
    """Whether a value may copy a module or its tensors (before asking `module_casts.copied`): a
    `deepcopy(...)`, or a comprehension over a module's parameters or state."""
    if isinstance(value, (cst.DictComp, cst.ListComp)):
        return iterates_state(value.for_in.iter)
    return any(isinstance(node, cst.Call) and (dotted_name(node.func) or "").rsplit(".", 1)[-1] == "deepcopy" for node in iter_tree(value))


def _decays_of(precision: Precision, scope: Scope, attribute: str, own: Set[ModulePath]) -> List[Tuple[CodeUnit, cst.CSTNode]]:
    """The loops of the class's methods that decay the copy `attribute` in place (with the
    method), none if one assigns its parameters anew (`p.data = p.data.float()`)."""
    finder = precision.finder
    found: List[Tuple[CodeUnit, cst.CSTNode]] = []
    for unit, loop, _ in precision.model.index.loops:
        if unit.class_name != scope.name or not isinstance(loop, cst.For):
            continue
        # Over a module's parameters or state (what the pre-check's AVERAGE mark sees: a module
        # that exports this has it, `evidence.EXPORTS`).
        if not iterates_state(loop.iter):
            continue
        if any(assigns_data_of(node, names_bound(loop.target)) for node in iter_tree(loop.body)):
            if any(nested(path, mine) for path in finder.state_owners(loop.iter, unit.scope) for mine in own):
                return []
        update = decaying_update(loop.body)
        if update is not None and any(nested(path, mine) for path in decayed_paths(finder, loop, update[1], unit.scope) for mine in own):
            found.append((unit, update[0]))
    return found


def _running(model: SemanticModel, scope: Scope, methods: Set[str]) -> Set[str]:
    """`methods` of a class and the methods that call one of them on `self` (timm's `update`,
    which calls `self.apply_update_(model, decay)`)."""
    found = set(methods)
    units = [unit for unit in model.units if unit.class_name == scope.name and unit.name.startswith(scope.name + ".")]
    changed = True
    while changed:
        changed = False
        for unit in units:
            method = unit.name.rsplit(".", 1)[-1]
            if method in found or method == "__init__":
                continue
            for record in unit.calls:
                func = record.node.func
                if isinstance(func, cst.Attribute) and func.attr.value in found and dotted_name(func.value) == "self":
                    found.add(method)
                    changed = True
                    break
    return found


def _foreign_averages(precision: Precision) -> List[ForeignAverage]:
    """Each construction here of another linted module's averaging class (its summary's
    `precision` facts) whose copy a cast of this file may cast: the module handed to it, cast
    before (a cast of the copy that inherits that cast, at the construction), or the copy
    itself, cast after it (`ema.ema.half()`, `ema.half()`: that cast). Only calls of capitalised
    names are asked about."""
    model = precision.model
    finder = precision.finder
    originals = [cast for cast in finder.facts.casts if cast.inherits is None and cast.dtypes]
    found: List[ForeignAverage] = []
    if not originals:
        return found
    local: Optional[Dict[str, Any]] = None  # this file's averaging classes, read once
    for record in model.index.calls:
        func = record.node.func
        last = func.value if isinstance(func, cst.Name) else func.attr.value if isinstance(func, cst.Attribute) else ""
        if not record.immediate or not last[:1].isupper():
            continue
        binding = finder.assigned.get(id(record.node))
        if binding is None:
            continue
        exported = model.exported_facts(func, record.unit.scope, Precision.SUMMARY_KEY) if model.external is not None else None
        own = exported is None and isinstance(func, cst.Name) and func.value in model.index.classes
        if own:
            # A class of this file: only a cast of the copy it keeps, from outside it, is new
            # here (a module cast before it is handed over is `averaged_in_low_precision`'s).
            local = exported_averages(model) if local is None else local
            exported = (func.value, "this file", local[func.value]) if func.value in local else None
        if exported is None:
            continue
        qualified, origin, facts = exported
        instance = frozenset(finder.paths(binding.name, binding.value_scope))
        for average in facts.get("averages", ()) if isinstance(facts, dict) else ():
            kept = tuple(part for part in str(average.get("attribute", "")).split(".")[1:] if part != "module")
            paths = frozenset((key, rest + kept) for key, rest in instance)

            def foreign(cast: ModuleCast) -> ForeignAverage:
                return ForeignAverage(
                    cast,
                    qualified,
                    (f"line {facts.get('line')}" if own else f"{origin}:{facts.get('line')}") if facts.get("line") else origin,
                    str(average.get("attribute")),
                    str(average.get("copy")),
                    str(average.get("update")),
                    frozenset(average.get("methods", ())),
                    instance,
                    record,
                )

            for cast in originals:
                if any(cast.covers(path) for path in paths):
                    found.append(foreign(cast))  # the copy, cast itself (whether after the construction is asked later)
            if own:
                continue
            source = finder.module_source(passed_for(record.node, average.get("param"), average.get("position")))
            if source is None:
                continue
            suffix = tuple(average.get("path", ()))
            sources = {(key, rest + suffix) for key, rest in finder.paths(source, record.unit.scope)}
            for cast in originals:
                if any(cast.covers(path) for path in sources):
                    found.append(foreign(ModuleCast(record.node, record, cast.dtypes, binding.name, paths, source, guard_facts(record), cast)))
    return found
