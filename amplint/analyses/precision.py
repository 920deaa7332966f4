"""Where modules' parameters are cast, which optimizers train them, and which copies are
averaged in place: the precision facts that live outside autocast.

- **Casts.** `model.half()`, `model.to(torch.float16)`, `unet.to(device, dtype=weight_dtype)`,
  `Net().cuda().half()`, `ema = deepcopy(model).half()`, with every dtype the cast can be
  (followed as `Resolver.dtypes` does). A module's `.half()`/`.to()` casts it in place and
  returns it, so `model.half()` anywhere casts `model`; a cast of a fresh object
  (`deepcopy(model).half()`) casts only what it is assigned to. Tensors are cast the same
  way; they matter only when an optimizer trains the variable's parameters.
- **Optimizers.** Every construction of an optimizer (`torch.optim.*`, the classes of
  `vocabulary.OPTIMIZER_CLASSES`, an `optimizer_class` variable bound to them, or a call named
  like an optimizer that is handed `.parameters()`), the modules whose parameters it holds
  (`Adam(model.parameters())`, param groups, a `params` list filled in a loop over
  `model.named_parameters()`, `chain(unet.parameters(), te.parameters()) if train_te else
  unet.parameters()`), each with the branch conditions under which it holds them, and the
  call that may keep float32 master weights for it, if any (apex's `FP16_Optimizer(opt)`,
  `model, opt = amp.initialize(...)`, `deepspeed.initialize`; not accelerate's `prepare`).
- **In-place averages.** Loops over a module's parameters or state dict that decay them in
  place (`e.mul_(d).add_(p, alpha=1 - d)`, `v *= d`, `e.lerp_(p, 1 - d)`): an EMA's update.
- **What a loss is computed from** (`modules_feeding`, `trained_module_feeds`): the modules
  whose outputs a tensor is derived from in its function (`out, aux = model(x)`, then
  `aux_loss = crit(aux, y)`), leaving out what `.detach()`/`.item()` cut off, and whether an
  optimizer variable holds one of them (AMP001: a plain backward beside a scaled one).
- **What may run after a call** (`Successors`): the statements of its unit that can execute
  after it (a `return` or `raise` ends the way, a loop runs its body again, the other branch
  of an `if` does not run).

A module is known by its path: the identity of the variable it starts from
(`Resolver.identity`) and the attributes after it (`model.encoder` is (`fn:main:model`,
`encoder`); DDP's `.module` is transparent). Paths are followed through simple aliases
(`m = model.module`, `model = DDP(model)`, `model = model.to(device)`) and parameters (what
the calls of the file pass). What cannot be followed is unknown, and unknown never pairs a
cast with an optimizer.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Callable, Collection, Dict, FrozenSet, Iterator, List, Optional, Set, Tuple

import libcst as cst

from amplint import work
from amplint.analyses import parameter_casts
from amplint.semantic.conditions import Assumption, assumptions
from amplint.semantic.index import Binding, CallRecord, CodeUnit, GuardFrame, ModuleIndex, Scope
from amplint.semantic.model import Analysis, SemanticModel
from amplint.semantic.names import dotted_name, names_bound, names_read, roots, source_text
from amplint.semantic.pytorch import vocabulary
from amplint.semantic.pytorch.api import (
    CAST_METHODS,
    DECAY_METHODS,
    MODULE_CHAIN,
    OPTIMIZER_MODULE_PREFIXES,
    PARAMETER_METHODS,
    STATE_METHODS,
)
from amplint.semantic.pytorch.frameworks import ADAPTER_CALLS, AdapterCall
from amplint.semantic.resolve import Resolver, drawn_from, passed_for, split_args
from amplint.semantic.scalers import all_bindings
from amplint.semantic.walk import children, iter_tree, own_returns

_MAX_DEPTH = 10
# `accelerator.prepare(...)`, `fabric.setup(...)`: frameworks that keep no float32 master copy.
_FRAMEWORK_PREPARE = frozenset({"prepare", "setup", "setup_optimizers"})
# What fills a list of parameters, or an optimizer: `params.append(p)`, `opt.add_param_group(g)`.
_FILLING = frozenset({"append", "extend", "insert", "add", "add_param_group"})
_COPIES = frozenset({"copy.deepcopy", "deepcopy"})
# What returns the module it is handed: `accelerator.unwrap_model(unet)`, diffusers' `unwrap_model(unet)`.
_UNWRAPPING = frozenset({"unwrap_model", "de_parallel"})
# A pipeline constructor's keywords that are no module it holds.
_PIPELINE_SETTINGS = frozenset({"torch_dtype", "dtype", "revision", "variant", "safety_checker", "cache_dir", "device_map"})


# What builds a pipeline from another one's modules, cast in place to its `torch_dtype=`.
_FROM_PIPE = frozenset({"from_pipe"})


def _builds_pipeline(func: cst.BaseExpression) -> bool:
    """`StableDiffusionPipeline(...)`, `DiffusionPipeline.from_pretrained(...)`,
    `AutoPipelineForText2Image.from_pretrained(...)`: a diffusers pipeline built from modules."""
    parts = (dotted_name(func) or "").split(".")
    return any(part[:1].isupper() and "Pipeline" in part for part in parts[-2:])

# A module's path: the identity of the variable it starts from, and the attributes after it.
ModulePath = Tuple[str, Tuple[str, ...]]


@dataclass(frozen=True, eq=False)
class ModuleCast:
    """A cast of a variable's parameters (or values) to other dtypes."""

    node: cst.BaseExpression  # the cast: `model.half()`, `unet.to(device, dtype=weight_dtype)`; or the copy
    record: CallRecord
    dtypes: FrozenSet[str]  # every dtype it can cast to; empty when unknown
    name: str  # the variable that holds the cast object, as written: `model`, `self.ema`
    paths: FrozenSet[ModulePath]  # every module path that variable can be
    copy_of: Optional[str]  # `deepcopy(model).half()`: the module copied, as written
    facts: FrozenSet[Assumption]  # the branch conditions it runs under
    # A copy made after another cast, which keeps that cast's dtypes: `ema = deepcopy(model)`
    # after `model.half()` (`node` is the copy), `{n: p.clone() for n, p in model.named_parameters()}`.
    inherits: Optional["ModuleCast"] = None
    # A pipeline's modules, which a cast of the pipeline casts: path -> the component as written.
    held: Dict[ModulePath, str] = field(default_factory=dict)
    # A call of another module's function that casts what it is handed: that cast, quoted, in its file.
    via: Optional[str] = None

    @property
    def unit(self) -> CodeUnit:
        return self.record.unit

    def covers(self, path: ModulePath) -> bool:
        """Whether the cast casts the module at `path`: it or a module containing it."""
        return any(root == path[0] and path[1][: len(rest)] == rest for root, rest in self.paths)


@dataclass(frozen=True, eq=False)
class OptimizerBuild:
    """One construction of an optimizer and the modules whose parameters it holds."""

    node: cst.Call
    record: CallRecord
    name: Optional[str]  # the variable it is bound to, as written; None when not bound
    # Each module path whose parameters it holds, with the conditions under which it holds
    # them (a branch of `chain(a, b) if train_b else a`).
    trains: Dict[ModulePath, Tuple[FrozenSet[Assumption], ...]]
    facts: FrozenSet[Assumption]  # the branch conditions it is built under
    # A call that may keep float32 master weights for it (apex, DeepSpeed), if any.
    wrapped_by: Optional[cst.Call] = None

    @property
    def unit(self) -> CodeUnit:
        return self.record.unit


@dataclass(frozen=True, eq=False)
class InPlaceAverage:
    """A loop that decays a module's parameters in place: `for e, p in zip(ema.parameters(),
    model.parameters()): e.mul_(d).add_(p, alpha=1 - d)`."""

    loop: cst.For
    unit: CodeUnit
    module: ModulePath
    update: cst.CSTNode  # the decaying call or `*=`


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


@dataclass
class PrecisionFacts:
    casts: List[ModuleCast] = field(default_factory=list)
    optimizers: List[OptimizerBuild] = field(default_factory=list)
    averages: List[InPlaceAverage] = field(default_factory=list)
    # Loops that assign each parameter of a module anew (`for p in ema.parameters(): p.data =
    # p.data.float()`): the loop and the module; its parameters may have any dtype after it.
    reassigned: List[Tuple[cst.For, ModulePath]] = field(default_factory=list)


# What a call of another module's function leaves cast: each module it passes, and the dtypes
# (`parameter_casts.call_casts`).
CallCasts = Callable[[CallRecord], List[Tuple[cst.BaseExpression, FrozenSet[str], str]]]


def find_precision(index: ModuleIndex, resolver: Resolver, call_casts: Optional[CallCasts] = None) -> "PrecisionFinder":
    return PrecisionFinder(index, resolver, call_casts)


def cast_dtypes(call: cst.Call, resolver: Resolver, scope: Scope) -> Optional[FrozenSet[str]]:
    """The dtypes a `.half()` / `.bfloat16()` / `.float()` / `.to(..., dtype)` call casts to
    (empty when unknown); None when the call is no cast (a `.to(device)`)."""
    func = call.func
    if not isinstance(func, cst.Attribute):
        return None
    method = func.attr.value
    if method in CAST_METHODS and not call.args:
        return frozenset({CAST_METHODS[method]})
    if method != "to":
        return None
    positional, keywords = split_args(call.args)
    found: FrozenSet[str] = frozenset()
    for value in positional:
        found |= resolver.dtypes(value, scope)
    if "dtype" in keywords:
        # `.to(dtype=weight_dtype)` casts even when we cannot tell to what.
        return found | resolver.dtypes(keywords["dtype"], scope)
    return found or None


def module_chain(expression: cst.BaseExpression) -> Tuple[List[cst.Call], cst.BaseExpression]:
    """`Net().to(device).half()` -> ([the .half() call, the .to() call], `Net()`)."""
    calls: List[cst.Call] = []
    while (
        isinstance(expression, cst.Call)
        and isinstance(expression.func, cst.Attribute)
        and expression.func.attr.value in MODULE_CHAIN
    ):
        calls.append(expression)
        expression = expression.func.value
    return calls, expression


