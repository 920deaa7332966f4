"""What a linted module's functions and classes do with objects' saved state, for the
checkpoints of the modules that import them (AMP007).

A checkpoint is often made in another module than the one that trains: a `Checkpointer`
class handed the model and the optimizer (`ckpt = Checkpointer(model, optimizer)`,
`ckpt.save(path)`), a GradScaler built by a helper (`scaler = build_scaler()`). Each linted
module exports, in its summary's `state` table (`export_state`), keyed like its functions
(`save_checkpoint`, `Checkpointer.save`, `Checkpointer.__init__`):

- `saves` / `restores`: the optimizers and scalers whose `state_dict()` a function or method
  saves, or whose `load_state_dict(...)` it calls: one of its parameters (`param:optimizer`,
  `param:scaler`) or an attribute of its instance (`self.optimizer`), named like an
  optimizer or a scaler, also through the instance's other methods it calls
  (`self._save()`); copies kept in memory (`copy.deepcopy(opt.state_dict())`) aside. (A
  scaler handed to such a function that does not say what it does with it counts as kept:
  `amplint.analyses.checkpoints`.) Other objects' state is left out: only an optimizer's
  and a scaler's decide a finding, and an entry makes every importer that names it be
  linted again;
- `sets`, for a class's `__init__`: the attributes those methods use, each with the parameter
  it holds (`self.optimizer = optimizer`, `self.scaler = scaler or default`); an attribute
  set anywhere else too is left out, since it may not hold what the constructor was handed;
- `scaler`: a function that returns a new GradScaler (`return torch.amp.GradScaler("cuda")`),
  quoted, with `enabled`, the parameter its `enabled=` is, if any.

Only what the code shows is exported: an object handed on to a further function, or saved
by name (`getattr(self, name).state_dict()`), is not claimed saved. The importing side is
`amplint.analyses.checkpoints`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Dict, List, Optional, Set, Tuple

import libcst as cst

from amplint.semantic import CodeUnit, Scope, dotted_name, keyword_argument, own_returns, source_text
from amplint.semantic.pytorch import api as torch_api, vocabulary

if TYPE_CHECKING:
    from amplint.semantic import SemanticModel

_STATE_CALLS = {"state_dict": False, "load_state_dict": True}
# A state read into one of these is a copy kept in memory, not a checkpoint.
_IN_MEMORY = frozenset({"deepcopy", "copy", "load_state_dict"})
# Following `self._save()` into the instance's other methods: at most this many rounds.
_MAX_ROUNDS = 8


def export_state(model: "SemanticModel", exported: Callable[[CodeUnit], bool]) -> Dict[str, Any]:
    """The `state` table of the module's summary (see the module's docstring): for the units
    `exported` accepts (what another module can import)."""
    units = [unit for unit in model.units if not unit.is_module and exported(unit)]
    direct = {id(unit): _direct(unit) for unit in units}
    _through_own_methods(units, direct)
    table: Dict[str, Any] = {}
    holders_of: Dict[int, Set[str]] = {}  # id(class scope) -> the attributes its methods save or restore
    for unit in units:
        saves, restores, _ = direct[id(unit)]
        if isinstance(unit.node, cst.FunctionDef) and "state_dict" in unit.node.name.value:
            # `wrapper.state_dict()`, `strategy.optim_state_dict()`: an object's own state,
            # a state call where it is called already; not a checkpoint.
            continue
        if saves or restores:
            table[unit.name] = {"params": unit.parameters, "method": unit.scope.class_scope is not None, "saves": sorted(saves), "restores": sorted(restores)}
            owner = unit.scope.class_scope
            if owner is not None:
                holders_of.setdefault(id(owner), set()).update(h[len("self.") :] for h in saves | restores if h.startswith("self."))
    for unit in units:
        owner = unit.scope.class_scope
        if owner is None or unit.name != f"{owner.name}.__init__" or not holders_of.get(id(owner)):
            continue
        sets = {}
        for attribute in sorted(holders_of[id(owner)]):
            parameter = _held_parameter(owner, attribute, unit)
            if parameter is not None:
                sets[attribute] = parameter
        if sets:
            table[unit.name] = {"params": unit.parameters, "method": True, "sets": sets}
    for unit, built in scalers_returned(model, units):
        table.setdefault(unit.name, {"params": unit.parameters, "method": unit.scope.class_scope is not None}).update(built)
    return table


def _direct(unit: CodeUnit) -> Tuple[Set[str], Set[str], Set[str]]:
    """(holders saved, holders restored, methods of the instance called) in the unit itself."""
    saves: Set[str] = set()
    restores: Set[str] = set()
    called: Set[str] = set()
    parents: Dict[int, str] = {}
    for record in unit.calls:
        for arg in record.node.args:
            if isinstance(arg.value, cst.Call):
                parents[id(arg.value)] = (dotted_name(record.node.func) or "").rsplit(".", 1)[-1]
    for record in unit.calls:
        func = record.node.func
        if not isinstance(func, cst.Attribute):
            continue
        method = func.attr.value
        receiver = dotted_name(func.value)
        if receiver == "self":
            called.add(method)
            continue
        if method not in _STATE_CALLS or receiver is None:
            continue
        restores_it = _STATE_CALLS[method]
        if not restores_it and parents.get(id(record.node)) in _IN_MEMORY:
            continue  # `copy.deepcopy(optimizer.state_dict())`
        if restores_it and _copied_back(record.node, unit):
            continue  # `state = opt.state_dict(); ...; opt.load_state_dict(state)`
        holder = _holder(receiver, unit)
        if holder is not None and (vocabulary.looks_like_optimizer(holder.split(":")[-1]) or vocabulary.named_like_a_scaler(holder.split(":")[-1].split(".")[-1])):
            (restores if restores_it else saves).add(holder)
    return saves, restores, called


def _copied_back(call: cst.Call, unit: CodeUnit) -> bool:
    """`opt.load_state_dict(state)` with `state` only ever a copy made in memory in the unit
    (`state = opt.state_dict()`, `copy.deepcopy(...)`), or such a call itself."""

    def copy(value: Optional[cst.BaseExpression]) -> bool:
        return isinstance(value, cst.Call) and (dotted_name(value.func) or "").rsplit(".", 1)[-1] in ("state_dict", "deepcopy", "copy")

    if not call.args:
        return False
    value = call.args[0].value
    if isinstance(value, cst.Name):
        bindings = unit.scope.bindings.get(value.value, ())
        return bool(bindings) and all(copy(binding.value) for binding in bindings)
    return copy(value)


def _holder(receiver: str, unit: CodeUnit) -> Optional[str]:
    """`param:<name>` for a parameter the unit never rebinds, `self.<attr>` for an attribute
    of a method's instance; None for anything else."""
    parts = receiver.split(".")
    scope = unit.scope
    if len(parts) == 1 and parts[0] in unit.parameters and parts[0] not in ("self", "cls"):
        if all(binding.kind == "param" for binding in scope.bindings.get(parts[0], ())):
            return f"param:{parts[0]}"
        return None
    if len(parts) == 2 and parts[0] == "self" and unit.parameters[:1] == ["self"] and scope.class_scope is not None:
        return receiver
    return None


