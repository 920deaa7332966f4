"""Checkpoints: where a file saves and restores the state of its optimizers and GradScalers.

A checkpoint holds `obj.state_dict()`; a resume calls `obj.load_state_dict(...)`. Both are
found by their receiver, a variable known by its binding: an optimizer (built in the file,
stepped by a scaler, or named like one) or a GradScaler. An object handed to a function of
another module named as only checkpointing is (`save_checkpoint(model, optimizer, path)`,
`load_checkpoint(path, model, optimizer)`, `torch.save(optimizer, path)`) has its state saved
or restored there too; torch.distributed.checkpoint's `get_state_dict(model, optimizer)` and
`set_state_dict(...)` likewise. A function or method of another linted module counts for
what its summary says it saves or restores (`amplint.analyses.saved_state`): `ckpt.save(path)`,
with `ckpt = Checkpointer(model, optimizer)` an instance of a class of that module, saves what
the constructor was handed for the attribute the method saves (`self.optimizer`); a GradScaler
returned by such a function (`scaler = build_scaler()`) is one the file builds there.
Copies kept in memory are not checkpoints:
`copy.deepcopy(optimizer.state_dict())`, `opt.load_state_dict(opt.state_dict())`.

A scaler's state can reach a checkpoint without the file writing `scaler.state_dict()` where
the scaler is built. It is followed into the helpers of the file it is passed to
(`save_checkpoint(model, optimizer, scaler, path)` whose body saves `scaler.state_dict()`)
and through the variables it is copied into (`self.scaler = scaler`). Where it is handed to
code the file does not show, the layer does not guess what that code does; it says that the
state may be kept when the code is one that checkpoints or holds objects for checkpointing:
a function named like saving (`save_checkpoint`, `misc.save_model`), a class
(`Checkpointer(model, scaler=scaler)`, `Trainer(..., scaler)`), a container (`to_save =
{"scaler": scaler}`), another object's attribute (`state.scaler = scaler`), a return value.
A function that only trains with it (`train_one_epoch(model, optimizer, scaler)`) does not
keep its state. A file that saves state generically (`getattr(self, name).state_dict()`, a
loop over objects) may keep anything's.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import Any, Dict, Iterator, List, Mapping, Optional, Sequence, Set, Tuple

import libcst as cst

from amplint.analyses.held_scalers import HeldScalers
from amplint.analyses.repetition import Repetitions
from amplint.semantic import (
    Analysis,
    CallRecord,
    CodeUnit,
    GuardFrame,
    HelperCall,
    Ref,
    Resolver,
    ScalerFacts,
    ScalerInfo,
    Scope,
    SemanticModel,
    all_bindings,
    binding_key,
    dotted_name,
    import_targets,
    iter_tree,
    keyword_argument,
    own_returns,
    passed_for_parameter,
)
from amplint.semantic.pytorch import vocabulary
from amplint.analyses.saved_state import scalers_returned

# Functions named as only checkpointing is: what they are handed is saved or restored there.
_CHECKPOINTING_CALL = re.compile(r"save|checkpoint|ckpt|snapshot|resume|restore|^load_(model|state|training|objects)")
_RESTORING = re.compile(r"load|resume|restore")
_COPIES = frozenset({"deepcopy", "copy"})
# Methods that put an object in a collection: `objects.append(scaler)`, `to_save.update(...)`.
_COLLECTING = frozenset({"append", "extend", "add", "insert", "update", "setdefault", "register"})
# torch.distributed.checkpoint's whole-state functions: (qualified name, restores).
_DCP_STATE = {
    "torch.distributed.checkpoint.state_dict.get_state_dict": False,
    "torch.distributed.checkpoint.state_dict.get_optimizer_state_dict": False,
    "torch.distributed.checkpoint.state_dict.set_state_dict": True,
    "torch.distributed.checkpoint.state_dict.set_optimizer_state_dict": True,
}
# Following a scaler through helpers and copies, at most this many hops.
_MAX_ALIASES = 32


@dataclass(frozen=True, eq=False)
class StateCall:
    """`receiver.state_dict()` (a save) or `receiver.load_state_dict(...)` (a restore); or a
    checkpointing function handed `receiver` (`save_checkpoint(model, optimizer, path)`)."""

    record: CallRecord
    receiver: str  # as written: `self.optimizer`
    key: str  # the variable (`amplint.semantic.resolve.Resolver.identity`)
    restores: bool
    # Made in another linted module, as its summary says: "`self.optimizer.state_dict()` in utils.py".
    via: Optional[str] = None

    @property
    def node(self) -> cst.Call:
        return self.record.node

    @property
    def direct(self) -> bool:
        """`obj.state_dict()` / `obj.load_state_dict(...)` itself, not a checkpointing
        function handed the object."""
        func = self.record.node.func
        return isinstance(func, cst.Attribute) and func.attr.value in ("state_dict", "load_state_dict")


@dataclass(frozen=True)
class HandOff:
    """A place a scaler's object leaves the code the file shows: why its state may be kept there."""

    node: cst.CSTNode
    why: str