def guard_facts(record: CallRecord) -> FrozenSet[Assumption]:
    """What the `if` branches around a call assume."""
    found: Set[Assumption] = set()
    for frame in record.frames:
        if isinstance(frame, GuardFrame):
            found.update(assumptions(frame.test, frame.outcome))
    return frozenset(found)


def contradicts(one: FrozenSet[Assumption], other: FrozenSet[Assumption]) -> bool:
    return any((condition, not value) in other for condition, value in one)


class PrecisionFinder:
    def __init__(self, index: ModuleIndex, resolver: Resolver, call_casts: Optional[CallCasts] = None) -> None:
        self.index = index
        self.resolver = resolver
        self.facts = PrecisionFacts()
        self.bindings = list(all_bindings(index))
        # id(call) -> the binding whose value is that call, or a module chain starting from it
        self.assigned: Dict[int, Binding] = {}
        for binding in self.bindings:
            for value in _branches(binding.value):
                if isinstance(value, cst.Call):
                    calls, root = module_chain(value)
                    for call in calls + ([root] if isinstance(root, cst.Call) else []):
                        self.assigned.setdefault(id(call), binding)
        # list or optimizer identity -> (what is appended, its scope, the branch conditions it is appended under)
        self._appended: Optional[Dict[str, List[Tuple[cst.BaseExpression, Scope, FrozenSet[Assumption]]]]] = None
        self._bound_from: Optional[Dict[int, Binding]] = None
        self._passing: Optional[Dict[str, List[CallRecord]]] = None  # see calls_passing
        self._returned: Dict[int, Set[Optional[str]]] = {}  # id(function) -> see returned
        self.parent_call: Dict[int, cst.Call] = {}
        for record in index.calls:
            for arg in record.node.args:
                self.parent_call[id(arg.value)] = record.node
        self.records: Dict[int, CallRecord] = {id(record.node): record for record in index.calls}
        for record in index.calls:
            self._cast(record)
            if call_casts is not None:
                self._call_cast(record, call_casts(record))
            self._optimizer(record)
        if self.facts.casts:
            self._copies()
            self._averages()
            self._reassigned()

    # module paths
    def paths(self, name: str, scope: Scope, depth: int = 0) -> Set[ModulePath]:
        """The module paths a dotted name read in `scope` can be: itself, what its root was
        assigned from (`m = model.module`, `model = DDP(model)`, `model = model.to(device)`)
        and, for a parameter, what the calls of the file pass for it."""
        parts = name.split(".")
        if parts[0] == "self" and len(parts) > 1:
            root, rest = "self." + parts[1], parts[2:]
        else:
            root, rest = parts[0], parts[1:]
        suffix = tuple(part for part in rest if part != "module")  # DDP's `.module` is the model
        if root == "self":
            owner = self.resolver.owning_class(scope)
            return {(f"{owner.key}:self" if owner is not None else "self", suffix)}
        found = {(self.resolver.identity(root, scope), suffix)}
        if depth > 3:
            return found
        sources = [(value, where) for value, where in self.resolver.values(root, scope)]
        sources += self.resolver.arguments_for(root, scope, constructors=True)
        for value, where in sources:
            source = self._module_source(value)
            if source is not None and (source != root or where is not scope):
                found |= {(key, inner + suffix) for key, inner in self.paths(source, where, depth + 1)}
        return found

    def _module_source(self, value: Optional[cst.BaseExpression]) -> Optional[str]:
        """The dotted name a value is the same module as: `model`, `model.module`,
        `model.to(device)`, `DDP(model)`, `torch.compile(model)`."""
        if value is None:
            return None
        if isinstance(value, cst.IfExp):
            # `model.module if is_parallel(model) else model`: one module either way (DDP's
            # `.module` is the model)
            sources = {self._module_source(branch) for branch in (value.body, value.orelse)}
            same = {".".join(part for part in source.split(".") if part != "module") if source else None for source in sources}
            return same.pop() if len(same) == 1 and None not in same else None
        _, root = module_chain(value)
        if isinstance(root, cst.Call) and root.args and (
            (self.resolver.qualified(root.func) or "").startswith("torch.")
            or (dotted_name(root.func) or "").rsplit(".", 1)[-1] in _UNWRAPPING
        ):
            # DistributedDataParallel(model), torch.compile(model), accelerator.unwrap_model(model)
            _, root = module_chain(root.args[0].value)
        return dotted_name(root)

    def held(self, name: str, scope: Scope, depth: int = 0, seen: Optional[Set[Tuple[str, int]]] = None) -> Dict[ModulePath, str]:
        """The modules a pipeline variable holds, each with its component as written: built as
        `StableDiffusionPipeline(unet=unet, ...)` or `DiffusionPipeline.from_pretrained(...,
        unet=accelerator.unwrap_model(unet))` (diffusers keeps a module it is handed as it is,
        the same object), followed through aliases and parameters."""
        found: Dict[ModulePath, str] = {}
        seen = set() if seen is None else seen
        if depth > 3 or (name, id(scope)) in seen:
            return found
        seen.add((name, id(scope)))
        for value, where in list(self.resolver.values(name, scope)) + self.resolver.arguments_for(name, scope, constructors=True):
            if value is None:
                continue
            _, root = module_chain(value)
            if isinstance(root, cst.Call) and _builds_pipeline(root.func):
                for arg in root.args:
                    module = self._module_source(arg.value) if arg.keyword is not None else None
                    if module is not None and arg.keyword.value not in _PIPELINE_SETTINGS:  # type: ignore[union-attr]
                        for path in self.paths(module, where):
                            found.setdefault(path, module)
            elif dotted_name(root) is not None:
                found.update(self.held(dotted_name(root), where, depth + 1, seen))  # type: ignore[arg-type]
        return found

    # casts
    def _cast(self, record: CallRecord) -> None:
        node = record.node
        func = node.func
        if isinstance(func, cst.Attribute) and func.attr.value in _FROM_PIPE and _builds_pipeline(func):
            self._pipe_cast(record)
            return
        if not isinstance(func, cst.Attribute) or (func.attr.value not in CAST_METHODS and func.attr.value != "to"):
            return
        scope = record.unit.scope
        dtypes = cast_dtypes(node, self.resolver, scope)
        if dtypes is None:
            return
        _, root = module_chain(func.value)
        paths: Set[ModulePath] = set()
        names: List[str] = []
        copy_of = None
        name = dotted_name(root)
        if name is not None:
            names.append(name)
            paths |= self.paths(name, scope)
        elif isinstance(root, cst.Call) and (self.resolver.qualified(root.func) or dotted_name(root.func)) in _COPIES:
            copy_of = dotted_name(root.args[0].value) if root.args else None
        binding = self.assigned.get(id(node))
        if binding is not None:
            names.append(binding.name)
            paths |= self.paths(binding.name, binding.value_scope)
        held = self.held(name, scope) if name is not None and "." not in name else {}
        if names:
            cast = ModuleCast(node, record, dtypes, names[0], frozenset(paths | set(held)), copy_of, guard_facts(record))
            cast.held.update(held)
            self.facts.casts.append(cast)

    def _call_cast(self, record: CallRecord, cast: List[Tuple[cst.BaseExpression, FrozenSet[str], str]]) -> None:
        """`val.run(model=ema.ema)` of another module, which leaves the module it is handed
        cast (`parameter_casts`): a cast of what is passed, at the call."""
        for passed, dtypes, via in cast:
            name = dotted_name(passed)
            if name is not None:
                paths = frozenset(self.paths(name, record.unit.scope))
                self.facts.casts.append(ModuleCast(record.node, record, dtypes, name, paths, None, guard_facts(record), via=via))

    def _pipe_cast(self, record: CallRecord) -> None:
        """`AutoPipelineForImage2Image.from_pipe(pipeline, torch_dtype=weight_dtype)`: the new
        pipeline shares the modules of `pipeline` (and holds those handed to it by keyword),
        and diffusers casts them all in place to `torch_dtype` (`dtype=`). Without a dtype,
        no cast to a lower precision."""
        node = record.node
        scope = record.unit.scope
        positional, keywords = split_args(node.args)
        setting = keywords.get("torch_dtype", keywords.get("dtype"))
        if setting is None:
            return
        source = positional[0] if positional else keywords.get("pipeline")
        name = dotted_name(source) if source is not None else None
        held: Dict[ModulePath, str] = self.held(name, scope) if name is not None and "." not in name else {}
        for keyword, value in keywords.items():
            module = self._module_source(value) if keyword not in _PIPELINE_SETTINGS and keyword != "pipeline" else None
            if module is not None:
                for path in self.paths(module, scope):
                    held.setdefault(path, module)
        if held:
            # Named as the new pipeline, which holds them all.
            binding = self.assigned.get(id(node))
            built = binding.name if binding is not None else name or "the pipeline"
            cast = ModuleCast(node, record, self.resolver.dtypes(setting, scope), built, frozenset(held), None, guard_facts(record))
            cast.held.update(held)
            self.facts.casts.append(cast)

    # copies
    def _copies(self) -> None:
        """Copies of a cast module, which have its dtype: `ema = copy.deepcopy(model)` after
        `model.half()`, and containers of copies of its tensors (`{n: p.detach().clone() for n, p
        in model.named_parameters()}`, `[p.clone() for p in model.parameters()]`); a copy cast
        itself (`deepcopy(model).float()`, `p.clone().float()`) has the dtype it is cast to. Each
        becomes a cast of the variable it is assigned to that `inherits` the original's (whether
        the copy runs after the original is asked later, of what may run after it)."""
        originals = list(self.facts.casts)
        for binding in self.bindings:
            if binding.kind != "assign" or binding.value is None:
                continue
            copied = self._copied(binding.value)
            if copied is None:
                continue
            node, call, source, where = copied
            record = self.records.get(id(call))
            if record is None:
                continue
            paths = frozenset(self.paths(binding.name, binding.value_scope))
            self._inherit(originals, node, record, source, where, binding.name, paths)
        for unit, loop, _ in self.index.loops:
            # `for n, p in model.named_parameters(): ema[n] = p.detach().clone()` (or `.append(...)`)
            state = next(_state_calls(loop.iter), None) if isinstance(loop, cst.For) else None
            if state is None:
                continue
            for container, element in _filled(loop):
                drawn = _tensor_copied(element)
                source = self._module_source(state.func.value)  # type: ignore[attr-defined]
                record = self.records.get(id(state))
                if drawn is None or drawn not in names_bound(loop.target) or source is None or record is None:
                    continue
                paths = frozenset(self.paths(container, unit.scope))
                self._inherit(originals, element, record, source, unit.scope, container, paths)

    def _inherit(self, originals, node, record, source, where, name, paths) -> None:
        """A cast of the copy `name` for each cast of the module `source` it copies."""
        sources = self.paths(source, where)
        for cast in originals:
            if cast.dtypes and any(cast.covers(path) for path in sources):
                self.facts.casts.append(ModuleCast(node, record, cast.dtypes, name, paths, source, guard_facts(record), cast))

    def _copied(
        self, value: cst.BaseExpression
    ) -> Optional[Tuple[cst.BaseExpression, cst.Call, str, Scope]]:
        """When `value` copies a module or its tensors without casting them: (the copy, a call
        that evaluates it, the module copied as written, the scope it is read in)."""
        calls, root = module_chain(value)
        if any(cast_dtypes_of(call) for call in calls):
            return None  # `deepcopy(model).half()` is a cast of its own
        if isinstance(root, cst.Call) and root.args and (self.resolver.qualified(root.func) or dotted_name(root.func)) in _COPIES:
            copied = root.args[0].value
            state = next(_state_calls(copied), None)
            source = self._module_source(state.func.value if state is not None else copied)  # type: ignore[attr-defined]
            record = self.records.get(id(root))
            if source is None or record is None:
                return None
            return root, root, source, record.unit.scope
        if isinstance(value, (cst.DictComp, cst.ListComp)):
            element = value.value if isinstance(value, cst.DictComp) else value.elt
            drawn = _tensor_copied(element)
            state = next(_state_calls(value.for_in.iter), None)
            if drawn is None or state is None or value.for_in.inner_for_in is not None:
                return None
            if drawn not in names_bound(value.for_in.target):
                return None
            source = self._module_source(state.func.value)  # type: ignore[attr-defined]
            record = self.records.get(id(state))
            if source is None or record is None:
                return None
            return value, state, source, record.unit.scope
        return None

    # optimizers
    def _optimizer(self, record: CallRecord) -> None:
        node = record.node
        binding = self.assigned.get(id(node))
        bound = binding if binding is not None and binding.value is node else None
        if not self._builds_optimizer(node, record.unit.scope, bound):
            return
        positional, keywords = split_args(node.args)
        params = keywords.get("params", positional[0] if positional else None)
        if params is None:
            return
        trains: Dict[ModulePath, List[FrozenSet[Assumption]]] = {}
        self._modules_in(params, record.unit.scope, frozenset(), trains, 0, set())
        if bound is not None:  # `optimizer.add_param_group({"params": head.parameters()})`
            for group, where, when in self.appended().get(self.resolver.identity(bound.name, bound.value_scope), []):
                self._modules_in(group, where, when, trains, 0, set())
        self.facts.optimizers.append(
            OptimizerBuild(
                node,
                record,
                bound.name if bound is not None else None,
                {path: tuple(facts) for path, facts in trains.items()},
                guard_facts(record),
                self._master_weights(node, bound),
            )
        )

    def _builds_optimizer(self, call: cst.Call, scope: Scope, bound: Optional[Binding]) -> bool:
        if vocabulary.named_like_master_weights(dotted_name(call.func) or ""):
            return False  # fairseq's `FP16Optimizer.build_optimizer(cfg, params)` keeps them
        if self._optimizer_class(call.func, scope):
            return True
        # `optimizer = getattr(torch.optim, name)(model.parameters(), lr=lr)`, `OPTIMIZERS[name](...)`,
        # `optimizer_cls(...)`; not `param_optimizer = list(model.named_parameters())`.
        func = call.func
        return (
            bound is not None
            and (isinstance(func, (cst.Call, cst.Subscript)) or vocabulary.looks_like_optimizer(dotted_name(func) or ""))
            and vocabulary.looks_like_optimizer(bound.name)
            and not vocabulary.named_like_master_weights(bound.name)
            and any(isinstance(n, cst.Attribute) and n.attr.value in PARAMETER_METHODS for n in iter_tree(call))
        )

    def _optimizer_class(self, func: cst.BaseExpression, scope: Scope, depth: int = 0) -> bool:
        if isinstance(func, cst.IfExp):
            return self._optimizer_class(func.body, scope, depth + 1) or self._optimizer_class(func.orelse, scope, depth + 1)
        qualified = self.resolver.qualified(func) or ""
        name = dotted_name(func)
        if name is None:
            return False
        last = name.rsplit(".", 1)[-1]
        if qualified.startswith(OPTIMIZER_MODULE_PREFIXES):
            return last[:1].isupper() and "lr_scheduler" not in qualified and "swa_utils" not in qualified
        if last in vocabulary.OPTIMIZER_CLASSES or last.lower() in vocabulary.OPTIMIZER_FACTORIES:
            return True
        if depth < 2 and not qualified:
            # `optimizer_class = bnb.optim.AdamW8bit if args.use_8bit_adam else torch.optim.AdamW`
            return any(
                value is not None and self._optimizer_class(value, where, depth + 1)
                for value, where in self.resolver.values(name, scope)
            )
        return False

    def _modules_in(
        self,
        expression: cst.BaseExpression,
        scope: Scope,
        facts: FrozenSet[Assumption],
        found: Dict[ModulePath, List[FrozenSet[Assumption]]],
        depth: int,
        seen: Set[Tuple[str, int]],
    ) -> None:
        """The modules whose parameters `expression` holds, each with the conditions under
        which it does (into `found`)."""
        if depth > _MAX_DEPTH:
            return
        if isinstance(expression, cst.IfExp):
            for branch, outcome in ((expression.body, True), (expression.orelse, False)):
                branch_facts = facts | frozenset(assumptions(expression.test, outcome))
                self._modules_in(branch, scope, branch_facts, found, depth + 1, seen)
            return
        if isinstance(expression, cst.Call):
            func = expression.func
            if isinstance(func, cst.Attribute) and func.attr.value in PARAMETER_METHODS:
                module = self._module_source(func.value)
                if module is not None:
                    for path in self.paths(module, scope):
                        found.setdefault(path, []).append(facts)
                return
            for arg in expression.args:
                self._modules_in(arg.value, scope, facts, found, depth + 1, seen)
            return
        if isinstance(expression, cst.Lambda):
            return  # `filter(lambda p: p.requires_grad, model.parameters())`: the filter, not a module
        name = dotted_name(expression)
        if name is not None:
            marker = (name, id(scope))
            if marker in seen:
                return
            seen.add(marker)
            sources: List[Tuple[cst.BaseExpression, Scope, FrozenSet[Assumption]]] = []
            for binding in self.resolver.bindings(name, scope):
                source = binding.value if binding.value is not None else binding.source
                if source is not None:
                    sources.append((source, binding.value_scope, facts))
            sources += [(value, where, facts) for value, where in self.resolver.arguments_for(name, scope)]
            # `if args.train_te: groups.append({"params": te.parameters()})`: held on that branch only
            sources += [(value, where, facts | when) for value, where, when in self.appended().get(self.resolver.identity(name, scope), [])]
            root = name if name.startswith("self.") and name.count(".") == 1 else name.rsplit(".", 1)[0]
            if not sources and root != name:
                # `v.weight` for `v in model.modules()`: what its owner is drawn from
                sources.append((cst.parse_expression(root), scope, facts))
            for source, where, held in sources:
                self._modules_in(source, where, held, found, depth + 1, seen)
            if not sources:
                # A module handed over whole: `create_optimizer_v2(model, "adamw")`.
                for path in self.paths(name, scope):
                    found.setdefault(path, []).append(facts)
            return
        for child in children(expression):
            # list and dict displays, comprehensions (their `for ... in` too), subscripts
            for inner in [child] if isinstance(child, cst.BaseExpression) else children(child):
                if isinstance(inner, cst.BaseExpression):
                    self._modules_in(inner, scope, facts, found, depth + 1, seen)
                elif isinstance(inner, cst.CompFor):
                    self._modules_in(inner.iter, scope, facts, found, depth + 1, seen)

    def appended(self) -> Dict[str, List[Tuple[cst.BaseExpression, Scope, FrozenSet[Assumption]]]]:
        """What each list variable is filled with: `params.append(p)`, `.extend(...)`, `+=`."""
        if self._appended is None:
            self._appended = {}
            for record in self.index.calls:
                func = record.node.func
                if isinstance(func, cst.Attribute) and func.attr.value in _FILLING and record.node.args:
                    for owner in map(dotted_name, _branches(func.value)):  # `(a if c else b).append(p)`
                        if owner is not None:
                            key = self.resolver.identity(owner, record.unit.scope)
                            value = record.node.args[-1].value
                            self._appended.setdefault(key, []).append((value, record.unit.scope, guard_facts(record)))
            for binding in self.bindings:
                if binding.kind == "augassign" and isinstance(binding.node, cst.AugAssign):
                    key = self.resolver.identity(binding.name, binding.value_scope)
                    # the branch it runs on, from the calls of its statement (`p += [x for x in m.parameters()]`)
                    statement = self.index.record(binding.node)
                    when = guard_facts(statement.calls[0]) if statement is not None and statement.calls else frozenset()
                    self._appended.setdefault(key, []).append((binding.node.value, binding.value_scope, when))
        return self._appended

    def _master_weights(self, node: cst.Call, bound: Optional[Binding], depth: int = 0) -> Optional[cst.Call]:
        """A call that takes the optimizer and may keep float32 master weights for it: one
        built around it (`FP16_Optimizer(torch.optim.SGD(...))`), one named like such a
        wrapper (`amp.initialize`, `deepspeed.initialize`), or an unknown one whose result
        rebinds the optimizer (`optimizer = Lookahead(optimizer)`). accelerate's `prepare` and
        Fabric's `setup` are none: they step the parameters they are given."""
        parent = self.parent_call.get(id(node))
        if parent is not None and not vocabulary.named_like_a_schedule(dotted_name(parent.func) or ""):
            return parent
        if bound is None:
            return None
        key = self.resolver.identity(bound.name, bound.value_scope)
        for record in self.calls_passing().get(key, ()):
            call = record.node
            callee = dotted_name(call.func) or ""
            owner, _, method = callee.rpartition(".")
            if method in _FRAMEWORK_PREPARE and vocabulary.is_framework_receiver(owner):
                continue  # accelerate and Fabric step the parameters as they are: no master copy
            if vocabulary.named_like_master_weights(callee):
                return call
            binding = self.bound_from().get(id(call))
            if binding is not None and self.resolver.identity(binding.name, binding.value_scope) == key:
                return call  # `optimizer = Wrapper(optimizer)`: an unknown wrapper may keep them
        # An optimizer a helper returns: what its callers wrap the result in (DeepSpeed's
        # `basic_optimizer = self._configure_basic_optimizer(params)`, then
        # `self._configure_fp16_optimizer(basic_optimizer)`).
        scope = bound.value_scope
        if depth < 2 and scope.kind == "function" and bound.name in self.returned(scope.node):
            for record in self.index.calls_to(scope.name.rsplit(".", 1)[-1]):
                outer = self.bound_from().get(id(record.node))
                wrapper = self._master_weights(record.node, outer, depth + 1)
                if wrapper is not None:
                    return wrapper
        return None

    def returned(self, function: cst.CSTNode) -> Set[Optional[str]]:
        """`_returned`, once a function."""
        found = self._returned.get(id(function))
        if found is None:
            found = self._returned[id(function)] = _returned(function)
        return found

    def calls_passing(self) -> Dict[str, List[CallRecord]]:
        """Variable identity -> the calls of the file that pass it as an argument, in order."""
        if self._passing is None:
            self._passing = {}
            for record in self.index.calls:
                scope = record.unit.scope
                keys = {self.resolver.identity(name, scope) for name in map(dotted_name, (arg.value for arg in record.node.args)) if name is not None}
                for key in keys:
                    self._passing.setdefault(key, []).append(record)
        return self._passing

    def bound_from(self) -> Dict[int, Binding]:
        """id(call) -> the binding of the optimizer-like name among those its whole result
        is unpacked into (`model, optimizer = amp.initialize(...)`), else any of them."""
        if self._bound_from is None:
            self._bound_from = {}
            for b in self.bindings:
                if isinstance(b.source, cst.Call):
                    known = self._bound_from.get(id(b.source))
                    if known is None or vocabulary.looks_like_optimizer(b.name):
                        self._bound_from[id(b.source)] = b
        return self._bound_from

    # averages
    def _averages(self) -> None:
        # The containers of copied tensors (`ema_params`), last part of their names.
        copies = {cast.name.rsplit(".", 1)[-1] for cast in self.facts.casts if cast.inherits is not None}
        for unit, loop, _ in self.index.loops:
            # What a decayed variable is drawn from is part of the iterable: a loop over no
            # module's parameters or state (a data loader, a range) nor a container of copies
            # (`ema_params.items()`) averages nothing, and its body is not walked (nested loops
            # would walk it again and again).
            if not isinstance(loop, cst.For) or not (_iterates_state(loop.iter) or _container(loop.iter) in copies):
                continue
            found = _decaying_update(loop.body)
            if found is None:
                continue
            update, decayed = found
            # Every module it can be (a helper's parameter is what each caller passes).
            for path in sorted(set(self._decayed_paths(loop, decayed, unit.scope))):
                if any(cast.covers(path) for cast in self.facts.casts):
                    self.facts.averages.append(InPlaceAverage(loop, unit, path, update))

    def _reassigned(self) -> None:
        for unit, loop, _ in self.index.loops:
            if not isinstance(loop, cst.For) or not _iterates_state(loop.iter):
                continue
            bound = names_bound(loop.target)
            if any(_assigns_data_of(node, bound) for node in iter_tree(loop.body)):
                for path in sorted(set(self._state_owners(loop.iter, unit.scope)) | listed_owners(self, loop.iter, unit.scope)):
                    self.facts.reassigned.append((loop, path))

    def _decayed_paths(self, loop: cst.For, decayed: cst.BaseExpression, scope: Scope) -> Iterator[ModulePath]:
        """What the tensor a loop decays belongs to: the module whose parameters or state the
        loop draws it from (`for e, p in zip(ema.parameters(), model.parameters())`), or the
        container it is taken from (`ema_params[name]`, `for e, p in zip(ema_list, ...)`, through
        a local alias `e = ema_params[name]`); nothing when it comes from elsewhere."""
        for _ in range(3):
            if isinstance(decayed, cst.Subscript):
                container = dotted_name(decayed.value)
                if container is not None:
                    yield from self.paths(container, scope)
                return
            name = dotted_name(decayed)
            if name is None:
                return
            root = name.split(".")[0]
            if root in names_bound(loop.target):
                source = drawn_from(loop, root)
                container = _container(source, full=True)
                if _iterates_state(source):
                    yield from self._state_owners(source, scope)
                elif container is not None:
                    yield from self.paths(container, scope)  # `ema_list`, `ema_params.values()`
                return
            aliases = [b.value for b in self.resolver.bindings(root, scope) if b.value is not None and b.value_scope is scope and b.kind == "assign"]
            if len(aliases) != 1 or root != name:
                return
            decayed = aliases[0]  # `e = ema_params[name]`, then `e.mul_(d)`

    def _state_owners(self, expression: cst.BaseExpression, scope: Scope) -> Iterator[ModulePath]:
        """The modules whose parameters or state an expression iterates:
        `ema.parameters()`, `self.ema.state_dict().items()`."""
        for node in _state_calls(expression):
            owner = dotted_name(node.func.value)  # type: ignore[attr-defined]
            if owner is not None:
                yield from self.paths(owner, scope)


