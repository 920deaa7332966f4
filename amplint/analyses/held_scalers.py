"""GradScalers that an instance of a class keeps on an attribute (a fact family: `HeldScalers`).

A trainer class often builds its own scaler: detectron2's `AMPTrainer.__init__` does
`grad_scaler = GradScaler()` unless it is handed one, then `self.grad_scaler = grad_scaler`.
The module that makes the trainer (`trainer = AMPTrainer(model, loader, optimizer)`) runs that
scaler without naming it, and its checkpoint must keep the scaler's state all the same
(AMP007): through the trainer's own `state_dict()`, a method of it that saves the scaler,
or by handing the trainer to code that may checkpoint it.

The defining module exports, per top-level class whose `__init__` does so (and whose
autocast may be float16): the attribute, the construction (quoted), the `__init__`
parameters that decide it (`given`: a scaler passed there is kept instead; `enabled`: passed
to the construction's `enabled=`, with its default), `kept_by`: the methods that do anything
with the scaler besides running it (`scale`, `step`, `update`, ...) or hand the instance on
(`save_everything(self, path)`), or call such a method of the instance, and `methods`: those
the class defines itself. Not exported: a class whose `__init__` hands the scaler or the
instance on or calls a method that may keep it, a scaler whose `enabled=` is anything but a
literal or a parameter, a wrapper that is a scaler itself (timm's `NativeScaler`: the
frameworks table's).

The importing module reads each construction of such a class (`AMPTrainer(...)`, or either
branch of `(AMPTrainer if amp else Trainer)(...)`) into a scaler held at
`<instance>.<attribute>`, unless it may be built disabled (`amp=False` passed or by default,
or arguments unpacked) or handed one. The scaler's state counts as kept when the file uses
the instance in any other way than reading its other attributes and calling methods of the
class that keep nothing: a method it inherits may do anything (never guessed: any other
use may keep it).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Collection, Dict, FrozenSet, Iterator, List, Optional, Set, Tuple

import libcst as cst

from amplint.semantic import (
    Analysis,
    Binding,
    CallRecord,
    CodeUnit,
    ScalerInfo,
    Scope,
    SemanticModel,
    all_bindings,
    binding_key,
    dotted_name,
    iter_tree,
    keyword_argument,
    passed_for_parameter,
    source_text,
)
from amplint.semantic.pytorch.frameworks import OWNED_SCALER_CLASSES
from amplint.semantic.pytorch import vocabulary

# What running a scaler calls on it: a method that does only this keeps nothing of it.
_RUNS_THE_SCALER = frozenset(
    {"scale", "unscale_", "step", "update", "get_scale", "is_enabled", "get_growth_factor", "get_backoff_factor", "get_growth_interval"}
)


@dataclass(frozen=True)
class HeldScaler:
    """A scaler an instance made in this file holds: `trainer.grad_scaler`."""

    scaler: ScalerInfo  # keyed by the instance's variable and the attribute
    record: CallRecord  # the construction of the instance
    construction: str  # quoted, with the file it is built in
    holder: str  # the instance's variable as the file names it: `trainer`, `self._trainer`
    attribute: str
    kept_by: FrozenSet[str]  # the class's methods that may keep it
    methods: FrozenSet[str]  # the methods the class itself defines (not those it inherits)


class HeldScalers(Analysis):
    """`model.facts(HeldScalers).held_by_instances()`: the scalers instances of another linted
    module's classes hold, made in this file; `kept(held)`: whether the file may keep one."""

    SUMMARY_KEY = "held_scalers"

    def __init__(self, model: SemanticModel) -> None:
        super().__init__(model)
        self._held: Optional[List[HeldScaler]] = None

    def held_by_instances(self) -> List[HeldScaler]:
        if self._held is None:
            self._held = list(self._find()) if self.model.external is not None else []
        return self._held

    def _find(self) -> Iterator[HeldScaler]:
        model = self.model
        bound: Optional[Dict[int, List[Binding]]] = None  # id(value) -> the bindings given it, once needed
        for record in model.index.calls:
            scope = record.unit.scope
            for cls in _classes_called(record.node.func):
                found = model.exported_facts(cls, scope, self.SUMMARY_KEY)
                if found is None:
                    continue
                _, origin, held = found
                if _handed_a_scaler(record.node, held) or _disabled(record.node, held, model, scope):
                    continue
                attribute = held["attribute"]
                if bound is None:
                    bound = {}
                    for binding in all_bindings(model.index):
                        bound.setdefault(id(binding.value), []).append(binding)
                for binding in bound.get(id(record.node), ()):
                    if binding_key(binding) in model.scalers:
                        continue  # (an instance that is itself a scaler the file runs: timm's `NativeScaler()`)
                    name = f"{binding.name}.{attribute}"
                    info = ScalerInfo(f"{binding_key(binding)}.{attribute}", name, None, ())
                    yield HeldScaler(
                        info, record, f"{held['scaler']} in {origin}", binding.name, attribute, frozenset(held.get("kept_by", ())), frozenset(held.get("methods", ()))
                    )

    def kept(self, held: HeldScaler) -> Optional[cst.CSTNode]:
        """Where the file may keep the scaler `held`: a use of its instance other than reading
        another attribute or calling a method that keeps nothing; None when there is none."""

        def ignored(name: str, called: bool) -> bool:
            # Another attribute read, or a method of the class that keeps nothing of it: not a
            # method it inherits (whatever that does), nor one named like checkpointing.
            if name == held.attribute or name in held.kept_by or vocabulary.named_like_checkpointing(name):
                return False
            return not called or name in held.methods

        return _use_beyond(self.model.module, held.holder, ignored)

    @classmethod
    def export(cls, model: SemanticModel, path: str) -> Dict[str, Any]:
        """The module's top-level classes whose `__init__` keeps on an attribute a GradScaler
        it builds (see the module's docstring): each -> what an importer needs of it."""
        exported: Dict[str, Any] = {}
        if not model.float16_possible:
            return exported
        for info, record in model.grad_scalers_built():
            unit = record.unit
            owner = unit.scope.class_scope
            if info.framework is not None or owner is None or owner.parent is not model.index.module_scope:
                continue
            if unit.name != f"{owner.name}.__init__" or owner.name in exported or owner.name in OWNED_SCALER_CLASSES:
                continue  # (timm's `NativeScaler` is a scaler itself, as the frameworks table says)
            held = _attribute_holding(info, owner, unit)
            if held is None:
                continue
            attribute, local = held
            switch = _enabled_switch(record.node, unit, model)
            if switch is None:
                continue  # `enabled=self.use_amp`: whether it runs is not known
            methods = [u for u in model.units if u.scope.class_scope is owner and isinstance(u.node, cst.FunctionDef)]
            keepers = _keepers(methods, unit, attribute)
            if _init_hands_on(unit, attribute, local, keepers):
                continue
            enabled, default = switch
            exported[owner.name] = {
                "attribute": attribute,
                "scaler": f"`{source_text(record.node)}`",
                "enabled": enabled,
                "enabled_default": default,
                "given": local if local is not None and local in unit.parameters else None,
                "kept_by": sorted(keepers),
                "methods": sorted(u.node.name.value for u in methods),  # type: ignore[union-attr]
                "params": unit.parameters,
                "words": ["GradScaler"],
            }
        return exported