class Checkpoints(Analysis):
    """Where optimizers' and scalers' state is saved and restored: `model.facts(Checkpoints)`."""

    def __init__(self, model: SemanticModel) -> None:
        super().__init__(model)
        index = model.index
        resolver = model.resolver
        self.index = index
        self.resolver = resolver
        self.scalers: ScalerFacts = model.scaler_facts
        self.classify = model.classify
        self.state_calls: List[StateCall] = []
        # state_dict() of attributes looked up by name (`getattr(self, name).state_dict()`):
        # the file checkpoints generically, and names in strings are not followed. A loop
        # over objects (`for obj in to_save.values(): obj.state_dict()`) is not generic: the
        # scaler is in it only if it was put in a collection, which is a hand-off.
        self.generic: List[CallRecord] = []
        parents = self._parents()
        external = model.external
        for record in index.calls:
            if external is not None:
                self._through_summary(record)
            func = record.node.func
            dcp = _DCP_STATE.get(resolver.qualified(func) or "")
            if dcp is not None:
                # `get_state_dict(model, optimizers=optimizer)`: the optimizers' state, whichever argument.
                for arg in record.node.args:
                    name = dotted_name(arg.value)
                    if name is not None:
                        self.state_calls.append(StateCall(record, name, resolver.identity(name, record.unit.scope), dcp))
                continue
            if not isinstance(func, cst.Attribute) or func.attr.value not in ("state_dict", "load_state_dict"):
                self._handed_to_checkpointing(record)
                continue
            restores = func.attr.value == "load_state_dict"
            if _in_memory(record, restores, parents, resolver):
                continue
            receiver = dotted_name(func.value)
            if receiver is None:
                if not restores and _is_getattr(func.value):
                    self.generic.append(record)  # `getattr(self, name).state_dict()`
                continue
            if not restores and _generic_receiver(resolver.bindings(receiver, record.unit.scope)):
                # `scaler = getattr(self, key); state[key] = scaler.state_dict()`
                self.generic.append(record)
                continue
            self.state_calls.append(StateCall(record, receiver, resolver.identity(receiver, record.unit.scope), restores))
        self._kept: Dict[str, Optional[HandOff]] = {}
        self._returns: Optional[List[Tuple[CodeUnit, cst.Return]]] = None
        self._assigned_from: Optional[Dict[str, List[str]]] = None
        self._aliases: Dict[str, Set[str]] = {}
        self._arguments: Optional[Dict[str, List[Tuple[CallRecord, int, cst.Arg]]]] = None

    def _handed_to_checkpointing(self, record: CallRecord) -> None:
        """`save_checkpoint(model, optimizer, epoch, path)`, `load_checkpoint(path, model,
        optimizer)`: objects handed to a checkpointing function the file does not show have
        their state saved (or restored) there. A helper of the file is read instead."""
        callee = (dotted_name(record.node.func) or "").rsplit(".", 1)[-1].lower()
        if not callee or not _CHECKPOINTING_CALL.search(callee):
            return
        item = self.classify(record)
        if isinstance(item, HelperCall) and item.callee is not None:
            return
        if self._linted_elsewhere(record):
            return  # its module was analysed: its summary's state table says what it saves
        restores = bool(_RESTORING.search(callee))
        scope = record.unit.scope
        for arg in record.node.args:
            # A framework's checkpointer handed a dict of objects: ignite's `Checkpoint(to_save,
            # ...)`, `Checkpoint.load_objects(to_load=to_save, ...)`.
            for name in _objects(arg.value) + self._collected(arg.value, scope):
                self.state_calls.append(StateCall(record, name, self.resolver.identity(name, scope), restores))

    def _collected(self, value: cst.BaseExpression, scope: Scope) -> List[str]:
        """The objects a dict display holds, written there or bound to the name `value` (every
        binding a display): `{"model": model, "optimizer": optimizer}`."""
        displays = [value] if isinstance(value, cst.Dict) else []
        name = dotted_name(value) if not displays else None
        if name is not None:
            values = [bound for bound, _ in self.resolver.values(name, scope)]
            displays = [bound for bound in values if isinstance(bound, cst.Dict)] if values and all(isinstance(v, cst.Dict) for v in values) else []
        return [found for display in displays for element in display.elements if isinstance(element, cst.DictElement) for found in _objects(element.value)]

    def _through_summary(self, record: CallRecord) -> None:
        """A call to another linted module's function or method whose summary says it saves
        or restores objects' state (`amplint.analyses.saved_state`): `ckpt.save(path)` with
        `ckpt = Checkpointer(model, optimizer)` saves what the constructor was handed for
        `self.optimizer`; `save_checkpoint(model, optimizer, path)`, what it is passed."""
        found = self._foreign_state(record)
        if found is None:
            return
        entry, origin, made = found
        for restores, holders in ((False, entry.get("saves", ())), (True, entry.get("restores", ()))):
            for holder in holders:
                passed: Optional[cst.BaseExpression] = None
                scope = record.unit.scope
                if holder.startswith("param:"):
                    method = bool(entry.get("method")) and isinstance(record.node.func, cst.Attribute) and made is not None
                    passed = passed_for_parameter(record.node, entry.get("params", ()), holder[len("param:") :], method)
                elif holder.startswith("self.") and made is not None:
                    constructor, call, scope = made
                    parameter = constructor.get("sets", {}).get(holder[len("self.") :])
                    if parameter is not None:
                        passed = passed_for_parameter(call, constructor.get("params", ()), parameter, True)
                if passed is None:
                    continue
                what = "load_state_dict(...)" if restores else "state_dict()"
                for name in _objects(passed):
                    via = f"`{holder.replace('param:', '')}.{what}` in {origin}"
                    self.state_calls.append(StateCall(record, name, self.resolver.identity(name, scope), restores, via))

    def _foreign_state(self, record: CallRecord) -> Optional[Tuple[Mapping[str, Any], str, Optional[Tuple[Mapping[str, Any], cst.Call, Scope]]]]:
        """The `state` entry of the other module's function or method `record` calls, the
        file it is in, and for a method called on an instance made here (`ckpt =
        Checkpointer(...)`, `self.ckpt = Checkpointer(...)`): its class's `__init__` entry,
        the constructor call, and the scope that call is read in."""
        external = self.model.external
        func = record.node.func
        scope = record.unit.scope
        if external is None:
            return None
        if isinstance(func, cst.Name):
            found = self._foreign(func.value, scope)
            entry = found[0].state.get(found[1]) if found is not None else None
            return (entry, _origin(found[0]), None) if found is not None and entry is not None else None
        owner = dotted_name(func.value) if isinstance(func, cst.Attribute) else None
        if owner is None or owner in ("self", "cls") or not isinstance(func, cst.Attribute):
            return None
        method = func.attr.value
        if "." not in owner and any(binding.kind == "import" for binding in self.resolver.bindings(owner, scope)):
            # `utils.save_checkpoint(...)` with `utils` an imported module.
            found = self._foreign(f"{owner}.{method}", scope)
            entry = found[0].state.get(found[1]) if found is not None else None
            return (entry, _origin(found[0]), None) if found is not None and entry is not None else None
        for bound, where in self.resolver.values(owner, scope):
            if not isinstance(bound, cst.Call) or not isinstance(bound.func, cst.Name):
                continue
            found = self._foreign(bound.func.value, where)
            if found is None:
                continue
            foreign, cls = found
            entry = foreign.state.get(f"{cls}.{method}")
            if entry is not None:
                constructor = foreign.state.get(f"{cls}.__init__") or {}
                return entry, _origin(foreign), (constructor, bound, where)
        return None

    def _linted_elsewhere(self, record: CallRecord) -> bool:
        """Whether `record` calls a class or function (`Checkpointer(...)`, `save_checkpoint(...)`,
        `utils.save_checkpoint(...)`) of another module linted with this one, whose summary
        lists it: what it saves is then what its state table says, not what its name suggests."""
        external = self.model.external
        func = record.node.func
        if external is None or not (isinstance(func, cst.Name) or (isinstance(func, cst.Attribute) and isinstance(func.value, cst.Name))):
            return False
        name = dotted_name(func) or ""
        for target, level, qualified in import_targets(name, self.resolver.bindings(name.partition(".")[0], record.unit.scope)):
            listed = external.lists(target, level, qualified)
            if listed is not None:
                return listed
        return False

    def _foreign(self, name: str, scope: Scope) -> Optional[Tuple[Any, str]]:
        """The summary of the linted module that defines the dotted `name` as this file
        imports it (`ForeignModule`), and its name there; None when it is no such import."""
        assert self.model.external is not None
        targets = list(import_targets(name, self.resolver.bindings(name.partition(".")[0], scope)))
        for place, (target, level, qualified) in enumerate(targets):
            if place < len(targets) - 1 and not self.model.external.has(target, level):
                continue  # the next place it may come from (`try: from .fast import save ... except ImportError: ...`)
            foreign = self.model.external.module(target, level)
            if foreign is not None:
                return foreign, qualified
        return None

    # ------------------------------------------------------------------ scalers built elsewhere
    def scalers_built_by_calls(self) -> List[Tuple[ScalerInfo, CallRecord, str]]:
        """Each `scaler = build_scaler()` with `build_scaler` a function of this file or of
        another linted module (its summary's `state`) that returns a new GradScaler, not one
        whose `enabled` parameter is passed a literal False; and each scaler an instance made
        here of another linted module's class builds and holds (`trainer = AMPTrainer(...)`:
        `trainer.grad_scaler`, `HeldScalers`): the scaler, the call, and the construction as
        quoted there with the function or file it is in."""
        found = self._scalers_built_by_own_functions()
        if self.model.external is None:
            return found
        for record in self.index.calls:
            if not isinstance(record.node.func, (cst.Name, cst.Attribute)):
                continue
            state = self._foreign_state(record)
            if state is None or not state[0].get("scaler") or state[2] is not None:
                continue
            entry, origin, _ = state
            found += self._filled_by(record, entry, entry.get("params", ()), f"{entry['scaler']} in {origin}")
        for held in self.model.facts(HeldScalers).held_by_instances():
            found.append((held.scaler, held.record, held.construction))
        return found

    def scalers_built_by_imported_calls(self) -> Iterator[Tuple[CallRecord, str, Optional[Ref]]]:
        """Each call to a function of another linted module that builds a new GradScaler on
        every call and steps, with it, an optimizer that outlives the call (its summary's
        `fresh_scalers`): the call, the construction as quoted there (with the module's
        name), and the optimizer as this file names it: the argument passed for the
        function's parameter, or the instance a method is called on (None when not known)."""
        model = self.model
        if model.external is None:
            return
        for record in self.index.calls:
            item = model.classify(record) if record.immediate else None
            if not isinstance(item, HelperCall) or item.foreign is None:
                continue
            for fresh in item.foreign.fresh_scalers:
                optimizer: Optional[Ref] = None
                if fresh.optimizer.startswith("param:"):
                    passed = item.argument_for(fresh.optimizer[len("param:") :])
                    optimizer = model.classifier.ref(passed, record.unit.scope)
                elif fresh.optimizer == "self" and isinstance(record.node.func, cst.Attribute):
                    optimizer = model.classifier.ref(record.node.func.value, record.unit.scope)
                yield record, f"{fresh.text} in {item.foreign.origin}", optimizer

    def _scalers_built_by_own_functions(self) -> List[Tuple[ScalerInfo, CallRecord, str]]:
        """`scaler = build_scaler()` for a function of this file that returns a GradScaler it
        builds (`saved_state.scalers_returned`, what the file's summary exports of it)."""
        returned = {id(unit.node): (unit, built) for unit, built in scalers_returned(self.model, self.model.units)}
        found: List[Tuple[ScalerInfo, CallRecord, str]] = []
        names = {unit.node.name.value for unit, _ in returned.values() if isinstance(unit.node, cst.FunctionDef)}
        for record in (record for name in sorted(names) for record in self.index.calls_to(name)):
            func = record.node.func
            if not isinstance(func, cst.Name):
                continue
            defined = [b.node for b in self.resolver.bindings(func.value, record.unit.scope) if b.kind == "def"]
            unit, built = returned.get(id(defined[0]), (None, None)) if len(defined) == 1 else (None, None)
            if unit is not None and built is not None:
                found += self._filled_by(record, built, unit.parameters, f"{built['scaler']} in `{unit.name}`")
        return found

    def _filled_by(self, record: CallRecord, entry: Mapping[str, Any], params: Sequence[str], built: str) -> List[Tuple[ScalerInfo, CallRecord, str]]:
        """The variables a call of a function that returns a new GradScaler fills (`entry`: what
        the state table says of it, `params`: its parameters), each with the call and `built`;
        none when the call passes a literal False for its `enabled` parameter."""
        enabled = entry.get("enabled")
        if enabled:
            passed = passed_for_parameter(record.node, params, enabled, False)
            if passed is not None and self.resolver.boolean(passed, record.unit.scope) is False:
                return []
        found = []
        for binding in self._bindings_from(record):
            if binding.value is record.node:
                key = binding_key(binding)
                found.append((self.model.scalers.get(key) or ScalerInfo(key, binding.name, None, ()), record, built))
        return found

    def _parents(self) -> Dict[int, CallRecord]:
        """id(call) -> the call it is an argument of."""
        parents: Dict[int, CallRecord] = {}
        for record in self.index.calls:
            for arg in record.node.args:
                if isinstance(arg.value, cst.Call):
                    parents[id(arg.value)] = record
        return parents

    # ------------------------------------------------------------------ optimizers
    def is_optimizer(self, call: StateCall) -> bool:
        if call.key in self.scalers.optimizers:
            return True
        return vocabulary.looks_like_optimizer(call.receiver)

    def optimizer_state(self) -> List[StateCall]:
        """Where the file checkpoints an optimizer's state or restores it from a checkpoint."""
        return [call for call in self.state_calls if self.is_optimizer(call)]

    # ------------------------------------------------------------------ scalers
    def scaler_state(self, key: str) -> List[StateCall]:
        """Saves and restores of the scaler `key`'s state, through copies and helpers."""
        aliases = self.aliases(key)
        return [call for call in self.state_calls if call.key in aliases]

    def scaler_state_kept(self, key: str) -> Optional[HandOff]:
        """Why the scaler `key`'s state may reach a checkpoint: the file saves or restores it
        (through copies and helpers), hands it to code that may, or saves state generically.
        None when nothing the file shows keeps it."""
        if key not in self._kept:
            self._kept[key] = self._why_kept(key)
        return self._kept[key]

    def _why_kept(self, key: str) -> Optional[HandOff]:
        held = next((h for h in self.model.facts(HeldScalers).held_by_instances() if h.scaler.key == key), None)
        if held is not None:
            # Held by an instance of another module's class: what the file does with the instance.
            use = self.model.facts(HeldScalers).kept(held)
            if use is not None:
                return HandOff(use, f"`{held.holder}` may keep it")
            return HandOff(self.generic[0].node, "the file saves objects' state generically") if self.generic else None
        found = self.scaler_state(key)
        if found:
            return HandOff(found[0].node, "its state is saved or restored")
        if self.generic:
            return HandOff(self.generic[0].node, "the file saves objects' state generically")
        return next(self._hand_offs(key, self.aliases(key)), None)

    def aliases(self, key: str) -> Set[str]:
        """The variables that hold the scaler `key`: itself, what it is copied into
        (`self.scaler = scaler`), the parameters of this file's helpers it is passed to."""
        if key in self._aliases:
            return self._aliases[key]
        found = self._aliases[key] = {key}
        pending = [key]
        while pending and len(found) < _MAX_ALIASES:
            current = pending.pop()
            for alias in self._copies(current):
                if alias not in found:
                    found.add(alias)
                    pending.append(alias)
        return found

    def _copies(self, key: str) -> Iterator[str]:
        if self._assigned_from is None:
            # variable -> the variables assigned from it: `self.scaler = scaler`,
            # `self.scaler = scaler if amp else None`.
            self._assigned_from = {}
            for binding in all_bindings(self.index):
                if binding.value is not None:
                    for name in _objects(binding.value):
                        source = self.resolver.identity(name, binding.value_scope)
                        self._assigned_from.setdefault(source, []).append(binding_key(binding))
        yield from self._assigned_from.get(key, ())
        for record, position, argument in self._passed(key):
            item = self.classify(record)
            if isinstance(item, HelperCall) and item.callee is not None:
                parameter = _parameter_for(item, position, argument)
                if parameter is not None:
                    yield self.resolver.identity(parameter, item.callee.scope)
        for _, targets in self._returned({key}):
            yield from targets or ()

    def _returned(self, aliases: Set[str]) -> Iterator[Tuple[cst.Return, Optional[List[str]]]]:
        """Each `return` of a holder of the scaler (alone, or in a tuple), with the variables
        the callers in this file unpack it into; None when some caller's use is not a plain
        assignment, or no caller is in the file."""
        if self._returns is None:
            self._returns = [(unit, node) for unit in self.index.units if not unit.is_module for node in own_returns(unit.node)]
        for unit, node in self._returns:
            position = self._position_returned(node.value, aliases, unit.scope)
            if position is None:
                continue
            targets: Optional[List[str]] = []
            callers = self._callers(unit)
            for record in callers:
                target = self._unpacked_into(record, position)
                if target is None:
                    targets = None
                    break
                targets.append(target)  # type: ignore[union-attr]
            yield node, targets if callers else None

    def _position_returned(self, value: Optional[cst.BaseExpression], aliases: Set[str], scope: Scope) -> Optional[int]:
        """-1 when `value` is a holder of the scaler, its index when it is in the tuple returned."""
        if value is None:
            return None
        name = dotted_name(value)
        if name is not None:
            return -1 if self.resolver.identity(name, scope) in aliases else None
        if isinstance(value, cst.Tuple):
            for index, element in enumerate(value.elements):
                name = dotted_name(element.value)
                if name is not None and self.resolver.identity(name, scope) in aliases:
                    return index
        return None

    def _callers(self, unit: CodeUnit) -> List[CallRecord]:
        found = []
        for record in self.index.calls:
            item = self.classify(record)
            if isinstance(item, HelperCall) and item.callee is unit:
                found.append(record)
        return found

    def _unpacked_into(self, record: CallRecord, position: int) -> Optional[str]:
        """The variable that takes the returned value at `position` (-1: the whole value)
        where the call is the right-hand side of an assignment."""
        for binding in self._bindings_from(record):
            if position == -1 and binding.value is record.node:
                return binding_key(binding)
            if position >= 0 and isinstance(binding.node, cst.Assign) and len(binding.node.targets) == 1:
                target = binding.node.targets[0].target
                if isinstance(target, (cst.Tuple, cst.List)) and position < len(target.elements):
                    element = target.elements[position].value
                    if dotted_name(element) == binding.name:
                        return binding_key(binding)
        return None

    def _bindings_from(self, record: CallRecord) -> Iterator:
        for binding in all_bindings(self.index):
            if binding.source is record.node:
                yield binding

    def _passed(self, key: str) -> List[Tuple[CallRecord, int, cst.Arg]]:
        """Calls that take the variable `key` itself as an argument: (call, position, argument)."""
        if self._arguments is None:
            self._arguments = {}
            for record in self.index.calls:
                for position, arg in enumerate(record.node.args):
                    for name in _objects(arg.value):
                        passed = self.resolver.identity(name, record.unit.scope)
                        self._arguments.setdefault(passed, []).append((record, position, arg))
        return self._arguments.get(key, [])

    def _hand_offs(self, original: str, aliases: Set[str]) -> Iterator[HandOff]:
        """Where a holder of the scaler hands it to code that may checkpoint it."""
        for key in aliases:
            if key != original and key.startswith("dot:"):
                # `state.scaler = scaler`: another object holds it, and may be saved whole.
                yield HandOff(self.index.module, f"`{key[4:]}` holds it")
            for record, _, arg in self._passed(key):
                item = self.classify(record)
                if isinstance(item, HelperCall) and item.callee is not None:
                    continue  # followed: its parameter is an alias
                callee = dotted_name(record.node.func) or ""
                last = callee.rsplit(".", 1)[-1]
                if self.model.external is not None and self._foreign_state(record) is not None:
                    if any(call.record is record and call.key in aliases for call in self.state_calls):
                        continue  # its summary says what it does with the scaler's state (`scaler_state`)
                    # `state.write(path, scaler=scaler)`, whose summary says it saves state.
                    yield HandOff(record.node, f"it is passed to `{callee}`, which saves objects' state")
                elif callee == "setattr":
                    yield HandOff(record.node, "an object's attribute holds it")
                elif "." in callee and last in _COLLECTING:
                    yield HandOff(record.node, f"`{callee}` collects it")
                elif vocabulary.named_like_checkpointing(last):
                    yield HandOff(record.node, f"it is passed to `{callee}`")
                elif last[:1].isupper():
                    yield HandOff(record.node, f"an instance of `{callee}` holds it")
        # Inside an object whose whole state is saved: `trainer.state_dict()` with
        # `trainer.scaler` the scaler, `self.state_dict()` of a class that does not show its
        # own `state_dict`.
        for key in aliases:
            name = key.rsplit(":", 1)[-1]
            owner = name.rsplit(".", 1)[0] if "." in name else None
            if owner is None:
                continue
            for call in self.state_calls:
                if owner == "self" and call.receiver == "self":
                    classes = self.resolver.class_and_bases(call.record.unit.scope)
                    if any(key.startswith(c.key + ":") for c in classes) and not any(
                        b.kind == "def" for c in classes for b in c.bindings.get("state_dict", ())
                    ):
                        yield HandOff(call.node, "`self.state_dict()` may hold it")
                elif owner != "self" and (call.receiver == owner or owner.startswith(call.receiver + ".")):
                    yield HandOff(call.node, f"`{call.receiver}`'s state may hold it")
        # Into a container, another object's attribute, a return value.
        for binding in all_bindings(self.index):
            if binding_key(binding) in aliases or binding.source is None:
                continue
            source = binding.source
            if (
                isinstance(source, (cst.Dict, cst.List, cst.Tuple, cst.Set))
                and self._mentions(source, aliases, binding.value_scope)
                and not self._only_arguments(binding)
            ):
                yield HandOff(binding.node, f"`{binding.name}` collects it")
        for record in self.index.calls:
            for arg in record.node.args:
                if isinstance(arg.value, (cst.Dict, cst.List, cst.Tuple, cst.Set)) and self._mentions(arg.value, aliases, record.unit.scope):
                    yield HandOff(record.node, "it is passed inside a collection")
        for unit, loop, _ in self.index.loops:
            if isinstance(loop, cst.For):
                iterated = loop.iter
                if isinstance(iterated, cst.Call) and isinstance(iterated.func, cst.Attribute):
                    iterated = iterated.func.value  # `{"scaler": scaler, ...}.items()`
                if isinstance(iterated, (cst.Dict, cst.List, cst.Tuple, cst.Set)) and self._mentions(iterated, aliases, unit.scope):
                    yield HandOff(loop, "a loop over objects holds it")
        for node, targets in self._returned(aliases):
            if targets is None:
                yield HandOff(node, "it is returned to code that may keep it")

    def _only_arguments(self, binding) -> bool:
        """`params = (loader, model, optimizer, scaler)` read only as `train_epoch(*params)`,
        where every such callee is a function of the file that saves and restores nothing: the
        tuple is the callee's arguments, not a checkpoint's collection."""
        name = binding.name
        if "." in name or not isinstance(binding.scope.node, (cst.Module, cst.FunctionDef)):
            return False
        reads = [node for node in iter_tree(binding.scope.node) if isinstance(node, cst.Name) and node.value == name]
        unpacked = [
            record
            for record in self.index.calls
            if record.unit.scope is binding.scope
            and any(arg.star == "*" and isinstance(arg.value, cst.Name) and arg.value.value == name for arg in record.node.args)
        ]
        bound = sum(1 for b in binding.scope.bindings.get(name, ()) if b.kind == "assign")
        if not unpacked or len(reads) != len(unpacked) + bound:
            return False
        for record in unpacked:
            item = self.classify(record)
            if not isinstance(item, HelperCall) or item.callee is None or _may_checkpoint(item.callee.node):
                return False
        return True

    def _mentions(self, expression: cst.BaseExpression, aliases: Set[str], scope: Scope) -> bool:
        """Whether a collection literal holds the scaler object itself (not `scaler.get_scale()`)."""
        candidates: List[cst.BaseExpression] = []
        if isinstance(expression, (cst.List, cst.Tuple, cst.Set)):
            candidates += [element.value for element in expression.elements]
        elif isinstance(expression, cst.Dict):
            candidates += [element.value for element in expression.elements if isinstance(element, cst.DictElement)]
        for candidate in candidates:
            name = dotted_name(candidate)
            if name is not None and self.resolver.identity(name, scope) in aliases:
                return True
        return False

    # ------------------------------------------------------------------ queries
    def half_kept(self, key: str, checkpoints: List[StateCall]) -> Optional[StateCall]:
        """The optimizer's checkpoint that lacks the scaler `key` when the file keeps only half
        of the scaler's state: saves it but never restores it while it restores the optimizer's
        (a resume that starts the scale again), or restores it but never saves it while it saves
        the optimizer's. None when the scaler also leaves by a hand-off, state is saved
        generically, or a construction takes its scale back (`init_scale=ckpt["scale"]`)."""
        calls = self.scaler_state(key)
        if not calls or self.generic or next(self._hand_offs(key, self.aliases(key)), None) is not None:
            return None
        info = self.scalers.info(key)
        if info is not None and any(not isinstance(keyword_argument(call, "init_scale"), (cst.Float, cst.Integer, type(None))) for call in info.constructions):
            return None
        saves, restores = any(not c.restores for c in calls), any(c.restores for c in calls)
        if saves == restores:
            return None
        missing = [c for c in checkpoints if c.restores == saves]
        return missing[0] if missing else None

    def optimizer_checkpoints(self, scaler: Optional[str] = None) -> List[StateCall]:
        """Where the file saves an optimizer's state (`optimizer.state_dict()`) or restores it
        (`optimizer.load_state_dict(...)`), copies kept in memory aside. With `scaler` (a
        key), only those a run of that scaler can reach: for a scaler local to a function,
        the checkpoints in the functions connected to it by calls in this file (what it
        calls, what calls it, where it is passed or returned); for one also kept in an
        attribute or a module global, the whole file's."""
        found = self.optimizer_state()
        aliases = self.aliases(scaler) if scaler is not None else set()
        if not aliases or not all(key.startswith("fn:") for key in aliases):
            return found  # kept on an object or in a module global: it lives as long as they do
        homes = [unit for unit in self.model.units if any(key.rsplit(":", 1)[0] == unit.scope.key for key in aliases)]
        connected = self.model.facts(Repetitions).connected(homes)
        return [call for call in found if any(call.record.unit is unit for unit in connected)]

    def restored_before(self, record: CallRecord, scaler: str) -> Optional[StateCall]:
        """A `load_state_dict` of the scaler `scaler` that runs before the call `record` in its
        unit (directly, or in a helper it calls first), not on an exclusive branch."""
        order = {id(r.node): i for i, r in enumerate(record.unit.calls)}
        here = order.get(id(record.node), -1)
        for restore in self.state_calls:
            if not restore.restores or restore.key != scaler:
                continue
            if restore.record.unit is record.unit:
                before = restore.record
            else:
                # A helper of the unit that restores it: `self.load_checkpoint(path)`.
                before = next(
                    (
                        caller
                        for caller in self.model.facts(Repetitions).callers(restore.record.unit)
                        if caller.unit is record.unit
                    ),
                    None,
                )
                if before is None:
                    continue
            if order.get(id(before.node), here) < here and not self._exclusive(before.frames, record.frames):
                return restore
        return None

    def _exclusive(self, first, second) -> bool:
        """Whether two stacks of frames lie on branches that cannot both be taken: the two
        sides of one `if`, or `if args.resume:` and a later `if not args.resume:`."""
        guards = {id(f.test): f.outcome for f in first if isinstance(f, GuardFrame)}
        if any(isinstance(f, GuardFrame) and guards.get(id(f.test), f.outcome) != f.outcome for f in second):
            return True
        facts = {fact for f in first if isinstance(f, GuardFrame) for fact in self.model.assumptions(f.test, f.outcome)}
        return any(
            (condition, not value) in facts
            for f in second
            if isinstance(f, GuardFrame)
            for condition, value in self.model.assumptions(f.test, f.outcome)
        )


