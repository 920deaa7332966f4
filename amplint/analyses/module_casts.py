"""Casts of modules: `model.half()`, `model.to(torch.float16)`, `unet.to(device,
dtype=weight_dtype)`, `Net().cuda().half()`, `ema = deepcopy(model).half()`, with every dtype
the cast can be (followed as `Resolver.dtypes` does).

A module's `.half()`/`.to()` casts it in place and returns it, so `model.half()` anywhere casts
`model`; a cast of a fresh object (`deepcopy(model).half()`) casts only what it is assigned
to. Tensors are cast the same way; they matter only when an optimizer trains the variable's
parameters. A pipeline's `from_pipe(pipeline, torch_dtype=...)` casts every module it holds;
a call of another linted module's function that leaves the module it is handed cast
(`parameter_casts`) is a cast at the call. A copy of a cast module (`ema =
copy.deepcopy(model)` after `model.half()`, `{n: p.detach().clone() for n, p in
model.named_parameters()}`) has its dtype: a cast of the copy that `inherits` the original's.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Dict, FrozenSet, Iterator, List, Optional, Set, Tuple

import libcst as cst

from amplint.analyses.module_paths import (
    PIPELINE_SETTINGS,
    ModulePath,
    ModulePaths,
    builds_pipeline,
    guard_facts,
    module_chain,
    state_calls,
)
from amplint.semantic import Assumption, CallRecord, CodeUnit, Resolver, Scope, dotted_name, names_bound, split_args
from amplint.semantic.pytorch.api import CAST_METHODS

_COPIES = frozenset({"copy.deepcopy", "deepcopy"})
# What builds a pipeline from another one's modules, cast in place to its `torch_dtype=`.
_FROM_PIPE = frozenset({"from_pipe"})



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


# What a call of another module's function leaves cast: each module it passes, and the dtypes
# (`parameter_casts.call_casts`).
CallCasts = Callable[[CallRecord], List[Tuple[cst.BaseExpression, FrozenSet[str], str]]]


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


def casts_at(finder: ModulePaths, record: CallRecord, call_casts: Optional[CallCasts]) -> List[ModuleCast]:
    """The casts a call makes: a module's (`model.half()`), a pipeline's (`from_pipe(pipeline,
    torch_dtype=...)`), and, with `call_casts`, those a call of another linted module's
    function leaves (`val.run(model=ema.ema)`)."""
    found = [cast for cast in [_cast(finder, record)] if cast is not None]
    if call_casts is not None:
        found += _call_casts(finder, record, call_casts(record))
    return found


def _cast(finder: ModulePaths, record: CallRecord) -> Optional[ModuleCast]:
    node = record.node
    func = node.func
    if isinstance(func, cst.Attribute) and func.attr.value in _FROM_PIPE and builds_pipeline(func):
        return _pipe_cast(finder, record)
    if not isinstance(func, cst.Attribute) or (func.attr.value not in CAST_METHODS and func.attr.value != "to"):
        return None
    scope = record.unit.scope
    dtypes = cast_dtypes(node, finder.resolver, scope)
    if dtypes is None:
        return None
    _, root = module_chain(func.value)
    paths: Set[ModulePath] = set()
    names: List[str] = []
    copy_of = None
    name = dotted_name(root)
    if name is not None:
        names.append(name)
        paths |= finder.paths(name, scope)
    elif isinstance(root, cst.Call) and (finder.resolver.qualified(root.func) or dotted_name(root.func)) in _COPIES:
        copy_of = dotted_name(root.args[0].value) if root.args else None
    binding = finder.assigned.get(id(node))
    if binding is not None:
        names.append(binding.name)
        paths |= finder.paths(binding.name, binding.value_scope)
    held = finder.held(name, scope) if name is not None and "." not in name else {}
    if not names:
        return None
    cast = ModuleCast(node, record, dtypes, names[0], frozenset(paths | set(held)), copy_of, guard_facts(record))
    cast.held.update(held)
    return cast


def _call_casts(finder: ModulePaths, record: CallRecord, cast: List[Tuple[cst.BaseExpression, FrozenSet[str], str]]) -> List[ModuleCast]:
    """`val.run(model=ema.ema)` of another module, which leaves the module it is handed
    cast (`parameter_casts`): a cast of what is passed, at the call."""
    found = []
    for passed, dtypes, via in cast:
        name = dotted_name(passed)
        if name is not None:
            paths = frozenset(finder.paths(name, record.unit.scope))
            found.append(ModuleCast(record.node, record, dtypes, name, paths, None, guard_facts(record), via=via))
    return found


def _pipe_cast(finder: ModulePaths, record: CallRecord) -> Optional[ModuleCast]:
    """`AutoPipelineForImage2Image.from_pipe(pipeline, torch_dtype=weight_dtype)`: the new
    pipeline shares the modules of `pipeline` (and holds those handed to it by keyword),
    and diffusers casts them all in place to `torch_dtype` (`dtype=`). Without a dtype,
    no cast to a lower precision."""
    node = record.node
    scope = record.unit.scope
    positional, keywords = split_args(node.args)
    setting = keywords.get("torch_dtype", keywords.get("dtype"))
    if setting is None:
        return None
    source = positional[0] if positional else keywords.get("pipeline")
    name = dotted_name(source) if source is not None else None
    held: Dict[ModulePath, str] = finder.held(name, scope) if name is not None and "." not in name else {}
    for keyword, value in keywords.items():
        module = finder.module_source(value) if keyword not in PIPELINE_SETTINGS and keyword != "pipeline" else None
        if module is not None:
            for path in finder.paths(module, scope):
                held.setdefault(path, module)
    if not held:
        return None
    # Named as the new pipeline, which holds them all.
    binding = finder.assigned.get(id(node))
    built = binding.name if binding is not None else name or "the pipeline"
    cast = ModuleCast(node, record, finder.resolver.dtypes(setting, scope), built, frozenset(held), None, guard_facts(record))
    cast.held.update(held)
    return cast


def copies(finder: ModulePaths, originals: List[ModuleCast]) -> List[ModuleCast]:
    """Copies of a cast module, which have its dtype: `ema = copy.deepcopy(model)` after
    `model.half()`, and containers of copies of its tensors (`{n: p.detach().clone() for n, p
    in model.named_parameters()}`, `[p.clone() for p in model.parameters()]`); a copy cast
    itself (`deepcopy(model).float()`, `p.clone().float()`) has the dtype it is cast to. Each
    becomes a cast of the variable it is assigned to that `inherits` the original's (whether
    the copy runs after the original is asked later, of what may run after it)."""
    found: List[ModuleCast] = []
    for binding in finder.bindings:
        if binding.kind != "assign" or binding.value is None:
            continue
        copy = copied(finder, binding.value)
        if copy is None:
            continue
        node, call, source, where = copy
        record = finder.records.get(id(call))
        if record is None:
            continue
        paths = frozenset(finder.paths(binding.name, binding.value_scope))
        found += _inherit(finder, originals, node, record, source, where, binding.name, paths)
    for unit, loop, _ in finder.index.loops:
        # `for n, p in model.named_parameters(): ema[n] = p.detach().clone()` (or `.append(...)`)
        state = next(state_calls(loop.iter), None) if isinstance(loop, cst.For) else None
        if state is None:
            continue
        for container, element in _filled(loop):
            drawn = _tensor_copied(element)
            source = finder.module_source(state.func.value)  # type: ignore[attr-defined]
            record = finder.records.get(id(state))
            if drawn is None or drawn not in names_bound(loop.target) or source is None or record is None:
                continue
            paths = frozenset(finder.paths(container, unit.scope))
            found += _inherit(finder, originals, element, record, source, unit.scope, container, paths)
    return found


def _inherit(finder: ModulePaths, originals, node, record, source, where, name, paths) -> List[ModuleCast]:
    """A cast of the copy `name` for each cast of the module `source` it copies."""
    sources = finder.paths(source, where)
    return [
        ModuleCast(node, record, cast.dtypes, name, paths, source, guard_facts(record), cast)
        for cast in originals
        if cast.dtypes and any(cast.covers(path) for path in sources)
    ]


def copied(finder: ModulePaths, value: cst.BaseExpression) -> Optional[Tuple[cst.BaseExpression, cst.Call, str, Scope]]:
    """When `value` copies a module or its tensors without casting them: (the copy, a call
    that evaluates it, the module copied as written, the scope it is read in)."""
    calls, root = module_chain(value)
    if any(cast_dtypes_of(call) for call in calls):
        return None  # `deepcopy(model).half()` is a cast of its own
    if isinstance(root, cst.Call) and root.args and (finder.resolver.qualified(root.func) or dotted_name(root.func)) in _COPIES:
        original = root.args[0].value
        state = next(state_calls(original), None)
        source = finder.module_source(state.func.value if state is not None else original)  # type: ignore[attr-defined]
        record = finder.records.get(id(root))
        if source is None or record is None:
            return None
        return root, root, source, record.unit.scope
    if isinstance(value, (cst.DictComp, cst.ListComp)):
        element = value.value if isinstance(value, cst.DictComp) else value.elt
        drawn = _tensor_copied(element)
        state = next(state_calls(value.for_in.iter), None)
        if drawn is None or state is None or value.for_in.inner_for_in is not None:
            return None
        if drawn not in names_bound(value.for_in.target):
            return None
        source = finder.module_source(state.func.value)  # type: ignore[attr-defined]
        record = finder.records.get(id(state))
        if source is None or record is None:
            return None
        return value, state, source, record.unit.scope
    return None


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


def _filled(loop: cst.For) -> Iterator[Tuple[str, cst.BaseExpression]]:
    """What a loop's own statements put into containers: `ema[n] = v` and `ema.append(v)` ->
    (`ema`, `v`); not in nested loops or functions."""
    for statement in loop.body.body if isinstance(loop.body, cst.IndentedBlock) else ():
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