def _through_own_methods(units: List[CodeUnit], direct: Dict[int, Tuple[Set[str], Set[str], Set[str]]]) -> None:
    """Add to each method what the instance's private methods it calls (`self._save()`) save
    and restore of the instance's attributes (not of their parameters). Not its public
    methods: `runner.train()` that may call `self.resume()` first is no checkpoint."""
    methods: Dict[Tuple[int, str], CodeUnit] = {}
    for unit in units:
        owner = unit.scope.class_scope
        if owner is not None and isinstance(unit.node, cst.FunctionDef):
            methods[(id(owner), unit.node.name.value)] = unit
    for _ in range(_MAX_ROUNDS):
        changed = False
        for unit in units:
            owner = unit.scope.class_scope
            if owner is None:
                continue
            saves, restores, called = direct[id(unit)]
            for name in called:
                callee = methods.get((id(owner), name)) if name.startswith("_") else None
                if callee is None or callee is unit:
                    continue
                their_saves, their_restores, _ = direct[id(callee)]
                for mine, theirs in ((saves, their_saves), (restores, their_restores)):
                    new = {h for h in theirs if h.startswith("self.")} - mine
                    if new:
                        mine.update(new)
                        changed = True
        if not changed:
            return


def _held_parameter(owner: Scope, attribute: str, init: CodeUnit) -> Optional[str]:
    """The parameter of `__init__` that `self.<attribute>` always holds when it is passed:
    `self.x = x`, `self.x = x or default`, `self.x = x if x is not None else default`. None
    when the attribute is set anywhere else, or to anything else."""
    bindings = owner.attributes.get(f"self.{attribute}", ())
    found: Set[str] = set()
    for binding in bindings:
        if binding.home is not init.scope or binding.value is None:
            return None
        parameter = _parameter_in(binding.value, init)
        if parameter is None:
            return None
        found.add(parameter)
    return found.pop() if len(found) == 1 else None