def _origin(foreign) -> str:
    return os.path.basename(foreign.path) if foreign is not None and foreign.path else "another module"


def _may_checkpoint(function: cst.CSTNode) -> bool:
    """A function that saves or restores some state, or calls anything named like checkpointing."""
    for node in iter_tree(function):
        if isinstance(node, cst.Call):
            callee = (dotted_name(node.func) or "").rsplit(".", 1)[-1].lower()
            if callee in ("state_dict", "load_state_dict") or _CHECKPOINTING_CALL.search(callee):
                return True
    return False


def _generic_receiver(bindings) -> bool:
    """A variable filled by `getattr(obj, name)`: state saved by attribute name."""
    return bool(bindings) and all(_is_getattr(b.value) for b in bindings)


def _objects(value: cst.BaseExpression) -> List[str]:
    """The variables an argument may hand over: `scaler`, or either branch of `scaler if
    amp else None`."""
    if isinstance(value, cst.IfExp):
        return _objects(value.body) + _objects(value.orelse)
    name = dotted_name(value)
    return [name] if name is not None else []


def _is_getattr(value: Optional[cst.BaseExpression]) -> bool:
    return isinstance(value, cst.Call) and dotted_name(value.func) == "getattr"


def _in_memory(record: CallRecord, restores: bool, parents: Dict[int, CallRecord], resolver: Resolver) -> bool:
    """A state copied in memory, not a checkpoint: `copy.deepcopy(opt.state_dict())`,
    `opt.load_state_dict(opt.state_dict())`, `opt.load_state_dict(copy.deepcopy(saved))`,
    `opt.load_state_dict(initial)` with `initial` such a copy."""

    def copied(value: Optional[cst.BaseExpression]) -> bool:
        if isinstance(value, cst.Call):
            name = (dotted_name(value.func) or "").rsplit(".", 1)[-1]
            return name in _COPIES or name == "state_dict"
        return False

    if restores:
        if not record.node.args:
            return False
        value = record.node.args[0].value
        name = dotted_name(value)
        if name is not None:
            values = resolver.values(name, record.unit.scope)
            return bool(values) and all(copied(bound) for bound, _ in values)
        return copied(value)
    parent = parents.get(id(record.node))
    if parent is None:
        return False
    name = (dotted_name(parent.node.func) or "").rsplit(".", 1)[-1]
    return name in _COPIES or name == "load_state_dict"


def _parameter_for(call: HelperCall, position: int, arg: cst.Arg) -> Optional[str]:
    """The callee's parameter that receives `arg` (the call's argument at `position`)."""
    if arg.keyword is not None:
        return arg.keyword.value if arg.keyword.value in call.parameters else None
    if arg.star:
        return None
    args = call.record.node.args
    if any(a.star for a in args[:position]):
        return None
    index = sum(1 for a in args[:position] if a.keyword is None) + (1 if call.bound_self else 0)
    parameters = call.parameters
    return parameters[index] if index < len(parameters) else None