def _returned(function: cst.CSTNode) -> Set[Optional[str]]:
    """The names a function returns (`return optimizer`), not in a nested one."""
    return {dotted_name(node.value) for node in own_returns(function) if node.value is not None}


def _state_calls(expression: cst.BaseExpression) -> Iterator[cst.Call]:
    """The calls of STATE_METHODS in `expression` (`ema.parameters()`, `m.state_dict()`)."""
    for node in iter_tree(expression):
        if isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute) and node.func.attr.value in STATE_METHODS:
            yield node


# What copies a tensor without changing its dtype: `p.detach().clone()`, `p.data.clone()`.
_TENSOR_COPIES = frozenset({"clone", "detach", "detach_", "contiguous", "requires_grad_", "to", "cuda", "cpu"})


def cast_dtypes_of(call: cst.Call) -> bool:
    """Whether a call of a module chain may change the dtype: `.half()`, `.float()`, a
    `.to(...)` given a dtype (or anything but a plain device)."""
    func = call.func
    if not isinstance(func, cst.Attribute):
        return False
    if func.attr.value in CAST_METHODS:
        return True
    if func.attr.value != "to":
        return False
    positional, keywords = split_args(call.args)
    if "dtype" in keywords:
        return True
    # `.to(device)`, `.to(accelerator.device)`, `.to("cuda")`: a device; anything else may be a dtype
    return any(not _device_like(value) for value in positional)