def _classes_called(func: cst.BaseExpression) -> List[cst.BaseExpression]:
    """The classes a call may construct: `Trainer(...)`, `pkg.Trainer(...)`, and either
    branch of `(AMPTrainer if amp else Trainer)(...)`."""
    if isinstance(func, cst.IfExp):
        return _classes_called(func.body) + _classes_called(func.orelse)
    return [func] if isinstance(func, (cst.Name, cst.Attribute)) else []


def _handed_a_scaler(call: cst.Call, held: Dict[str, Any]) -> bool:
    """The caller may pass its own scaler for the parameter the class keeps instead (anything
    but a literal None, or arguments it unpacks): that scaler is the caller's, its checkpoint
    the caller's to see."""
    given = held.get("given")
    if not given:
        return False
    if any(arg.star for arg in call.args):
        return True
    passed = passed_for_parameter(call, held.get("params", ()), given, True)
    return passed is not None and not (isinstance(passed, cst.Name) and passed.value == "None")


def _disabled(call: cst.Call, held: Dict[str, Any], model: SemanticModel, scope: Scope) -> bool:
    """The scaler may be built disabled: the caller passes False for the parameter its
    `enabled=` is, or leaves a default of False, or may pass it unpacked (`**cfg`)."""
    enabled = held.get("enabled")
    if not enabled:
        return False
    passed = passed_for_parameter(call, held.get("params", ()), enabled, True)
    if passed is None:
        return any(arg.star for arg in call.args) or held.get("enabled_default") is not True
    return model.resolver.boolean(passed, scope) is False


def _enabled_switch(construction: cst.Call, init: CodeUnit, model: SemanticModel) -> Optional[Tuple[Optional[str], Optional[bool]]]:
    """(the parameter of `__init__` the construction's `enabled=` is, its default) for
    `GradScaler(enabled=amp)`; (None, None) when it is always enabled (no `enabled=`, or a
    literal True); None when it depends on anything else (`enabled=self.use_amp`)."""
    enabled = keyword_argument(construction, "enabled")
    if enabled is None or model.resolver.boolean(enabled, init.scope) is True:
        return None, None
    if isinstance(enabled, cst.Name) and enabled.value in init.parameters:
        return enabled.value, model.resolver.default_boolean(enabled.value, init.scope)
    return None


