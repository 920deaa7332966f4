"""What a file's code calls, as the project's ambient-autocast pass needs it (`CallGraph`).

Model and loss code rarely opens autocast itself: a training loop elsewhere does, and calls
the model in it. Which functions of the project run under which autocast is found by
following calls from the regions down (`amplint.project.ambient`), across files. This family
says, for one file, where those calls go:

- each enabled autocast region of the file (a `with`, a decorated function, a hook a
  framework runs under its own autocast), with the devices and dtypes it may run in, and the
  calls made inside it;
- each function and method, with the calls it makes outside a region of its own: those run
  under whatever autocast its caller has on. A call under autocast switched off
  (`torch.autocast(..., enabled=False)`) leads nowhere, and a function that may switch
  autocast off itself (`custom_fwd(cast_inputs=...)`, a decorator amplint does not know,
  `torch.is_autocast_enabled()`) takes no caller's autocast.

A call is followed where its target is certain: a function or method of the file, a class
of the file called as a module (`model(x)` with `model = Net(...)`, `self.block(h)` with
`self.block = Block(...)` in `__init__`, `self(x)`, each block of an `nn.ModuleList`/
`nn.Sequential` of one class, a parameter `model` that the file's calls of its function
pass a `Net(...)` for), and the same for a function or class another module defines and
this one imports: then the target is named as imported (module, relative level, name), and
the project pass resolves it among the linted files. Anything less certain (a factory's
result, a registry, a parameter no call of the file passes a known class for) is not
followed: nothing is guessed under autocast.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, FrozenSet, List, Optional, Set, Tuple

import libcst as cst

from amplint.semantic import (
    Analysis,
    AutocastRegion,
    CallRecord,
    CodeUnit,
    HelperCall,
    Scope,
    SemanticModel,
    dotted_name,
    framework_of,
    imported_module,
    own_returns,
    precisions,
    source_text,
)
from amplint.semantic.pytorch.frameworks import BF16_PRECISIONS, FP16_PRECISIONS

# nn.Module methods that return the module itself, and wrappers whose call runs the module
# they wrap (`DDP(model)(x)` runs `model.forward`).
_RETURNS_SELF = frozenset({"to", "cuda", "cpu", "train", "eval", "requires_grad_", "half", "float", "bfloat16", "double"})
_WRAPPERS = frozenset(
    {
        "torch.nn.parallel.DistributedDataParallel", "torch.nn.DataParallel", "torch.nn.parallel.DataParallel",
        "torch.compile", "torch.jit.script", "torch.nn.parallel.distributed.DistributedDataParallel",
    }
)
# Framework methods that hand back what they are given, wrapped (accelerate's, Fabric's).
_HANDS_BACK = frozenset({"prepare", "prepare_model", "setup", "setup_module"})
_CONTAINERS = frozenset({"torch.nn.ModuleList", "torch.nn.Sequential", "torch.nn.modules.container.ModuleList", "torch.nn.modules.container.Sequential"})
_MODULE_DICTS = frozenset({"torch.nn.ModuleDict", "torch.nn.modules.container.ModuleDict"})
# Decorators that leave a function's autocast as its caller's.
_PLAIN_DECORATORS = frozenset(
    {"staticmethod", "classmethod", "property", "cached_property", "wraps", "override", "no_grad", "inference_mode",
     "enable_grad", "compile", "script", "ignore", "unused", "export", "lru_cache", "cache", "abstractmethod"}
)


# `Target.member` for an instance a factory of another module returns.
RETURNED = "<returned>"


@dataclass(frozen=True)
class Target:
    """Where a call goes: `unit` (a function of this file: its qualified name, `Net.forward`),
    or a name another module defines, as this file imports it (`module`, `level`, `name`,
    and `member`: "forward"/"__call__" for an instance of an imported class called as a
    module, a method's name for `self.m()` inherited from an imported base)."""

    unit: Optional[str] = None
    module: Optional[str] = None
    level: int = 0
    name: Optional[str] = None
    member: Optional[str] = None
    # What the callers of the top-level function `unit` pass for its parameter of this name,
    # at this position (`model(x)` in `def train_one_epoch(model, loader)`): known only to the
    # project pass, from the calls other files make (`Edge.arguments`).
    parameter: Optional[str] = None
    position: int = -1

    def to_json(self) -> list:
        if self.parameter is not None:
            return [self.unit, self.parameter, self.position]
        return [self.unit] if self.unit is not None else [self.module, self.level, self.name, self.member]


@dataclass(frozen=True)
class Edge:
    """A call that may run another function under the caller's autocast."""

    call: cst.Call
    target: Target


@dataclass(frozen=True)
class Seed:
    """Where autocast starts: a region the code opens (its `anchor`, the autocast call), or a
    framework's convention (the call that hands a model to `accelerator.prepare`, whose
    forward accelerate then runs under its autocast): the unit it is written in, how a chain
    names it, the (device, dtype) pairs it may run in, and the calls it runs there."""

    anchor: cst.CSTNode
    unit: CodeUnit
    words: str
    contexts: Tuple[Tuple[str, str], ...]
    edges: Tuple[Edge, ...]


class CallGraph(Analysis):
    def __init__(self, model: SemanticModel) -> None:
        super().__init__(model)
        self._units: Dict[int, CodeUnit] = {id(u.node): u for u in model.units if not u.is_module}
        self._edges: Dict[int, List[Tuple[CallRecord, Target]]] = {}
        self._callers: Optional[Dict[int, List[Tuple[CallRecord, HelperCall]]]] = None

    # ---------------------------------------------------------------- what the file calls
    def seeds(self) -> List[Seed]:
        """Where autocast starts in this file: its regions, and the models a framework object
        that may run in a low precision prepares (accelerate wraps their forward in its
        autocast)."""
        found = [Seed(region.anchor, region.unit, words(region), tuple(region_contexts(region)), tuple(edges)) for region, edges in self.regions()]
        return [seed for seed in found + self._prepared() if seed.contexts and seed.edges]

    def _prepared(self) -> List[Seed]:
        """`model = accelerator.prepare(model)` with `accelerator = Accelerator(mixed_precision=
        "fp16")` (or a setting that may be): the model's forward runs under accelerate's
        autocast, float16 on CUDA, or bfloat16."""
        found: List[Seed] = []
        for record in self.model.index.calls:
            func = record.node.func
            if not isinstance(func, cst.Attribute) or not record.node.args:
                continue
            receiver = dotted_name(func.value)
            if receiver is None:
                continue
            for value, where in self.model.resolver.values(receiver, record.unit.scope):
                if not isinstance(value, cst.Call):
                    continue
                framework = framework_of(value, self.model.resolver)
                if framework is None or func.attr.value not in framework.prepare_methods or framework.name != "accelerate":
                    continue
                settings, _ = precisions(value, framework, where, self.model.resolver)
                contexts = _framework_contexts(settings)
                edges = tuple(
                    Edge(record.node, target)
                    for arg in record.node.args
                    if not arg.star
                    for target in self._argument_targets(arg.value, record.unit.scope)
                )
                if contexts and edges:
                    found.append(Seed(record.node, record.unit, f"`{receiver}.{func.attr.value}(...)` of `{source_text(value)}`", contexts, edges))
                break
        return found

    def _argument_targets(self, value: cst.BaseExpression, scope: Scope) -> List[Target]:
        classes = self._classes_of(value, scope, 0)
        if not classes:
            return []
        targets = [self._instance_target(cls) for cls in sorted(classes) if not (cls[0] == "import" and _library(cls[1]))]
        return [target for target in targets if target is not None]

    def regions(self) -> List[Tuple[AutocastRegion, List[Edge]]]:
        """Each enabled autocast region of the file that may run in a low precision, with the
        calls made inside it; a hook a framework runs under its own autocast is a region
        whose calls are all of the hook's own (outside a region of its own)."""
        found: List[Tuple[AutocastRegion, List[Edge]]] = []
        by_region: Dict[int, List[Edge]] = {}
        regions: Dict[int, AutocastRegion] = {}
        for unit in self.model.units:
            hook = self.model.regions.hook_regions.get(id(unit))
            for record, target in self.edges_of(unit, inside=True):
                context = self.model.regions.context(record)
                if context.autocast_off:
                    continue  # switched off, in the region or around it
                region = context.region if context.region is not None else hook
                if region is None or not _low_precision(region):
                    continue
                regions[id(region)] = region
                by_region.setdefault(id(region), []).append(Edge(record.node, target))
        for key, edges in by_region.items():
            found.append((regions[key], edges))
        return found

    def calls(self, unit: CodeUnit) -> List[Edge]:
        """The calls `unit` makes that run under its caller's autocast (none of its own, not
        switched off), with where they go."""
        found = []
        for record, target in self.edges_of(unit, inside=False):
            context = self.model.regions.context(record)
            if context.region is None and not context.autocast_off and not self._in_unknown_context(record):
                found.append(Edge(record.node, target))
        return found

    def takes_callers_autocast(self, unit: CodeUnit) -> bool:
        """Whether what `unit` runs is under its caller's autocast: not a function that may
        switch it off itself, nor a hook a framework runs under an autocast of its own."""
        if id(unit) in self.model.regions.hook_regions:
            return False
        for decorator in getattr(unit.node, "decorators", ()):
            expression = decorator.decorator.func if isinstance(decorator.decorator, cst.Call) else decorator.decorator
            if (dotted_name(expression) or "").rsplit(".", 1)[-1] not in _PLAIN_DECORATORS:
                return False
        return not any((dotted_name(record.node.func) or "").endswith("is_autocast_enabled") for record in unit.calls)

    def edges_of(self, unit: CodeUnit, inside: bool) -> List[Tuple[CallRecord, Target]]:
        """Every call of `unit` (run where it is written) whose target is certain."""
        found = self._edges.get(id(unit))
        if found is None:
            found = self._edges[id(unit)] = [
                (record, target) for record in unit.calls if record.immediate for target in self.targets(record)
            ]
        return found

    # ---------------------------------------------------------------- where a call goes
    def targets(self, record: CallRecord) -> List[Target]:
        """Where a call goes, when that is certain; empty otherwise. Most calls have one
        target; a container of modules (`nn.Sequential(A(), B())`) has one per class."""
        item = self.model.classify(record)
        if isinstance(item, HelperCall) and item.callee is not None:
            return [Target(unit=item.callee.name)]
        func = record.node.func
        scope = record.unit.scope
        name = dotted_name(func)
        if name is None:
            return []
        if name == "self":
            owner = self.model.resolver.owning_class(scope)
            forward = self._method(owner, "forward") if owner is not None else None
            return [forward] if forward is not None else []
        if isinstance(func, cst.Name):
            return self._named(func.value, scope) or self._parameter_target(func.value, scope)
        assert isinstance(func, cst.Attribute)
        owner_name, method = dotted_name(func.value), func.attr.value
        if owner_name is None:
            return []
        if owner_name in ("self", "cls"):
            for cls in self.model.resolver.class_and_bases(scope):
                found = self._method(cls, method, inherited=False)
                if found is not None:
                    return [found]
            inherited = self._inherited(scope, method)
            if inherited is not None:
                return [inherited]
            return self._instances(f"self.{method}", scope)  # `self.block(h)`
        if "." not in owner_name:
            for binding in self.model.resolver.bindings(owner_name, scope):
                if binding.kind == "import":
                    found = imported_module(binding.node, owner_name)
                    if found is not None:  # `models.build(x)`, `F.attention(...)` of a linted module
                        module, level, imported = found
                        target = module if imported is None else (f"{module}.{imported}" if module else imported)
                        return [Target(module=target, level=level, name=method)] if not _library(target) else []
        return []

    def _named(self, name: str, scope: Scope) -> List[Target]:
        for binding in self.model.resolver.bindings(name, scope):
            if binding.kind == "import":
                found = imported_module(binding.node, name)
                if found is not None and found[2] is not None and not _library(found[0]):
                    return [Target(module=found[0], level=found[1], name=found[2])]
            if binding.kind == "class" and name in self.model.index.classes:
                return []  # building an instance: its `__init__` runs, not what autocast lowers
        return self._instances(name, scope)

    def _instances(self, name: str, scope: Scope) -> List[Target]:
        """What calling the object `name` runs: the forward (or `__call__`) of the one class it
        is an instance of, through `.to(device)`, `DDP(...)`, `torch.compile(...)`; of each
        class of an `nn.ModuleList`/`nn.Sequential` it is, or it is an element of (`for blk
        in self.blocks: h = blk(h)`)."""
        classes: Set[Tuple[str, ...]] = set()
        values = self.model.resolver.values(name, scope)
        if not values:
            return []
        for value, where in values:
            if value is None:
                drawn = self._drawn_from(name, scope)
                if drawn is None:
                    passed = self._passed(name, scope, 0)
                    if passed is None:
                        return []
                    classes |= passed
                    continue
                value, where = drawn
            found = self._classes_of(value, where, 0)
            if found is None:
                return []
            classes |= found
        targets = []
        for cls in sorted(classes):
            if cls[0] == "import" and _library(cls[1]):
                continue  # torch's own modules (`nn.Linear`): no linted code runs there
            target = self._instance_target(cls)
            if target is None:
                return []
            targets.append(target)
        return targets

    def arguments(self, record: CallRecord) -> Dict[str, List[Target]]:
        """What a call passes that the project pass may follow into its callee's parameters:
        for each argument (by position, "0", or keyword) that is an instance of classes the
        code shows, where calling it goes (`train_one_epoch(Net(), loader)`: {"0":
        [Net.forward]})."""
        found: Dict[str, List[Target]] = {}
        position = 0
        for arg in record.node.args:
            if arg.star:
                break
            key = arg.keyword.value if arg.keyword is not None else str(position)
            if arg.keyword is None:
                position += 1
            targets = self._argument_targets(arg.value, record.unit.scope)
            if targets:
                found[key] = targets
        return found

    def _parameter_target(self, name: str, scope: Scope) -> List[Target]:
        """`model(x)` for a parameter `model` of a top-level function no call of this file
        passes a known class for: what other files' calls pass, for the project pass."""
        bindings = self.model.resolver.bindings(name, scope)
        if len(bindings) != 1 or bindings[0].kind != "param" or bindings[0].scope is not scope:
            return []
        unit = next((u for u in self.model.units if u.scope is scope and not u.is_module), None)
        if unit is None or "." in unit.name or name not in unit.parameters:
            return []
        return [Target(unit=unit.name, parameter=name, position=unit.parameters.index(name))]

    def _passed(self, name: str, scope: Scope, depth: int) -> Optional[Set[Tuple[str, ...]]]:
        """For a parameter of a function of the file (`def train_one_epoch(model, loader)`):
        the classes the file's calls of that function pass for it (`train_one_epoch(Net(),
        loader)`, a `model = Net()` passed), each call that passes one the code shows; None
        when none does."""
        bindings = self.model.resolver.bindings(name, scope)
        if len(bindings) != 1 or bindings[0].kind != "param":
            return None
        unit = next((u for u in self.model.units if u.scope is bindings[0].scope and not u.is_module), None)
        if unit is None:
            return None
        found: Set[Tuple[str, ...]] = set()
        for record, item in self._callers_of(unit):
            argument = item.argument_for(name)
            classes = self._classes_of(argument, record.unit.scope, depth + 1) if argument is not None else None
            found |= classes or set()
        return found or None

    def _callers_of(self, unit: CodeUnit) -> List[Tuple[CallRecord, HelperCall]]:
        """The file's calls of `unit` from other units, each classified once for all."""
        if self._callers is None:
            self._callers = {}
            for record in self.model.index.calls:
                item = self.model.classify(record)
                if isinstance(item, HelperCall) and item.callee is not None and record.unit is not item.callee:
                    self._callers.setdefault(id(item.callee), []).append((record, item))
        return self._callers.get(id(unit), [])

    def _drawn_from(self, name: str, scope: Scope) -> Optional[Tuple[cst.BaseExpression, Scope]]:
        """For a `for` target over a container of modules (or its `enumerate`): the container."""
        bindings = self.model.resolver.bindings(name, scope)
        if len(bindings) != 1 or bindings[0].kind != "for" or not isinstance(bindings[0].node, cst.For):
            return None
        loop = bindings[0].node
        if isinstance(loop.target, cst.Name):
            return loop.iter, bindings[0].value_scope
        # `for i, block in enumerate(self.blocks)`
        target, drawn = loop.target, loop.iter
        if (
            isinstance(target, (cst.Tuple, cst.List))
            and len(target.elements) == 2
            and isinstance(target.elements[1].value, cst.Name)
            and target.elements[1].value.value == name
            and isinstance(drawn, cst.Call)
            and dotted_name(drawn.func) == "enumerate"
            and drawn.args
            and not drawn.args[0].star
        ):
            return drawn.args[0].value, bindings[0].value_scope
        return None

    def _classes_of(self, value: cst.BaseExpression, scope: Scope, depth: int, seen: FrozenSet[int] = frozenset()) -> Optional[Set[Tuple[str, ...]]]:
        """The classes `value` is an instance of, each as ("local", name) or ("import",
        module, level, name); None when not certain. `seen`: the bindings on the way (`model
        = accelerator.prepare(model)` holds what `model` held before it)."""
        if depth > 4:
            return None
        while isinstance(value, cst.Call) and isinstance(value.func, cst.Attribute) and value.func.attr.value in _RETURNS_SELF:
            value = value.func.value
        name = dotted_name(value)
        if name is not None:  # `self.blocks`, `model`: what it holds, wherever it is bound
            # Each class a binding shows runs when that binding holds (`model = GPT(conf)` in
            # one branch, `GPT.from_pretrained(...)` in another): reached, whatever the others hold.
            found_classes: Set[Tuple[str, ...]] = set()
            bindings = self.model.resolver.bindings(name, scope)
            if not bindings and name.count(".") >= 2:
                return self._module_dict_entry(name, scope, depth, seen)
            for binding in bindings:
                if id(binding) in seen:
                    continue
                held = binding.value if binding.value is not None else self._handed_back(binding, name)
                inner = self._classes_of(held, binding.value_scope, depth + 1, seen | {id(binding)}) if held is not None else None
                found_classes |= inner or set()
            return found_classes or None
        if not isinstance(value, cst.Call):
            return None
        qualified = self.model.resolver.qualified(value.func) or ""
        if qualified in _WRAPPERS and value.args:
            return self._classes_of(value.args[0].value, scope, depth + 1)
        if qualified in _CONTAINERS:
            found: Set[Tuple[str, ...]] = set()
            for arg in value.args:
                element = arg.value
                if arg.star and isinstance(element, (cst.ListComp, cst.GeneratorExp)):
                    element = element.elt
                elif isinstance(element, (cst.ListComp, cst.GeneratorExp)):
                    element = element.elt
                elif isinstance(element, (cst.List, cst.Tuple)):
                    for item in element.elements:
                        inner = self._classes_of(item.value, scope, depth + 1)
                        if inner is None:
                            return None
                        found |= inner
                    continue
                inner = self._classes_of(element, scope, depth + 1)
                if inner is None:
                    return None
                found |= inner
            return found or None
        class_name = dotted_name(value.func)
        if class_name is None:
            return None
        if class_name in self.model.index.classes:
            return {("local", class_name)}
        record = self.model.call_record(value)
        item = self.model.classify(record) if record is not None else None
        if isinstance(item, HelperCall) and item.callee is not None:  # `model = build_model(cfg)`, a factory of the file
            return self._returned(item.callee, depth + 1) or None
        head = class_name.split(".")[0]
        for binding in self.model.resolver.bindings(head, scope):
            if binding.kind == "import":
                found_import = imported_module(binding.node, head)
                if found_import is None:
                    return None
                module, level, imported = found_import
                rest = class_name.split(".")[1:]
                if imported is not None and not rest:
                    # An imported name called is a class by its name (PEP 8's CapWords), or a
                    # factory: what it returns, which the project pass looks up in its file.
                    if imported[:1].isupper():
                        return {("import", module or "", str(level), imported)}
                    return {("returns", module or "", str(level), imported)} if not _library(module) else None
                if rest and rest[-1][:1].isupper():  # `models.Net(...)`
                    base = module if imported is None else (f"{module}.{imported}" if module else imported)
                    return {("import", ".".join([base or "", *rest[:-1]]).strip("."), str(level), rest[-1])}
        return None

    def _module_dict_entry(self, name: str, scope: Scope, depth: int, seen: FrozenSet[int]) -> Optional[Set[Tuple[str, ...]]]:
        """`self.transformer.h` with `self.transformer = nn.ModuleDict(dict(h=nn.ModuleList(...)))`
        (or a `{"h": ...}` display): the classes of that entry."""
        owner, _, key = name.rpartition(".")
        found: Set[Tuple[str, ...]] = set()
        for value, where in self.model.resolver.values(owner, scope):
            if not isinstance(value, cst.Call) or (self.model.resolver.qualified(value.func) or "") not in _MODULE_DICTS or not value.args:
                continue
            entries = value.args[0].value
            element: Optional[cst.BaseExpression] = None
            if isinstance(entries, cst.Call) and dotted_name(entries.func) == "dict":
                element = next((arg.value for arg in entries.args if arg.keyword is not None and arg.keyword.value == key), None)
            elif isinstance(entries, cst.Dict):
                element = next(
                    (e.value for e in entries.elements if isinstance(e, cst.DictElement) and isinstance(e.key, cst.SimpleString) and e.key.evaluated_value == key),
                    None,
                )
            inner = self._classes_of(element, where, depth + 1, seen) if element is not None else None
            found |= inner or set()
        return found or None

    def _handed_back(self, binding: Any, name: str) -> Optional[cst.BaseExpression]:
        """For `model, optimizer = accelerator.prepare(model, optimizer)`: the argument in the
        place `name` is unpacked from (a framework's prepare hands back what it is given)."""
        source = binding.source
        node = binding.node
        if not isinstance(source, cst.Call) or not isinstance(source.func, cst.Attribute) or source.func.attr.value not in _HANDS_BACK:
            return None
        if not isinstance(node, cst.Assign) or len(node.targets) != 1 or not isinstance(node.targets[0].target, (cst.Tuple, cst.List)):
            return None
        names = [dotted_name(element.value) for element in node.targets[0].target.elements]
        positional = [arg.value for arg in source.args if arg.keyword is None and not arg.star]
        if name not in names or len(positional) != len(names):
            return None
        return positional[names.index(name)]

    def returned(self, unit: CodeUnit) -> List[Target]:
        """What calling an instance a top-level function returns runs (`def build_model(cfg):
        ... return SwinTransformer(...)`): for the project pass, which follows a factory
        another file calls."""
        if unit.is_module or "." in unit.name:
            return []
        classes = self._returned(unit, 0)
        targets = [self._instance_target(cls) for cls in sorted(classes) if cls[0] != "returns" and not (cls[0] == "import" and _library(cls[1]))]
        return [target for target in targets if target is not None]

    def _returned(self, unit: CodeUnit, depth: int) -> Set[Tuple[str, ...]]:
        found: Set[Tuple[str, ...]] = set()
        if depth > 4:
            return found
        for statement in own_returns(unit.node):
            if statement.value is not None:
                found |= self._classes_of(statement.value, unit.scope, depth + 1) or set()
        return found

    def _instance_target(self, cls: Tuple[str, ...]) -> Optional[Target]:
        if cls[0] == "returns":  # what another module's factory returns
            _, module, level, name = cls
            return Target(module=module or None, level=int(level), name=name, member=RETURNED)
        if cls[0] == "local":
            scope = self.model.index.classes[cls[1]]
            for method in ("__call__", "forward"):
                found = self._method(scope, method)
                if found is not None:
                    return found
            return None
        _, module, level, name = cls
        return Target(module=module or None, level=int(level), name=name, member="forward")

    def _method(self, owner: Optional[Scope], method: str, inherited: bool = True) -> Optional[Target]:
        """`owner`'s method of that name (its own or a base class's of this file)."""
        chain = self.model.resolver.class_and_bases(owner) if inherited else [owner]
        for cls in chain:
            if cls is None:
                continue
            for binding in cls.bindings.get(method, ()):
                if binding.kind == "def" and id(binding.node) in self._units:
                    return Target(unit=self._units[id(binding.node)].name)
        return None

    def _inherited(self, scope: Scope, method: str) -> Optional[Target]:
        """`self.m()` of a method a base class another module defines has."""
        module_scope = self.model.index.module_scope
        for cls in self.model.resolver.class_and_bases(scope):
            for base in cls.bases:
                if base.rsplit(".", 1)[-1] in self.model.index.classes:
                    continue
                head, _, rest = base.partition(".")
                for binding in self.model.resolver.bindings(head, module_scope):
                    if binding.kind == "import":
                        found = imported_module(binding.node, head)
                        if found is not None and found[2] is not None and not rest:
                            return Target(module=found[0], level=found[1], name=found[2], member=method)
        return None

    def _in_unknown_context(self, record: CallRecord) -> bool:
        """Inside a `with` whose item is neither an autocast nor `no_grad`: it may switch
        autocast off (`with fp32():`), and no caller's autocast is guessed through it."""
        from amplint.semantic import WithFrame

        regions = self.model.regions
        return any(
            isinstance(frame, WithFrame) and regions.region_of(frame, record.unit) is None and not regions.is_no_grad(frame.item)
            for frame in record.frames
        )


def _library(module: Optional[str]) -> bool:
    """PyTorch's own modules: calls into them run no linted code (and are most calls)."""
    return (module or "").split(".")[0] in ("torch", "torchvision", "torchaudio")


def _framework_contexts(settings: FrozenSet[str]) -> Tuple[Tuple[str, str], ...]:
    """The (device, dtype) pairs a framework's precision settings may choose: float16 mixed
    precision runs on CUDA, bfloat16 on CUDA or CPU."""
    lowered = {setting.lower() for setting in settings}
    found: List[Tuple[str, str]] = []
    if lowered & FP16_PRECISIONS:
        found.append(("cuda", "float16"))
    if lowered & BF16_PRECISIONS:
        found += [("cpu", "bfloat16"), ("cuda", "bfloat16")]
    return tuple(found)


def _low_precision(region: AutocastRegion) -> bool:
    return region.active and region.caller is None and bool(region.possible_dtypes & {"float16", "bfloat16"})


def region_contexts(region: AutocastRegion) -> List[Tuple[str, str]]:
    """The (device, dtype) pairs a region may run in, of those amplint's tables know:
    {cuda, cpu} x {float16, bfloat16}. A device the code does not show may be either."""
    devices = sorted(region.possible_devices & {"cuda", "cpu"}) if region.possible_devices else ["cpu", "cuda"]
    dtypes = sorted(region.possible_dtypes & {"float16", "bfloat16"})
    return [(device, dtype) for device in devices for dtype in dtypes]


def words(region: AutocastRegion) -> str:
    """How a chain names the region it starts at."""
    if region.hook:
        return f"`{region.hook}`, which `{source_text(region.anchor)}` runs under autocast"
    return f"`{source_text(region.anchor)}`"