def _device_like(value: cst.BaseExpression) -> bool:
    if isinstance(value, cst.SimpleString):
        return True
    name = (dotted_name(value) or "").lower()
    return name.rsplit(".", 1)[-1] in ("device", "local_rank", "rank", "gpu", "dev") or name.endswith("device")


def _container(iterable: cst.BaseExpression, full: bool = False) -> Optional[str]:
    """The container a loop draws from: `ema_list`, `self.shadow`, `ema.values()`,
    `ema.items()` -> its name (the last part of it unless `full`)."""
    if isinstance(iterable, cst.Call) and isinstance(iterable.func, cst.Attribute) and iterable.func.attr.value in ("values", "items") and not iterable.args:
        iterable = iterable.func.value
    name = dotted_name(iterable)
    if name is None:
        return None
    return name if full else name.rsplit(".", 1)[-1]


def _filled(loop: cst.For) -> Iterator[Tuple[str, cst.BaseExpression]]:
    """What a loop's own statements put into containers: `ema[n] = v` and `ema.append(v)` ->
    (`ema`, `v`); not in nested loops or functions."""
    for statement in _block(loop.body):
        if not isinstance(statement, cst.SimpleStatementLine):
            continue
        for small in statement.body:
            if isinstance(small, cst.Assign) and len(small.targets) == 1 and isinstance(small.targets[0].target, cst.Subscript):
                container = dotted_name(small.targets[0].target.value)
                if container is not None:
                    yield container, small.value
            elif isinstance(small, cst.Expr) and isinstance(small.value, cst.Call):
                call = small.value
                if isinstance(call.func, cst.Attribute) and call.func.attr.value == "append" and len(call.args) == 1:
                    container = dotted_name(call.func.value)
                    if container is not None:
                        yield container, call.args[0].value


def _tensor_copied(element: cst.BaseExpression) -> Optional[str]:
    """The variable a comprehension's element copies without casting: `p.detach().clone()` ->
    `p`; None for anything else (`p.float()`, `p * 0`, `f(p)`)."""
    node = element
    copied = False
    while True:
        if isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute) and node.func.attr.value in _TENSOR_COPIES:
            if cast_dtypes_of(node):
                return None
            copied = copied or node.func.attr.value == "clone"
            node = node.func.value
        elif isinstance(node, cst.Attribute) and node.attr.value == "data":
            node = node.value
        else:
            break
    return node.value if copied and isinstance(node, cst.Name) else None


def _assigns_data_of(node: cst.CSTNode, names: Collection[str]) -> bool:
    """Whether `node` assigns a new tensor to one of `names`' `.data` (`p.data = p.data.float()`)."""
    if not isinstance(node, cst.Assign):
        return False
    for target in node.targets:
        name = dotted_name(target.target)
        if name is not None and name.endswith(".data") and name[: -len(".data")] in names:
            return True
    return False


def _iterates_state(iterable: cst.BaseExpression) -> bool:
    return next(_state_calls(iterable), None) is not None