def _parameter_in(value: cst.BaseExpression, init: CodeUnit) -> Optional[str]:
    def parameter(node: cst.BaseExpression) -> Optional[str]:
        if isinstance(node, cst.Name) and node.value in init.parameters and node.value != "self":
            if all(b.kind == "param" for b in init.scope.bindings.get(node.value, ())):
                return node.value
        return None

    if isinstance(value, cst.BooleanOperation) and isinstance(value.operator, cst.Or):
        return parameter(value.left)
    if isinstance(value, cst.IfExp):
        found = [p for p in (parameter(value.body), parameter(value.orelse)) if p is not None]
        return found[0] if len(found) == 1 else None
    return parameter(value)


def scalers_returned(model: "SemanticModel", units: List[CodeUnit]) -> List[Tuple[CodeUnit, Dict[str, Any]]]:
    """The functions that return a GradScaler they build (not one built with a literal
    `enabled=False`): each with `scaler` (the construction, quoted) and `enabled` (the
    parameter its `enabled=` is, or None)."""
    built: Dict[str, cst.Call] = {}
    for info, record in model.grad_scalers_built():
        if info.framework is None:
            built.setdefault(info.key, record.node)
    if not built and not any(model.resolver.qualified(record.node.func) in torch_api.GRAD_SCALER for record in model.index.calls):
        return []  # no GradScaler built in the file: no function returns one (and no unit is walked)
    found = []
    for unit in units:
        if unit.scope.class_scope is not None:
            continue
        for node in own_returns(unit.node):
            for value in _branches(node.value):
                call: Optional[cst.Call] = None
                name = dotted_name(value) if value is not None else None
                if name is not None and "." not in name:
                    call = built.get(model.identity(unit, name))
                elif isinstance(value, cst.Call) and model.resolver.qualified(value.func) in torch_api.GRAD_SCALER:
                    if model.resolver.boolean(keyword_argument(value, "enabled"), unit.scope) is not False:
                        call = value
                if call is not None:
                    enabled = keyword_argument(call, "enabled")
                    parameter = enabled.value if isinstance(enabled, cst.Name) and enabled.value in unit.parameters else None
                    found.append((unit, {"scaler": f"`{source_text(call)}`", "enabled": parameter}))
                    break
            else:
                continue
            break
    return found


def _branches(value: Optional[cst.BaseExpression]) -> List[Optional[cst.BaseExpression]]:
    if isinstance(value, cst.IfExp):
        return _branches(value.body) + _branches(value.orelse)
    return [value]
