"""Which module a name is: the path a module is known by, followed through aliases,
parameters and pipelines; and what the file's calls and lists hold (the base of the
precision facts' finder, `precision_facts.PrecisionFinder`).

A module is known by its path: the identity of the variable it starts from
(`Resolver.identity`) and the attributes after it (`model.encoder` is (`fn:main:model`,
`encoder`); DDP's `.module` is transparent). Paths are followed through simple aliases
(`m = model.module`, `model = DDP(model)`, `model = model.to(device)`) and parameters (what
the calls of the file pass). What cannot be followed is unknown, and unknown never pairs a
cast with an optimizer.

A diffusers pipeline holds the modules it is built from (`StableDiffusionPipeline(unet=unet,
...)`); a list of modules its members (`models = [unet]`, `models.extend([text_encoder])`); a
list of parameters what fills it (`params.append(p)`, `opt.add_param_group(g)`, `+=`).
"""

from __future__ import annotations

from typing import Dict, FrozenSet, Iterator, List, Optional, Set, Tuple

import libcst as cst

from amplint.semantic import (
    Assumption,
    Binding,
    CallRecord,
    GuardFrame,
    ModuleIndex,
    Resolver,
    Scope,
    all_bindings,
    assumptions,
    dotted_name,
    drawn_from,
    iter_tree,
    own_returns,
)
from amplint.semantic.pytorch import vocabulary
from amplint.semantic.pytorch.api import MODULE_CHAIN, STATE_METHODS

# What fills a list of parameters, or an optimizer: `params.append(p)`, `opt.add_param_group(g)`.
_FILLING = frozenset({"append", "extend", "insert", "add", "add_param_group"})
# What returns the module it is handed: `accelerator.unwrap_model(unet)`, diffusers' `unwrap_model(unet)`.
_UNWRAPPING = frozenset({"unwrap_model", "de_parallel"})
# A pipeline constructor's keywords that are no module it holds.
PIPELINE_SETTINGS = frozenset({"torch_dtype", "dtype", "revision", "variant", "safety_checker", "cache_dir", "device_map"})


def builds_pipeline(func: cst.BaseExpression) -> bool:
    """`StableDiffusionPipeline(...)`, `DiffusionPipeline.from_pretrained(...)`,
    `AutoPipelineForText2Image.from_pretrained(...)`: a diffusers pipeline built from modules."""
    parts = (dotted_name(func) or "").split(".")
    return any(part[:1].isupper() and "Pipeline" in part for part in parts[-2:])


# A module's path: the identity of the variable it starts from, and the attributes after it.
ModulePath = Tuple[str, Tuple[str, ...]]


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


def nested(one: ModulePath, other: ModulePath) -> bool:
    """Whether one module path contains the other."""
    return one[0] == other[0] and (one[1][: len(other[1])] == other[1] or other[1][: len(one[1])] == one[1])


class ModulePaths:
    """The module paths of one file's names, and the tables of its calls and bindings that
    following them needs."""

    def __init__(self, index: ModuleIndex, resolver: Resolver) -> None:
        self.index = index
        self.resolver = resolver
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
            source = self.module_source(value)
            if source is not None and (source != root or where is not scope):
                found |= {(key, inner + suffix) for key, inner in self.paths(source, where, depth + 1)}
        return found

    def module_source(self, value: Optional[cst.BaseExpression]) -> Optional[str]:
        """The dotted name a value is the same module as: `model`, `model.module`,
        `model.to(device)`, `DDP(model)`, `torch.compile(model)`."""
        if value is None:
            return None
        if isinstance(value, cst.IfExp):
            # `model.module if is_parallel(model) else model`: one module either way (DDP's
            # `.module` is the model)
            sources = {self.module_source(branch) for branch in (value.body, value.orelse)}
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
            if isinstance(root, cst.Call) and builds_pipeline(root.func):
                for arg in root.args:
                    module = self.module_source(arg.value) if arg.keyword is not None else None
                    if module is not None and arg.keyword.value not in PIPELINE_SETTINGS:  # type: ignore[union-attr]
                        for path in self.paths(module, where):
                            found.setdefault(path, module)
            elif dotted_name(root) is not None:
                found.update(self.held(dotted_name(root), where, depth + 1, seen))  # type: ignore[arg-type]
        return found

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

    def state_owners(self, expression: cst.BaseExpression, scope: Scope) -> Iterator[ModulePath]:
        """The modules whose parameters or state an expression iterates:
        `ema.parameters()`, `self.ema.state_dict().items()`."""
        for node in state_calls(expression):
            owner = dotted_name(node.func.value)  # type: ignore[attr-defined]
            if owner is not None:
                yield from self.paths(owner, scope)


def _returned(function: cst.CSTNode) -> Set[Optional[str]]:
    """The names a function returns (`return optimizer`), not in a nested one."""
    return {dotted_name(node.value) for node in own_returns(function) if node.value is not None}


def state_calls(expression: cst.BaseExpression) -> Iterator[cst.Call]:
    """The calls of STATE_METHODS in `expression` (`ema.parameters()`, `m.state_dict()`)."""
    for node in iter_tree(expression):
        if isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute) and node.func.attr.value in STATE_METHODS:
            yield node


def _branches(value: Optional[cst.BaseExpression]) -> List[cst.BaseExpression]:
    """`a if c else b` -> [a, b]; None -> []; anything else -> [itself]."""
    if value is None:
        return []
    if isinstance(value, cst.IfExp):
        return _branches(value.body) + _branches(value.orelse)
    return [value]


def handed_modules(finder: ModulePaths, call: cst.Call, scope: Scope) -> List[Optional[str]]:
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


def listed_owners(finder: ModulePaths, iterable: cst.BaseExpression, scope: Scope) -> Set[ModulePath]:
    """The modules whose parameters a loop iterates through a list of modules: `for model in
    models: for param in model.parameters(): ...` iterates those of each member of `models`."""
    found: Set[ModulePath] = set()
    for node in state_calls(iterable):
        owner = node.func.value  # type: ignore[attr-defined]
        for member in _members(finder, owner, scope):
            found |= finder.paths(member, scope)
    return found


def _members(finder: ModulePaths, value: cst.BaseExpression, scope: Scope, depth: int = 0) -> List[str]:
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