def _decaying_update(body: cst.CSTNode) -> Optional[Tuple[cst.CSTNode, cst.BaseExpression]]:
    """The first in-place decay in a loop body (`e.mul_(d)`, `v *= d`, `e.lerp_(p, w)`,
    `ema_params[name].mul_(d).add_(p, alpha=1 - d)`) and the tensor it decays (`e`,
    `ema_params[name]`; `.data`, `.detach()` left out)."""

    def descend(node: cst.CSTNode) -> bool:
        return not isinstance(node, (cst.FunctionDef, cst.ClassDef))

    for node in iter_tree(body, descend):
        if isinstance(node, cst.AugAssign) and isinstance(node.operator, cst.MultiplyAssign):
            return node, _decayed_tensor(node.target)
        if isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute) and node.func.attr.value in DECAY_METHODS:
            return node, _decayed_tensor(node.func.value)
        if isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute) and node.func.attr.value == "copy_" and len(node.args) == 1:
            # timm's `ema_v.copy_(ema_v * self.decay + (1. - self.decay) * model_v)`
            decayed = _decayed_tensor(node.func.value)
            if _scales(node.args[0].value, decayed):
                return node, decayed
    return None


def _scales(value: cst.BaseExpression, tensor: cst.BaseExpression) -> bool:
    """Whether `value` multiplies `tensor` by something: `ema_v * d + (1 - d) * model_v`."""
    name = dotted_name(tensor)
    if name is None:
        return False
    for node in iter_tree(value, lambda n: not isinstance(n, cst.Lambda)):
        if isinstance(node, cst.BinaryOperation) and isinstance(node.operator, cst.Multiply):
            if name in (dotted_name(node.left), dotted_name(node.right)):
                return True
    return False


def _decayed_tensor(receiver: cst.BaseExpression) -> cst.BaseExpression:
    """`e.data`, `e.detach()`, `ema[k].data` -> `e`, `ema[k]`."""
    while True:
        if isinstance(receiver, cst.Call) and isinstance(receiver.func, cst.Attribute):
            receiver = receiver.func.value  # `e.detach().mul_(d)`, `e.to(x).mul_(d)`
        elif isinstance(receiver, cst.Attribute) and receiver.attr.value == "data":
            receiver = receiver.value
        else:
            return receiver


# What cuts a tensor off the graph: `x.detach()`, `x.item()`, `x.data`.
_DETACHING = frozenset({"detach", "item", "tolist", "numpy"})


def _graph_reads(expression: cst.BaseExpression) -> Tuple[List[cst.BaseExpression], Set[str], Set[str]]:
    """The callees of the calls in `expression`, the variables it reads as values, and those
    it reads only as the receiver of a method (`h` of `h.pow(2)`, `model` of
    `model.encoder(x)`), leaving out what `.detach()` / `.item()` / `.data` take off the graph."""
    calls: List[cst.BaseExpression] = []
    names: Set[str] = set()
    receivers: Set[str] = set()

    def visit(node: cst.CSTNode, receiver: bool = False) -> None:
        if isinstance(node, cst.Call):
            func = node.func
            if isinstance(func, cst.Attribute) and func.attr.value in _DETACHING:
                return
            calls.append(func)
            if isinstance(func, cst.Attribute):
                visit(func.value, receiver=True)  # `model(x).logits.mean()`: the chain's receiver
            for arg in node.args:
                visit(arg.value)
            return
        if isinstance(node, cst.Attribute) and node.attr.value == "data":
            return
        if isinstance(node, (cst.Name, cst.Attribute)):
            name = dotted_name(node)
            if name is not None:
                (receivers if receiver else names).update(roots([name]))
                return
        if isinstance(node, cst.Lambda):
            return
        for child in children(node):
            visit(child)

    visit(expression)
    return calls, names, receivers - names


def _branches(value: Optional[cst.BaseExpression]) -> List[cst.BaseExpression]:
    """`a if c else b` -> [a, b]; None -> []; anything else -> [itself]."""
    if value is None:
        return []
    if isinstance(value, cst.IfExp):
        return _branches(value.body) + _branches(value.orelse)
    return [value]


# --------------------------------------------------------------------------- what runs after


class Successors:
    """The statements that may run after a call in its unit; the helpers and constructors of
    the file a call runs, and the calls of each helper."""

    def __init__(self, index: ModuleIndex) -> None:
        self.index = index
        self._parents: Dict[int, Dict[int, Tuple[Optional[cst.CSTNode], List[cst.CSTNode], int]]] = {}
        self._statement_of: Dict[int, Dict[int, cst.CSTNode]] = {}
        self._callers: Optional[Dict[int, List[CallRecord]]] = None
        # `calls_after`, asked again and again of the same calls (each cast, each cast back)
        self.after: Dict[Tuple[int, int, int], List[CallRecord]] = {}
        self._constructors: Optional[Dict[str, CodeUnit]] = None
        self._calls_in: Dict[int, FrozenSet[int]] = {}  # id(statement) -> `calls_within` it

    def calls_within(self, statements: List[cst.CSTNode]) -> Set[int]:
        """`calls_within`, each statement walked once: the statements after one call are
        mostly those after another (the rest of a long training function)."""
        found: Set[int] = set()
        for statement in statements:
            found |= self._calls_of(statement)
        return found

    def _calls_of(self, statement: cst.CSTNode) -> FrozenSet[int]:
        """`calls_within([statement])`, from those of the statements nested in it (each
        known once): a loop's calls are its header's and its body statements', which the
        statements after a call inside it ask for again."""
        known = self._calls_in.get(id(statement))
        if known is not None:
            return known
        found: Set[int] = set()
        nested: List[cst.CSTNode] = []

        def descend(node: cst.CSTNode) -> bool:
            if node is not statement and _is_statement(node):
                nested.append(node)  # its calls come from its own entry
                return False
            return not isinstance(node, (cst.FunctionDef, cst.ClassDef, cst.Lambda))

        for node in iter_tree(statement, descend):
            if isinstance(node, cst.Call):
                found.add(id(node))
        for inner in nested:
            found |= self._calls_of(inner)
        known = self._calls_in[id(statement)] = frozenset(found)
        return known

    def callee(self, model, record: CallRecord) -> Optional[CodeUnit]:
        """The unit of the file a call runs: a helper's, or a class's `__init__` (`EMA(model)`)."""
        callee = getattr(model.classify(record), "callee", None)
        if callee is not None:
            return callee
        if self._constructors is None:
            self._constructors = {
                unit.class_name: unit
                for unit in model.units
                if unit.class_name is not None and unit.name == f"{unit.class_name}.__init__"
            }
        name = dotted_name(record.node.func)
        return self._constructors.get(name) if name is not None and name in self.index.classes else None

    def callers(self, model, unit: CodeUnit) -> List[CallRecord]:
        """The calls of the file that run `unit`."""
        if self._callers is None:
            self._callers = {}
            for record in model.index.calls:
                callee = self.callee(model, record)
                if callee is not None and record.immediate:
                    self._callers.setdefault(id(callee), []).append(record)
        return self._callers.get(id(unit), [])

    def statements_after(self, record: CallRecord) -> List[cst.CSTNode]:
        """The statement holding the call, then every statement of its unit that may run
        after it: the rest of its block, and of each enclosing block, up to a `return`,
        `raise`, `break` or `continue`; a loop's whole body again (the next iteration); never
        the other branch of an `if`."""
        statement = self.statement(record)
        if statement is None:
            return []
        parents = self._tree(record.unit)
        reached: List[cst.CSTNode] = [statement]
        node = statement
        while id(node) in parents:
            parent, block, index = parents[id(node)]
            for later in block[index + 1 :]:
                reached.append(later)
                if _ends_the_way(later):
                    return reached
            if parent is None:
                break
            if isinstance(parent, (cst.For, cst.While)) and _in_body(node, parent):
                reached.extend(_block(parent.body))  # the next iteration
            node = parent
        return reached

    def statement(self, record: CallRecord) -> Optional[cst.CSTNode]:
        """The innermost statement of the call's unit that evaluates the call."""
        unit = record.unit
        if id(unit) not in self._statement_of:
            mapping: Dict[int, cst.CSTNode] = {}
            for statement in self._tree(unit).values():
                node = statement[1][statement[2]]
                for inner in _own_nodes(node):
                    if isinstance(inner, cst.Call):
                        mapping[id(inner)] = node
            self._statement_of[id(unit)] = mapping
        return self._statement_of[id(unit)].get(id(record.node))

    def _tree(self, unit: CodeUnit) -> Dict[int, Tuple[Optional[cst.CSTNode], List[cst.CSTNode], int]]:
        """id(statement) -> (the compound statement holding it or None, its block, its index)."""
        key = id(unit)
        if key not in self._parents:
            parents: Dict[int, Tuple[Optional[cst.CSTNode], List[cst.CSTNode], int]] = {}
            pending: List[Tuple[Optional[cst.CSTNode], List[cst.CSTNode]]] = [(None, list(unit.body))]
            while pending:
                parent, block = pending.pop()
                for index, statement in enumerate(block):
                    parents[id(statement)] = (parent, block, index)
                    for inner in _blocks(statement):
                        pending.append((statement, inner))
            self._parents[key] = parents
        return self._parents[key]


_STATEMENT_TYPES: Dict[type, bool] = {}  # LibCST's bases are ABCs: each node type checked once


def _is_statement(node: cst.CSTNode) -> bool:
    kind = type(node)
    known = _STATEMENT_TYPES.get(kind)
    if known is None:
        known = _STATEMENT_TYPES[kind] = issubclass(kind, cst.BaseStatement)
    return known


def _block(suite: cst.BaseSuite) -> List[cst.CSTNode]:
    if isinstance(suite, cst.IndentedBlock):
        return list(suite.body)
    return [suite]  # SimpleStatementSuite: `for x in y: f(x)`