def _attribute_holding(info: ScalerInfo, owner: Scope, init: CodeUnit) -> Optional[Tuple[str, Optional[str]]]:
    """(the attribute of `self` the scaler `info`, built in `init`, is kept on; the local
    variable it was built into, if any): `self.grad_scaler = GradScaler()`, or `grad_scaler =
    GradScaler()` then `self.grad_scaler = grad_scaler`. None when the attribute is set
    anywhere else, or to anything else."""
    prefix = f"{owner.key}:self."
    if info.key.startswith(prefix):
        attribute, local = info.key[len(prefix) :], None
    elif info.key.startswith(f"{init.scope.key}:") and "." not in info.name:
        local = info.name
        holders = [
            name
            for name, bindings in owner.attributes.items()
            if any(isinstance(b.value, cst.Name) and b.value.value == local and b.home is init.scope for b in bindings)
        ]
        if len(holders) != 1:
            return None
        attribute = holders[0][len("self.") :]
    else:
        return None
    bindings = owner.attributes.get(f"self.{attribute}", ())
    if "." in attribute or not bindings or any(b.home is not init.scope for b in bindings):
        return None
    if local is not None and not all(isinstance(b.value, cst.Name) and b.value.value == local for b in bindings):
        return None
    return attribute, local


def _init_hands_on(init: CodeUnit, attribute: str, local: Optional[str], keepers: Set[str]) -> bool:
    """Whether `__init__` does anything with the scaler besides building and keeping it
    (`self.ckpt = Checkpointer(scaler=self.grad_scaler)`), hands the instance on
    (`Checkpointer(trainer=self)`) or calls a method that may keep it: then it is no
    importer's to keep."""
    holder = f"self.{attribute}"
    if _use_beyond(init.node, holder, lambda name, called: called and name in _RUNS_THE_SCALER) is not None:
        return True
    if _use_beyond(init.node, "self", lambda name, called: not called or name not in keepers) is not None:
        return True
    if local is None:
        return False
    # The local's own uses: its binding, `if grad_scaler is None`, `self.grad_scaler = grad_scaler`.
    exempt: Set[int] = set()
    for node in iter_tree(init.node):
        if isinstance(node, cst.Comparison) and all(isinstance(t.operator, (cst.Is, cst.IsNot)) for t in node.comparisons):
            exempt.add(id(node.left))
        elif isinstance(node, cst.Assign) and all(dotted_name(t.target) == holder for t in node.targets):
            exempt.add(id(node.value))
    return _use_beyond(init.node, local, lambda name, called: called and name in _RUNS_THE_SCALER, exempt) is not None


def _keepers(methods: List[CodeUnit], init: CodeUnit, attribute: str) -> Set[str]:
    """The methods of the class (`methods`, but `__init__`) that use `self.<attribute>` other
    than to run it, or hand the instance on (`save_everything(self, path)`), and those that
    call such a method of the instance (`save` calling `self._everything()`)."""
    holder = f"self.{attribute}"
    others = [u for u in methods if u is not init]
    keepers = {
        u.node.name.value  # type: ignore[union-attr]
        for u in others
        if _use_beyond(u.node, holder, lambda name, called: called and name in _RUNS_THE_SCALER) is not None
        or _use_beyond(u.node, "self", lambda name, called: True) is not None
    }
    calls = {
        u.node.name.value: {  # type: ignore[union-attr]
            r.node.func.attr.value for r in u.calls if isinstance(r.node.func, cst.Attribute) and dotted_name(r.node.func.value) == "self"
        }
        for u in others
    }
    changed = True
    while changed:
        changed = False
        for name, called in calls.items():
            if name not in keepers and called & keepers:
                keepers.add(name)
                changed = True
    return keepers


def _use_beyond(
    root: cst.CSTNode,
    holder: str,
    allowed: Callable[[str, bool], bool],
    exempt: Collection[int] = (),
) -> Optional[cst.CSTNode]:
    """The first use of the variable `holder` (dotted) under `root` that is neither an
    assignment to it, nor `holder.name` / `holder.name(...)` that `allowed(name, called)`
    accepts, nor one of the nodes `exempt`; None when there is none. Names that are no
    variable (a keyword argument's, a parameter's, an attribute's) are not its uses."""
    assigned: Set[int] = set(exempt)
    accounted: Set[int] = set()
    called: Set[int] = set()
    for node in iter_tree(root):
        if isinstance(node, cst.Call):
            called.add(id(node.func))
        elif isinstance(node, (cst.AssignTarget, cst.AnnAssign)):
            assigned.add(id(node.target))
        elif isinstance(node, cst.Arg) and node.keyword is not None:
            accounted.add(id(node.keyword))
        elif isinstance(node, cst.Param):
            accounted.add(id(node.name))
        if isinstance(node, cst.Attribute):
            accounted.add(id(node.attr))  # `x.grad_scaler`'s name is no use of `grad_scaler`
            if dotted_name(node.value) == holder:
                if not allowed(node.attr.value, id(node) in called):
                    return node
                accounted.add(id(node.value))
                continue
        if isinstance(node, (cst.Name, cst.Attribute)) and id(node) not in accounted and id(node) not in assigned:
            if dotted_name(node) == holder:
                return node
    return None