def _blocks(statement: cst.CSTNode) -> List[List[cst.CSTNode]]:
    """The blocks directly inside a compound statement (not a nested function or class)."""
    if isinstance(statement, (cst.FunctionDef, cst.ClassDef)):
        return []
    found: List[List[cst.CSTNode]] = []
    if isinstance(statement, cst.If):
        found.append(_block(statement.body))
        if statement.orelse is not None:
            if isinstance(statement.orelse, cst.If):
                found.append([statement.orelse])
            else:
                found.append(_block(statement.orelse.body))
    elif isinstance(statement, (cst.For, cst.While)):
        found.append(_block(statement.body))
        if statement.orelse is not None:
            found.append(_block(statement.orelse.body))
    elif isinstance(statement, cst.With):
        found.append(_block(statement.body))
    elif isinstance(statement, (cst.Try, cst.TryStar)):
        found.append(_block(statement.body))
        for handler in statement.handlers:
            found.append(_block(handler.body))
        if statement.orelse is not None:
            found.append(_block(statement.orelse.body))
        if statement.finalbody is not None:
            found.append(_block(statement.finalbody.body))
    elif isinstance(statement, cst.Match):
        for case in statement.cases:
            found.append(_block(case.body))
    return found


def _in_body(node: cst.CSTNode, loop: cst.CSTNode) -> bool:
    return any(node is inner for inner in _block(loop.body))  # type: ignore[attr-defined]


def _ends_the_way(statement: cst.CSTNode) -> bool:
    """`return`, `raise`, `break` or `continue` as a statement of the block: nothing after it
    in the block runs, nor (for return and raise) anything after the block."""
    if isinstance(statement, (cst.SimpleStatementLine, cst.SimpleStatementSuite)):
        return any(isinstance(small, (cst.Return, cst.Raise, cst.Break, cst.Continue)) for small in statement.body)
    return False


def _own_nodes(statement: cst.CSTNode) -> Iterator[cst.CSTNode]:
    """The nodes a statement evaluates itself: a simple statement whole, a compound
    statement's header (its test, iterable or `with` items), never a nested body."""
    if isinstance(statement, (cst.SimpleStatementLine, cst.SimpleStatementSuite)):
        yield from iter_tree(statement, lambda n: not isinstance(n, cst.Lambda))
        return
    headers: List[cst.CSTNode] = []
    if isinstance(statement, (cst.If, cst.While)):
        headers.append(statement.test)
    elif isinstance(statement, cst.For):
        headers.append(statement.iter)
    elif isinstance(statement, cst.With):
        headers.extend(item.item for item in statement.items)
    elif isinstance(statement, cst.Match):
        headers.append(statement.subject)
    for header in headers:
        yield from iter_tree(header, lambda n: not isinstance(n, cst.Lambda))


def calls_within(statements: List[cst.CSTNode]) -> Set[int]:
    """The ids of every call these statements evaluate, nested blocks included (not the
    bodies of functions or classes defined there)."""
    found: Set[int] = set()

    def descend(node: cst.CSTNode) -> bool:
        return not isinstance(node, (cst.FunctionDef, cst.ClassDef, cst.Lambda))

    for statement in statements:
        for node in iter_tree(statement, descend):
            if isinstance(node, cst.Call):
                found.add(id(node))
    return found


class Precision(Analysis):
    """Casts of modules, optimizer constructions and what they train, in-place averages, and
    the low-precision training they add up to: `model.facts(Precision)`."""

    # Its facts in a module's summary (`amplint.semantic.exports.ExportsFacts`).
    SUMMARY_KEY = "precision"

    def __init__(self, model: SemanticModel) -> None:
        super().__init__(model)
        call_casts = (lambda record: parameter_casts.call_casts(model, record, self.SUMMARY_KEY)) if model.external is not None else None
        self.finder: PrecisionFinder = find_precision(model.index, model.resolver, call_casts)
        self.successors = Successors(model.index)
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
            if dtype not in cast.dtypes or id(cast.node) in done or not _copied_after(self, cast):
                continue
            if cast.inherits is None and not any(r.node is cast.node for r in calls_after(self.model, average.construction, self.successors)):
                continue  # the copy cast before it is made: another object
            after = calls_after(self.model, cast.record, self.successors)
            if _undone(self, cast, after):
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

    @property
    def found(self) -> PrecisionFacts:
        return self.finder.facts

    @property
    def casts(self) -> List[ModuleCast]:
        return self.found.casts

    @property
    def optimizers(self) -> List[OptimizerBuild]:
        return self.found.optimizers

    @property
    def averages(self) -> List[InPlaceAverage]:
        return self.found.averages

    def trained_by(self, optimizer: str) -> FrozenSet[ModulePath]:
        """The module paths whose parameters the optimizer variable with identity key
        `optimizer` holds, over every construction bound to it; empty when none is known
        (built by a helper, handed in, or holding nothing this analysis can name)."""
        found: Set[ModulePath] = set()
        for build in self.optimizers:
            if build.name is not None and self.model.resolver.identity(build.name, build.unit.scope) == optimizer:
                found.update(build.trains)
        return frozenset(found)

    def modules_feeding(self, tensor: cst.BaseExpression, unit: CodeUnit) -> FrozenSet[ModulePath]:
        """The module paths whose outputs `tensor`, read in `unit`, is computed from with
        gradients: the callees of the calls in it and in the values of the unit's variables it
        is derived from (`out, aux = model(x)`; `aux_loss = crit(aux, y)`) and the modules
        handed to them whole (`compute_loss(model, batch)`), through the aliases `paths` follows. What `.detach()`, `.item()` or `.data` cut off is not followed
        (`D(G(z).detach())` feeds D, not G); a call of a helper is its own path and names no
        module inside it."""
        found: Set[ModulePath] = set()
        seen: Set[str] = set()
        pending: List[cst.BaseExpression] = [tensor]
        while pending and len(seen) < 64:
            expression = pending.pop()
            calls, names, receivers = _graph_reads(expression)
            for func in calls:
                name = dotted_name(func)
                if name is not None:
                    if name.endswith(".forward"):
                        name = name[: -len(".forward")]
                    found |= self.finder.paths(name, unit.scope)
            for name in names:
                if name != "self":
                    # A module handed over whole: `compute_loss(model, batch)`, `l2(model)`.
                    found |= self.finder.paths(name, unit.scope)
            for name in names | receivers:
                if name in seen or name == "self":
                    continue
                seen.add(name)
                for binding in self.model.resolver.bindings(name, unit.scope):
                    if binding.value_scope is not unit.scope:
                        continue
                    value = binding.value if binding.value is not None else binding.source
                    if binding.kind == "augassign" and isinstance(binding.node, cst.AugAssign):
                        value = binding.node.value
                    if value is not None and binding.kind in ("assign", "augassign", "walrus"):
                        pending.append(value)
        return frozenset(found)

    def trained_module_feeds(self, tensor: cst.BaseExpression, unit: CodeUnit, optimizer: str) -> bool:
        """Whether `tensor` is computed from the outputs of a module whose parameters the
        optimizer `optimizer` (an identity key) holds: the optimizer's construction and the
        module's call must both be known. A module feeds a path it contains or sits in
        (`model.encoder(x)` for an optimizer of `model`, `model(x)` for one of `model.head`)."""
        trained = self.trained_by(optimizer)
        if not trained:
            return False
        for root, rest in self.modules_feeding(tensor, unit):
            for other_root, other_rest in trained:
                if root == other_root and (rest[: len(other_rest)] == other_rest or other_rest[: len(rest)] == rest):
                    return True
        return False

    def trained_in_low_precision(self, dtype: str = "float16") -> Iterator[Tuple[ModuleCast, OptimizerBuild]]:
        """Casts that may cast a module to `dtype` (`model.half()`, `unet.to(dtype=weight_dtype)`),
        each with an optimizer that then trains the module's parameters in that dtype: it holds
        them on a way the cast can take (their branch conditions do not contradict), nothing
        that may keep float32 master weights takes it (apex, DeepSpeed, accelerate), it is
        built or some optimizer steps after the cast, and nothing after the cast casts the
        module back to float32 or hands it to code that may (adapters, `cast_training_params`)."""
        return _direct_first(trained_in(self, dtype))

    def averaged_in_low_precision(self, dtype: str = "float16") -> Iterator[Tuple[ModuleCast, InPlaceAverage]]:
        """Casts that may cast a module to `dtype` whose parameters a loop that runs after the
        cast decays in place: an EMA kept in that dtype (`ema = deepcopy(model).half()`,
        then `e.mul_(d).add_(p, alpha=1 - d)`)."""
        return _direct_first(averaged_in(self, dtype))


# --------------------------------------------------------------------------- queries


def calls_after(
    model, record: CallRecord, successors: "Successors", depth: int = 0, came_from: Optional[CodeUnit] = None
) -> List[CallRecord]:
    """The calls that may run after `record` (itself included): in the statements of its unit
    that may follow it, in the helpers of the file those call (a class of the file constructed
    runs its `__init__`), for a call in `__init__`, in every other method of the class (the
    instance exists only after it), and, for a call in a helper of the file, what may follow
    each call of that helper in its callers (a validation helper called in a training loop:
    the loop's next steps)."""
    key = (id(record.node), depth, id(came_from))
    known = successors.after.get(key)
    if known is None:
        known = successors.after[key] = _calls_after(model, record, successors, depth, came_from)
    return known


def _calls_after(model, record: CallRecord, successors: "Successors", depth: int, came_from: Optional[CodeUnit]) -> List[CallRecord]:
    unit = record.unit
    ids = successors.calls_within(successors.statements_after(record))
    found = [r for r in unit.calls if id(r.node) in ids and r.immediate]
    if unit.name.rsplit(".", 1)[-1] == "__init__" and unit.class_name is not None:
        found += [r for u in model.units if u.class_name == unit.class_name and u is not unit for r in u.calls]
    # The helper a caller's call site is followed up from: what runs in it after the call was
    # counted already (not its whole body again).
    seen = {id(unit)} | ({id(came_from)} if came_from is not None else set())
    pending = list(found)
    while pending:
        callee = successors.callee(model, pending.pop())
        if callee is not None and id(callee) not in seen and len(seen) < 32:
            seen.add(id(callee))
            found += callee.calls
            pending += callee.calls
    if depth < _MAX_CALLERS and not unit.is_module:
        for call in successors.callers(model, unit):
            if call.unit is not unit:
                found += calls_after(model, call, successors, depth + 1, came_from=unit)
    return found


_MAX_CALLERS = 2  # callers of callers followed up from a helper


def trained_in(precision: "Precision", dtype: str) -> Iterator[Tuple[ModuleCast, OptimizerBuild]]:
    """Casts that may cast a module to `dtype`, each with an optimizer that then trains its
    parameters in that dtype (see `Precision.trained_in_low_precision`)."""
    facts: PrecisionFacts = precision.found
    optimizers = [o for o in facts.optimizers if o.wrapped_by is None and o.trains]
    for cast in facts.casts:
        if dtype not in cast.dtypes or not _copied_after(precision, cast):
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
        after = calls_after(precision.model, cast.record, precision.successors)
        if cast.held:
            # A pipeline's cast casts each module it holds: one trained module not cast back
            # is enough (a text encoder cast back to float32 undoes nothing for the unet).
            trained = [path for optimizer in candidates for path in optimizer.trains]
            own = frozenset(p for p in cast.paths if p not in cast.held)
            kept = [
                path
                for path in cast.held
                if any(_nested(path, t) for t in trained) and not _undone(precision, cast, after, own | {path})
            ]
            if not kept:
                continue
            cast = replace(cast, held={kept[0]: cast.held[kept[0]]})
        elif _undone(precision, cast, after) or frozen_untrained(precision, cast, candidates):
            continue
        ids = {id(r.node) for r in after}
        steps = any(_is_step(precision.model.classify(r)) for r in after)
        for optimizer in candidates:
            if (id(optimizer.node) in ids or steps) and not _fresh_object(precision, cast, optimizer):
                yield cast, optimizer
                break


def averaged_in(precision: "Precision", dtype: str) -> Iterator[Tuple[ModuleCast, InPlaceAverage]]:
    """Casts that may cast a module to `dtype` whose parameters a loop then decays in place
    (an EMA kept in that dtype)."""
    facts: PrecisionFacts = precision.found
    for cast in facts.casts:
        if dtype not in cast.dtypes:
            continue
        averages = [a for a in facts.averages if cast.covers(a.module)]
        if not averages or not _copied_after(precision, cast):
            continue
        after = calls_after(precision.model, cast.record, precision.successors)
        if _undone(precision, cast, after):
            continue
        ids = {id(r.node) for r in after}
        for average in averages:
            # The loop runs after the cast (its `.parameters()`/`.state_dict()` call does).
            if ids & precision.successors.calls_within([average.loop]):
                yield cast, average
                break


def _direct_first(found: Iterator[Tuple[ModuleCast, object]]) -> Iterator[Tuple[ModuleCast, object]]:
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


def _copied_after(precision: "Precision", cast: ModuleCast) -> bool:
    """For a copy that inherits a cast (`ema = deepcopy(model)` after `model.half()`): whether
    the copy may run after the cast it inherits, and the module is not cast back to float32
    (or to an unknown dtype) on the way; True for any other cast."""
    original = cast.inherits
    if original is None:
        return True
    after = calls_after(precision.model, original.record, precision.successors)
    if not any(r.node is cast.record.node for r in after):
        return False
    ids = {id(r.node) for r in after}
    for other in precision.found.casts:
        if other.inherits is None and other is not original and id(other.node) in ids and ("float32" in other.dtypes or not other.dtypes):
            if any(other.covers(path) for path in original.paths):
                if not any(r.node is cast.record.node for r in calls_after(precision.model, other.record, precision.successors)):
                    continue  # cast back only after the copy
                return False
    return True


def _trains_after(precision: "Precision", record: CallRecord) -> bool:
    """Whether an optimizer is built or steps after `record`."""
    after = calls_after(precision.model, record, precision.successors)
    built = {id(o.node) for o in precision.found.optimizers}
    return any(id(r.node) in built or _is_step(precision.model.classify(r)) for r in after)


def _fresh_object(precision: "Precision", cast: ModuleCast, optimizer: OptimizerBuild) -> bool:
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


def _nested(one: ModulePath, other: ModulePath) -> bool:
    """Whether one module path contains the other."""
    return one[0] == other[0] and (one[1][: len(other[1])] == other[1] or other[1][: len(one[1])] == one[1])


def _undone(precision: "Precision", cast: ModuleCast, after: List[CallRecord], paths: Optional[FrozenSet[ModulePath]] = None) -> bool:
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
        if any(_nested(path, own) for own in paths) and ids & calls_within([loop.iter]):
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


# --------------------------------------------------------------------------- adapters


def adapter_entry(call: cst.Call) -> Optional[AdapterCall]:
    """The entry of `frameworks.ADAPTER_CALLS` a call is: `unet.add_adapter(config)`,
    `inject_adapter_in_model(config, unet)`, `get_peft_model(model, config)`."""
    name = dotted_name(call.func)
    if name is None:
        return None
    last = name.rsplit(".", 1)[-1]
    positional, keywords = split_args(call.args)
    first = positional[0] if positional else None
    named_first = isinstance(first, (cst.SimpleString, cst.ConcatenatedString, cst.FormattedString))
    for entry in ADAPTER_CALLS:
        if last not in entry.names or (entry.method and "." not in name):
            continue
        if entry.name_first is True and not named_first:
            continue
        if entry.name_first is False and not ("adapter_config" in keywords or _config_like(first)):
            continue  # AdapterHub's `model.add_adapter(task_name, config="seq_bn")` is none of peft's
        return entry
    return None


def _config_like(value: Optional[cst.BaseExpression]) -> bool:
    """An adapter's config: `LoraConfig(r=4)`, `unet_lora_config`, `cfg`."""
    if isinstance(value, cst.Call):
        return "config" in (dotted_name(value.func) or "").lower()
    name = (dotted_name(value) or "").rsplit(".", 1)[-1].lower() if value is not None else ""
    return "config" in name or "cfg" in name


def adapter_effect(call: cst.Call) -> Optional[str]:
    """"creates" for a call that creates adapters in its module's current dtype and makes them
    its only trainable parameters; "upcasts" for one that makes its trainable parameters
    float32; "keeps" for one that changes no dtype; None for any other call. An upcasting call told not to (`get_peft_model(model,
    config, autocast_adapter_dtype=False)`) creates."""
    entry = adapter_entry(call)
    if entry is None:
        return None
    if entry.upcast_keyword:
        _, keywords = split_args(call.args)
        value = keywords.get(entry.upcast_keyword)
        if isinstance(value, cst.Name) and value.value == "False":
            return "creates"
    return entry.effect


def adapter_module(call: cst.Call, entry: AdapterCall) -> Optional[str]:
    """The module an adapter call acts on, as written: `unet` in `unet.add_adapter(config)`,
    `load_lora_into_unet(sd, unet=unet_)`, `inject_adapter_in_model(config, model)`."""
    if entry.method:
        return dotted_name(call.func.value) if isinstance(call.func, cst.Attribute) else None
    positional, keywords = split_args(call.args)
    for keyword in entry.module_keywords:
        if keyword in keywords:
            return dotted_name(keywords[keyword])
    if 0 <= entry.module_position < len(positional):
        return dotted_name(positional[entry.module_position])
    return None


def adapters_added(precision: "Precision", cast: ModuleCast) -> Optional[CallRecord]:
    """A call that may run after the cast and creates adapters on the module it casts, in the
    dtype it cast it to (`unet.to(dtype=weight_dtype)`, then `unet.add_adapter(config)`): the
    adapters are the module's trainable parameters, in that dtype. None when there is none."""
    finder: PrecisionFinder = precision.finder
    for record in calls_after(precision.model, cast.record, precision.successors):
        if adapter_effect(record.node) != "creates":
            continue
        module = adapter_module(record.node, adapter_entry(record.node))  # type: ignore[arg-type]
        if module is not None and any(cast.covers(path) for path in finder.paths(module, record.unit.scope)):
            return record
    return None


@dataclass(frozen=True)
class LoadHookAdapters:
    """Adapters a load-state hook re-creates on a module cast to a half dtype: accelerate runs
    `load_model_hook` (registered with `accelerator.register_load_state_pre_hook`) inside
    `accelerator.load_state(...)`, and its `load_lora_into_unet(sd, unet=unet_)` builds the
    unet's adapters anew, in the dtype the unet was cast to (diffusers #6514, #7018)."""

    cast: ModuleCast
    optimizer: OptimizerBuild
    record: CallRecord  # the creating call, in the hook
    hook: str  # the hook's name
    load: cst.Call  # `accelerator.load_state(...)`
    module: str  # the module's name where it is cast (`unet`)


def adapters_recreated_on_load(precision: "Precision", dtype: str) -> Iterator[LoadHookAdapters]:
    """Casts that may cast a module to `dtype`, trained by an optimizer, whose adapters a
    load-state hook re-creates when the run resumes, after the cast: a call of the hook that
    creates adapters (`adapter_effect`) on the hook's name for the module (`unet_`, one of the
    hook's `models` picked by `isinstance(model, type(unwrap_model(unet)))`), after which
    nothing in the hook upcasts, casts or reassigns parameters, or calls code named like it may
    change their precision. Whatever the cast's own function upcasts ran before the hook."""
    model = precision.model
    finder: PrecisionFinder = precision.finder
    optimizers = [o for o in precision.found.optimizers if o.wrapped_by is None and o.trains]
    hooks = list(_load_hooks(model))
    if not hooks or not optimizers:
        return
    for cast in precision.found.casts:
        if dtype not in cast.dtypes or cast.inherits is not None:
            continue
        trained = [o for o in optimizers if any(cast.covers(path) for path in o.trains)]
        if not trained:
            continue
        after = {id(r.node) for r in calls_after(model, cast.record, precision.successors)}
        for unit, hook, load in hooks:
            if id(load) not in after:
                continue
            for record, module in _recreating_calls(precision, unit):
                if any(cast.covers(path) for path in finder.paths(module, unit.scope)):
                    yield LoadHookAdapters(cast, trained[0], record, hook, load, module)
                    break


def _load_hooks(model: SemanticModel) -> Iterator[Tuple[CodeUnit, str, cst.Call]]:
    """The functions of the file registered as load-state hooks (`accelerator.
    register_load_state_pre_hook(load_model_hook)`), each with the `accelerator.load_state(...)`
    that runs them (on the same object, as written)."""
    index = model.index
    loads = {}
    for record in index.calls_to("load_state"):
        func = record.node.func
        if isinstance(func, cst.Attribute):
            loads.setdefault(dotted_name(func.value), record.node)
    for record in index.calls_to("register_load_state_pre_hook"):
        func = record.node.func
        load = loads.get(dotted_name(func.value)) if isinstance(func, cst.Attribute) else None
        hook = dotted_name(record.node.args[0].value) if record.node.args and load is not None else None
        if hook is None:
            continue
        for binding in model.resolver.bindings(hook, record.unit.scope):
            unit = next((u for u in model.units if u.node is binding.node), None) if binding.kind == "def" else None
            if unit is not None:
                yield unit, hook, load


def _recreating_calls(precision: "Precision", hook: CodeUnit) -> Iterator[Tuple[CallRecord, str]]:
    """The hook's calls that create adapters on a module it picked from its `models`, each with
    the module that `isinstance` test names (`unet` for `unet_`), when nothing after the call
    in the hook may upcast the trainable parameters."""
    picked = _picked_modules(hook.node)
    for record in hook.calls:
        if adapter_effect(record.node) != "creates":
            continue
        written = adapter_module(record.node, adapter_entry(record.node))  # type: ignore[arg-type]
        module = picked.get(written or "")
        if module is None:
            continue
        after = [r for r in calls_after(precision.model, record, precision.successors) if r.node is not record.node]
        if not _may_upcast(precision, after, {*picked, *hook.parameters[:1]}):  # and `models`
            yield record, module


def _picked_modules(hook: cst.CSTNode) -> Dict[str, str]:
    """The names a hook gives the modules it picks from its `models` by class, each with the
    module of the training code the class is taken from: `unet_` -> `unet` for `if
    isinstance(model, type(unwrap_model(unet))): unet_ = model` (also `unet_ =
    unwrap_model(model)`, and `model` itself inside that `if`)."""
    found: Dict[str, str] = {}
    for node in iter_tree(hook):
        if not isinstance(node, cst.If) or not isinstance(node.test, cst.Call) or dotted_name(node.test.func) != "isinstance":
            continue
        positional, _ = split_args(node.test.args)
        if len(positional) != 2 or not (isinstance(positional[1], cst.Call) and dotted_name(positional[1].func) == "type"):
            continue
        subject, of = _unwrapped(positional[0]), _unwrapped(positional[1].args[0].value if positional[1].args else None)
        if subject is None or of is None:
            continue
        found.setdefault(subject, of)
        for statement in iter_tree(node.body):
            if isinstance(statement, cst.Assign) and len(statement.targets) == 1 and _unwrapped(statement.value) == subject:
                target = dotted_name(statement.targets[0].target)
                if target is not None:
                    found.setdefault(target, of)
    return found


def _unwrapped(value: Optional[cst.BaseExpression]) -> Optional[str]:
    """The name inside calls of one argument: `unet` of `accelerator.unwrap_model(unet)`."""
    while isinstance(value, cst.Call) and len(value.args) == 1 and value.args[0].keyword is None:
        value = value.args[0].value
    return dotted_name(value) if value is not None else None


def _may_upcast(precision: "Precision", after: List[CallRecord], modules: Collection[str]) -> bool:
    """Whether one of the calls `after` may give trainable parameters another dtype: an
    upcasting adapter call (`cast_training_params`), a cast (`model.float()`, `.to(...)`), a
    loop that assigns parameters anew, or a call named like a precision change that is handed
    one of the hook's `modules` (`upcast_lora(unet_)`; not `lora_state_dict(input_dir)`)."""
    ids = {id(r.node) for r in after}
    if any(ids & calls_within([loop.iter]) for loop, _ in precision.found.reassigned):
        return True
    for record in after:
        call = record.node
        effect = adapter_effect(call)
        if effect == "upcasts":
            return True
        if effect is None and vocabulary.may_change_parameter_precision(dotted_name(call.func) or ""):
            handed = handed_modules(precision.finder, call, record.unit.scope)
            if any(name is not None and name.split(".")[0] in modules for name in handed):
                return True
        if isinstance(call.func, cst.Attribute) and call.func.attr.value in _MAY_UPCAST:
            return True
    return False


# Methods that may give a module's parameters a wider dtype: `.to(torch.float32)`, `.float()`.
_MAY_UPCAST = frozenset({"to", "float", "double", "type"})


# What may make a frozen module's parameters trainable again, or give it new ones, by name.
_UNFREEZING_FRAGMENTS = ("freeze", "trainable", "requires_grad", "grad")


def frozen_untrained(precision: "Precision", cast: ModuleCast, optimizers: List[OptimizerBuild]) -> bool:
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
            after = {id(r.node) for r in calls_after(precision.model, record, precision.successors)}
            if all(id(o.node) in after for o in optimizers if o.unit is cast.unit):
                frozen = True
                break
        if not frozen or _handed_away(precision, path):
            return False
    return True


def handed_modules(finder: "PrecisionFinder", call: cst.Call, scope: Scope) -> List[Optional[str]]:
    """The modules a call is handed, as written: its arguments, and the members of those that
    are lists of modules (`cast_training_params([unet, text_encoder])`, or `models = [unet]`,
    `models.extend([text_encoder_one, text_encoder_two])`, then `cast_training_params(models)`),
    and the object a method is called on (`unet.add_lora_layers()`)."""
    found: List[Optional[str]] = [dotted_name(call.func.value)] if isinstance(call.func, cst.Attribute) else []
    for arg in call.args:
        name = dotted_name(arg.value)
        members = _members(finder, arg.value, scope)
        found += members if members else [name]
    return found


def listed_owners(finder: "PrecisionFinder", iterable: cst.BaseExpression, scope: Scope) -> Set[ModulePath]:
    """The modules whose parameters a loop iterates through a list of modules: `for model in
    models: for param in model.parameters(): ...` iterates those of each member of `models`."""
    found: Set[ModulePath] = set()
    for node in _state_calls(iterable):
        owner = node.func.value  # type: ignore[attr-defined]
        for member in _members(finder, owner, scope):
            found |= finder.paths(member, scope)
    return found


def _members(finder: "PrecisionFinder", value: cst.BaseExpression, scope: Scope, depth: int = 0) -> List[str]:
    """The modules a list holds, as written: the elements of a list or tuple display, of the
    displays a variable is given and filled with (`.append(m)`, `.extend([a, b])`), and, for a
    loop variable, of what it is drawn from. Empty when it is no list of named modules."""
    if isinstance(value, (cst.List, cst.Tuple)):
        return [name for name in (dotted_name(e.value) for e in value.elements) if name is not None]
    name = dotted_name(value)
    if name is None or "." in name or depth > 3:
        return []
    found: List[str] = []
    for binding in finder.resolver.bindings(name, scope):
        if binding.kind == "for" and isinstance(binding.node, cst.For):
            drawn = drawn_from(binding.node, name)
            if drawn is not value:
                found += _members(finder, drawn, binding.value_scope, depth + 1)
        elif isinstance(binding.value, (cst.List, cst.Tuple)):
            found += _members(finder, binding.value, binding.value_scope, depth + 1)
            for filled, where, _ in finder.appended().get(finder.resolver.identity(name, scope), []):
                found += _members(finder, filled, where, depth + 1) if isinstance(filled, (cst.List, cst.Tuple)) else [n for n in [dotted_name(filled)] if n is not None]
    return found


def _literal_false(call: cst.Call) -> bool:
    """`requires_grad_(False)`, `requires_grad_(requires_grad=False)`."""
    positional, keywords = split_args(call.args)
    value = positional[0] if positional else keywords.get("requires_grad")
    return isinstance(value, cst.Name) and value.value == "False"


def _may_unfreeze(finder: "PrecisionFinder") -> bool:
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


def _handed_away(precision: "Precision", path: ModulePath) -> bool:
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
            if name is not None and any(_nested(path, other) for other in finder.paths(name, record.unit.scope)):
                return True
    return False
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
        copied = finder._copied(binding.value)
        if copied is None or not isinstance(init.node, cst.FunctionDef):
            continue
        node, _, source, _ = copied
        parts = source.split(".")
        param = parts[0]
        if param == "self" or param not in init.params or any(b.kind != "param" for b in init.bindings.get(param, ())):
            continue
        own = finder.paths(attribute, init)
        if any(_nested(path, mine) for cast in finder.facts.casts for path in cast.paths for mine in own):
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
    """Whether a value may copy a module or its tensors (before asking `_copied`): a
    `deepcopy(...)`, or a comprehension over a module's parameters or state."""
    if isinstance(value, (cst.DictComp, cst.ListComp)):
        return _iterates_state(value.for_in.iter)
    return any(isinstance(node, cst.Call) and (dotted_name(node.func) or "").rsplit(".", 1)[-1] == "deepcopy" for node in iter_tree(value))


def _decays_of(precision: "Precision", scope: Scope, attribute: str, own: Set[ModulePath]) -> List[Tuple[CodeUnit, cst.CSTNode]]:
    """The loops of the class's methods that decay the copy `attribute` in place (with the
    method), none if one assigns its parameters anew (`p.data = p.data.float()`)."""
    finder = precision.finder
    found: List[Tuple[CodeUnit, cst.CSTNode]] = []
    for unit, loop, _ in precision.model.index.loops:
        if unit.class_name != scope.name or not isinstance(loop, cst.For):
            continue
        # Over a module's parameters or state (what the pre-check's AVERAGE mark sees: a module
        # that exports this has it, `evidence.EXPORTS`).
        if not _iterates_state(loop.iter):
            continue
        if any(_assigns_data_of(node, names_bound(loop.target)) for node in iter_tree(loop.body)):
            if any(_nested(path, mine) for path in finder._state_owners(loop.iter, unit.scope) for mine in own):
                return []
        update = _decaying_update(loop.body)
        if update is not None and any(_nested(path, mine) for path in finder._decayed_paths(loop, update[1], unit.scope) for mine in own):
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


def _foreign_averages(precision: "Precision") -> List[ForeignAverage]:
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
            source = finder._module_source(passed_for(record.node, average.get("param"), average.get("position")))
            if source is None:
                continue
            suffix = tuple(average.get("path", ()))
            sources = {(key, rest + suffix) for key, rest in finder.paths(source, record.unit.scope)}
            for cast in originals:
                if any(cast.covers(path) for path in sources):
                    found.append(foreign(ModuleCast(record.node, record, cast.dtypes, binding.name, paths, source, guard_facts(record), cast)))
    return found
