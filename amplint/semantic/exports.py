"""What a linted module's functions do to mixed precision, for the modules that import them.

Linting runs in two phases. Each file is analysed on its own first, and exports a summary of
its functions (`export_summary`): every event each one may run, and every way through it,
with parameters left symbolic (`param:scaler`) and everything else the module's own
(`ext:<path>:...`). The summary is plain JSON, so a cache can keep it beside the file's
findings. Then each file that imports a linted module whose summary has AMP events is linted
again with those summaries (`ExternalModules`): a call to `clip_and_step(...)` imported from
`.optim_utils` stands for its events there, reported at the call.

Classes are indexed too (`classes`: each top-level class with its bases, as the module
resolves them, and its methods). A method is exported as `Class.method`, a constructor as
`Class.__init__`: `ema = ModelEMA(model)` runs `ModelEMA.__init__` there, `self.step()` in a
subclass of an imported class runs the base's `step`. A class whose base is another linted
module's exports the methods it inherits from it under its own name (with the scalers they
name), so a chain of imported bases resolves one module at a time, like calls between
functions do. A function that builds a new GradScaler on every call and steps an optimizer
that outlives the call with it says so (`fresh_scalers`): a loop of an importing module that
calls it every iteration restarts the scale each time (AMP008).

A script that fits an instance of another module's class with a framework object that may be
float16 (`L.Trainer(precision="16-mixed").fit(LitModel())`) names that class as imported
(`trains`). `project.link` resolves it among every linted file and hands the module that
defines it what it found (under `<script path>::trains`), whose class then has the
framework's scaler as if the Trainer were built beside it (`ExternalModules.trained_here`).

A fact family of `amplint.analyses` can put facts of its own into the summary (`facts`, under
the family's `SUMMARY_KEY`, each entry under the class or function it is about): the core
carries them without reading them, and an importing module's analysis asks for them with
`SemanticModel.exported_facts` (`ModelEMA(model)` imported from `utils`: what `Precision`
exported of `ModelEMA` there). The engine names the families that export
(`amplint.analyses.EXPORTING`); the core never imports them.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Dict, FrozenSet, Iterable, Iterator, List, Mapping, Optional, Protocol, Sequence, Set, Tuple

import libcst as cst

from amplint.project.import_paths import PathIndex
from amplint.semantic.conditions import Assumption, Condition
from amplint.semantic.types import UNKNOWN_SCALER, EventKind, Ref, ScalerInfo
from amplint.semantic.names import dotted_name, source_text
from amplint.semantic.pytorch import frameworks, vocabulary
from amplint.semantic.resolve import field_default
from amplint.semantic.saved_state import export_state

if TYPE_CHECKING:
    from amplint.semantic.model import SemanticModel

SUMMARY_VERSION = 4


class ExportsFacts(Protocol):
    """A fact family whose facts cross modules (`amplint.analyses.EXPORTING`)."""

    SUMMARY_KEY: str  # where its facts are in a summary: `summary["facts"][SUMMARY_KEY]`

    @classmethod
    def export(cls, model: "SemanticModel", path: str) -> Dict[str, Any]:
        """Plain JSON, per class or function of the module another module may import: what an
        importing module's analysis needs of it; empty when nothing (kept cheap: it runs on
        every file that is analysed). An entry's `words` are code it quotes, for the words a
        rule looks for before the importing file is parsed."""
        ...


# --------------------------------------------------------------------------- export


def export_summary(model: "SemanticModel", path: str, families: Sequence[ExportsFacts] = ()) -> Optional[Dict[str, Any]]:
    """The JSON summary of the module's top-level functions and methods that do AMP work,
    of its classes, and the facts `families` export of them; None when there is nothing."""
    functions: Dict[str, Any] = {}
    origin = os.path.basename(path)
    confirmed = model.confirmed_entry_uses()
    fresh = _fresh_scalers(model)

    def export(event) -> Dict[str, Any]:
        return _event(event, path, origin, referenced, confirmed, model.scale_corrupts(event.event))

    referenced = set()
    for unit in model.units:
        if unit.is_module or not _exported(unit):
            continue
        summary = model.flow.summary(unit)
        if not summary.events:
            continue
        exported_events = [export(event) for event in summary.events]
        sequences = None
        only_in_sequences: List[Dict[str, Any]] = []
        if summary.sequences is not None:
            # Each way through: the conditions it assumed on the function's parameters and
            # on names its callers share (rewritten with the caller's arguments), its events,
            # each by its place in the function's events (then `sequence_events`): a way
            # through repeats events the function's list has, and written out in full they
            # were four fifths of a summary.
            places: Dict[str, int] = {}
            for place, exported in enumerate(exported_events):
                places.setdefault(_event_key(exported), place)

            def place_of(exported: Dict[str, Any]) -> int:
                key = _event_key(exported)
                if key not in places:
                    places[key] = len(exported_events) + len(only_in_sequences)
                    only_in_sequences.append(exported)
                return places[key]

            written_out = sorted(
                (
                    {
                        "facts": sorted([cond.text, sorted(cond.names), value] for cond, value in sequence.facts),
                        "events": [export(event) for event in sequence.events],
                    }
                    for sequence in summary.sequences
                ),
                key=repr,
            )
            sequences = [{"facts": way["facts"], "events": [place_of(event) for event in way["events"]]} for way in written_out]
        functions[unit.name] = {
            "params": unit.parameters,
            "method": unit.scope.class_scope is not None,
            "events": exported_events,
            "sequences": sequences,
        }
        if only_in_sequences:
            functions[unit.name]["sequence_events"] = only_in_sequences
        if id(unit) in fresh:
            functions[unit.name]["fresh_scalers"] = fresh[id(unit)]
    for name, factory in model.scaler_facts.factories.items():
        # A function that builds and returns a framework object: its callers' object's precision.
        entry = functions.setdefault(name, {"params": _params_of(model, name), "method": False, "events": [], "sequences": None})
        entry["returns_framework"] = {
            "framework": factory.framework,
            "precisions": sorted(factory.precisions),
            "complete": factory.complete,
            "parameter": factory.parameter,
            "position": factory.position,
        }
    classes = _classes(model)
    for name, hooks in _framework_hooks(model, origin, classes).items():
        constructor = functions.setdefault(f"{name}.__init__", {"params": _params_of(model, f"{name}.__init__") or ["self"], "method": True, "events": [], "sequences": None})
        constructor["framework_hooks"] = hooks
    inherited, inherited_scalers = _inherited(model, classes)
    for name, function in inherited.items():
        functions.setdefault(name, function)
    state = export_state(model, _exported)
    facts = {}
    for family in families:
        exported = family.export(model, path)
        if exported:
            facts[family.SUMMARY_KEY] = exported
    trains = _trains(model)
    constants = _constants(model)
    if not functions and not state and not facts and not trains and not constants:
        return None
    scalers = {}
    for key, info in model.scalers.items():
        exported_key = _key(key, path)
        if exported_key in referenced or info.framework is not None:
            scalers[exported_key] = {"name": info.name, "enabled": info.enabled, "framework": info.framework}
    for key, raw in inherited_scalers.items():
        scalers.setdefault(key, raw)
    exported_classes = {name: {"bases": [[base, list(imported) if imported else None] for base, imported in entry["bases"]], "methods": entry["methods"]} for name, entry in classes.items()}
    summary = {"version": SUMMARY_VERSION, "functions": functions, "scalers": scalers, "classes": exported_classes}
    if state:
        summary["state"] = state
    if trains:
        summary["trains"] = trains
    if constants:
        summary["constants"] = constants
    if facts:
        summary["facts"] = facts
    return summary


def _classes(model: "SemanticModel") -> Dict[str, Dict[str, Any]]:
    """The module's top-level classes: each with its bases (as written, and where an import
    names one: (module, level, name) of the class it imports) and the methods it defines."""
    found: Dict[str, Dict[str, Any]] = {}
    module_scope = model.index.module_scope
    for scope in model.index.scopes:
        if scope.kind != "class" or scope.parent is not module_scope:
            continue
        bases = []
        for base in scope.bases:
            head = base.split(".", 1)[0]
            imported = None
            for binding in module_scope.bindings.get(head, ()):
                if binding.kind == "import":
                    found_import = imported_module(binding.node, head)
                    if found_import is not None:
                        module, level, name = found_import
                        rest = base.split(".")[1:]
                        if name is None:  # `import pkg.trainers as t; class A(t.Base)`
                            imported = (".".join([module or "", *rest[:-1]]).strip("."), level, rest[-1]) if rest else None
                        elif not rest:  # `from .base import Base`
                            imported = (module, level, name)
                        else:  # `from pkg import trainers; class A(trainers.Base)`
                            imported = (".".join(filter(None, [module, name, *rest[:-1]])), level, rest[-1])
            bases.append((base, imported))
        methods = sorted(name for name, bindings in scope.bindings.items() if any(b.kind == "def" for b in bindings))
        found[scope.name] = {"bases": bases, "methods": methods}
    return found


def _params_of(model: "SemanticModel", name: str) -> List[str]:
    unit = next((unit for unit in model.units if unit.name == name and not unit.is_module), None)
    return unit.parameters if unit is not None else []


def _trains(model: "SemanticModel") -> Optional[Dict[str, Any]]:
    """The classes of other modules the file fits with a framework object that may be float16
    (`ScalerFacts.trained_imports`): [module, level, name, framework, whether float16 is sure],
    as imported. Which module that is, `project.link` works out among every linted file, and
    hands that module what it found (`ExternalModules.trained_here`)."""
    trained = model.scaler_facts.trained_imports
    if not trained:
        return None
    return {"classes": [[module, level, name, framework, surely] for (module, level, name, framework), surely in sorted(trained.items(), key=lambda item: (item[0][0] or "", *item[0][1:]))]}


def _framework_hooks(model: "SemanticModel", origin: str, classes: Mapping[str, Mapping[str, Any]]) -> Dict[str, List[Dict[str, Any]]]:
    """For each class a framework trains whose hooks leave a plain backward pending for the
    framework's scaler (`SemanticModel.trained_class_hooks`: a Trainer subclass whose
    `training_step` runs `loss.backward()`), what a module that builds the class with its
    settings needs to report it there: the framework, the hook, the backward as written and
    its line, and where the constructor takes the settings (-1: by keyword only, for a class
    with an `__init__` of its own)."""
    trained = model.trained_class_hooks()
    if not trained:
        return {}
    from libcst.metadata import MetadataWrapper, PositionProvider

    # Rare (a Trainer subclass with an unscaled backward): the whole module's positions, once.
    positions = MetadataWrapper(model.module, unsafe_skip_copy=True).resolve(PositionProvider)
    found: Dict[str, List[Dict[str, Any]]] = {}
    for name, pending in trained.items():
        found[name] = [
            {
                "framework": framework.name,
                "owner": name,
                "hook": backward.unit.name.rsplit(".", 1)[-1],
                "text": f"`{source_text(backward.event.node)}`",
                "tensor": source_text(backward.event.tensor) if backward.event.tensor is not None else "loss",
                "origin": origin,
                "line": positions[backward.event.node].start.line if backward.event.node in positions else 0,
                "position": _settings_position(model, name, framework),
            }
            for backward, framework in pending
        ]
    return found


def _settings_position(model: "SemanticModel", name: str, framework) -> int:
    """Where the constructor of the class `name` takes the framework's settings: the
    framework's own position (`Trainer(model, args)`) when the class has no `__init__`, or
    one that hands its `*args` on to `super().__init__(*args, ...)`; the position of a
    parameter named like the keyword in one of its own; else -1 (by keyword only)."""
    init = next((unit for unit in model.units if unit.name == f"{name}.__init__" and unit.scope.class_scope is not None), None)
    if init is None or not isinstance(init.node, cst.FunctionDef):
        return framework.settings_position
    params = init.node.params
    positional = [param.name.value for param in (*params.posonly_params, *params.params)][1:]
    if framework.settings_keyword in positional:
        return positional.index(framework.settings_keyword)
    star = params.star_arg.name.value if isinstance(params.star_arg, cst.Param) else None
    if not positional and star is not None:
        for record in init.calls:
            func = record.node.func
            if (
                isinstance(func, cst.Attribute)
                and func.attr.value == "__init__"
                and isinstance(func.value, cst.Call)
                and dotted_name(func.value.func) == "super"
                and record.node.args[:1]
                and record.node.args[0].star == "*"
                and dotted_name(record.node.args[0].value) == star
            ):
                return framework.settings_position
    return -1


def _inherited(model: "SemanticModel", classes: Mapping[str, Mapping[str, Any]]) -> Tuple[Dict[str, Any], Dict[str, Any]]:
    """The methods each class inherits from a base another linted module exports, under the
    class's own name (`Sub.fit` for `Base.fit`), and the scalers those methods name. Bases in
    this module come first, as Python's method order has them for single inheritance."""
    external = model.external
    functions: Dict[str, Any] = {}
    scalers: Dict[str, Any] = {}
    if external is None:
        return functions, scalers
    for name in classes:
        defined = set()
        for owner in _local_chain(name, classes):
            defined.update(classes[owner]["methods"])
            for _, imported in classes[owner]["bases"]:
                if imported is None:
                    continue
                module, level, base = imported
                raw = external.raw(module, level)
                if raw is None:
                    continue
                prefix = base + "."
                for qualified, function in raw.get("functions", {}).items():
                    method = qualified[len(prefix) :] if qualified.startswith(prefix) else None
                    if method is None or "." in method or method in defined:
                        continue
                    if function.get("framework_hooks"):
                        # A hook the subclass overrides is its own, not the base's.
                        hooks = [hook for hook in function["framework_hooks"] if hook.get("hook") not in defined]
                        if not hooks and not function.get("events"):
                            continue
                        function = {**function, "framework_hooks": hooks}
                    functions.setdefault(f"{name}.{method}", function)
                    text = repr(function)
                    scalers.update((key, value) for key, value in raw.get("scalers", {}).items() if key in text)
    return functions, scalers


def is_module_class(summary: Optional[Mapping[str, Any]], name: str) -> bool:
    """Whether the class `name` a summary indexes derives from `torch.nn.Module` (itself or
    through bases of its module): calling an instance runs its `forward`."""
    classes = (summary or {}).get("classes", {})
    for owner in _local_chain(name, classes):
        for _, imported in classes[owner]["bases"]:
            if imported is not None and list(imported) in (["torch.nn", 0, "Module"], ["torch.nn.modules.module", 0, "Module"]):
                return True
    return False


def _local_chain(name: str, classes: Mapping[str, Mapping[str, Any]]) -> List[str]:
    """`name`, then its bases that are classes of this module, depth first."""
    chain: List[str] = []
    pending = [name]
    while pending:
        current = pending.pop(0)
        if current in chain or current not in classes:
            continue
        chain.append(current)
        pending.extend(base for base, imported in classes[current]["bases"] if imported is None)
    return chain


def _fresh_scalers(model: "SemanticModel") -> Dict[int, List[Dict[str, str]]]:
    """For each exported function: the GradScalers it builds on every call (in no loop, under
    no `if`) and steps, in the same call, an optimizer that outlives the call: one of its
    parameters (`param:optimizer`) or an attribute of the instance (`self`). None in a module
    whose autocast is only bfloat16 (as AMP008 has it)."""
    found: Dict[int, List[Dict[str, str]]] = {}
    if not model.float16_possible:
        return found  # a scaler that serves bfloat16 only never overflows at its initial scale
    for info, record in model.grad_scalers_built():
        unit = record.unit
        if unit.is_module or not _exported(unit) or record.frames:
            continue
        for occurrence in model.occurrences_in(unit):
            if occurrence.kind is not EventKind.SCALER_STEP or occurrence.receiver is None or occurrence.receiver.key != info.key:
                continue
            lasting = _outlives_the_call(occurrence.argument, unit)
            if lasting is not None:
                found.setdefault(id(unit), []).append(
                    {"name": info.name, "text": f"`{source_text(record.node)}`", "optimizer": lasting, "optimizer_text": occurrence.argument.text}
                )
                break
    return found


def _outlives_the_call(ref: Optional[Ref], unit) -> Optional[str]:
    """`param:<name>` for an optimizer the function is handed (and never rebinds), `self` for
    one its instance holds and it does not set; None for anything else."""
    if ref is None or ref.key.startswith("expr:"):
        return None
    parts = ref.text.split(".")
    scope = unit.scope
    if len(parts) == 1 and parts[0] in unit.parameters and parts[0] not in ("self", "cls"):
        if all(binding.kind == "param" for binding in scope.bindings.get(parts[0], ())):
            return f"param:{parts[0]}"
        return None
    owner = scope.class_scope
    if len(parts) >= 2 and parts[0] == "self" and owner is not None and unit.parameters[:1] == ["self"]:
        attribute = "self." + parts[1]
        if any(binding.home is scope for binding in owner.attributes.get(attribute, ())):
            return None  # set in this very call
        return "self"
    return None


def _event(event, path: str, origin: str, referenced: set, confirmed, use: Optional[str]) -> Dict[str, Any]:
    exported = {
        "reported": event.event.reported_where_written or id(event.event) in confirmed,
        "use": use,
        "kind": event.event.kind.value,
        "text": event.event.foreign or f"`{source_text(event.event.node)}`",
        "receiver": _ref(event.receiver, path),
        "argument": _ref(event.argument, path),
        "scaled": _key(event.scaled, path),
        "tensor_param": event.tensor_param,
        "region": "on" if event.own_region else ("off" if event.autocast_off else "inherit"),
        "framework_scaler": _key(event.event.framework_scaler, path),
        "origin": origin,
    }
    for ref in (exported["receiver"], exported["argument"]):
        if ref is not None:
            referenced.add(ref["key"])
    if exported["scaled"]:
        referenced.add(exported["scaled"])
    return exported


def _event_key(exported: Mapping[str, Any]) -> str:
    # `_event` makes every event's dict with the same keys in the same order, of plain values.
    return repr(exported)


def _exported(unit) -> bool:
    """Top-level functions and methods of top-level classes: what another module can import."""
    parent = unit.scope.parent
    return parent is not None and (parent.kind == "module" or (parent.kind == "class" and parent.parent is not None and parent.parent.kind == "module"))


def _key(key: Optional[str], path: str) -> Optional[str]:
    if key is None or key == UNKNOWN_SCALER or key.startswith(("param:", "ext:")):
        return key
    return f"ext:{path}:{key}"


def _ref(ref: Optional[Ref], path: str) -> Optional[Dict[str, str]]:
    if ref is None:
        return None
    return {"text": ref.text, "key": _key(ref.key, path) or ref.key}


# --------------------------------------------------------------------------- import


@dataclass(frozen=True)
class ForeignEvent:
    kind: EventKind
    text: str  # the call as written in its module, quoted: "`s.step(opt)`"
    origin: str  # the file it is in: `optim_utils.py`
    receiver: Optional[Ref]
    argument: Optional[Ref]
    scaled: Optional[str]
    tensor_param: Optional[str]
    region: str  # "inherit", "on" (its own autocast), "off"
    framework_scaler: Optional[str]
    use: Optional[str] = None  # gradient reads and clips: what the scale corrupts
    reported: bool = False  # its own module reports it (see AmpEvent.reported_where_written)


@dataclass(frozen=True)
class FreshScaler:
    """A GradScaler a function builds on every call and steps `optimizer` with (see `_fresh_scalers`)."""

    name: str  # the variable it fills: `scaler`
    text: str  # the construction, quoted: "`torch.amp.GradScaler(\"cuda\")`"
    optimizer: str  # `param:<name>`, or `self`: the instance holds it
    optimizer_text: str  # as the function names it: `optimizer`, `self.optimizer`


@dataclass(frozen=True)
class FactoryReturn:
    """A framework object a top-level function builds and returns (`def build_accelerator(cfg):
    return Accelerator(mixed_precision="fp16")`), for the modules that call the function: the
    framework, the values its precision may take and whether that is all of them. A function
    that hands one of its parameters over as the precision (`Accelerator(mixed_precision=mp)`)
    names it (`parameter`, `position`): each caller's argument decides, else the default's
    values. A precision read from anything else of the caller's (`cfg.mixed_precision`) is
    not exported: it is unknown there."""

    framework: str
    precisions: FrozenSet[str]
    complete: bool
    parameter: Optional[str] = None
    position: int = -1


@dataclass(frozen=True)
class ForeignHook:
    """A plain backward a hook of a class leaves pending for the framework that trains the
    class to step through its scaler (see `_framework_hooks`): exported with the class's
    constructor, reported where the class is built with settings that may be float16."""

    framework: str  # `frameworks.Framework.name`: "transformers"
    owner: str  # the class that defines the hook: `DistillTrainer`
    hook: str  # `training_step`
    text: str  # the backward as written, quoted: "`loss.backward()`"
    tensor: str  # what it runs on: `loss`
    origin: str  # the file it is in: `trainer.py`
    line: int
    position: int  # where the constructor takes the settings; -1: by keyword only


@dataclass(frozen=True)
class ForeignFunction:
    name: str
    params: Tuple[str, ...]
    method: bool
    events: Tuple[ForeignEvent, ...]
    # Each way through: (the conditions it assumed, its events).
    sequences: Optional[Tuple[Tuple[FrozenSet[Assumption], Tuple[ForeignEvent, ...]], ...]]
    fresh_scalers: Tuple[FreshScaler, ...] = ()
    origin: str = ""  # the file it is in: `engine.py`
    framework_hooks: Tuple[ForeignHook, ...] = ()  # a constructor's (see `ForeignHook`)
    returns_framework: Optional[FactoryReturn] = None  # a framework object it builds and returns


def _foreign_event(e: Mapping[str, Any], path: str) -> "ForeignEvent":
    return ForeignEvent(
        kind=EventKind(e["kind"]),
        text=e["text"],
        origin=e.get("origin", os.path.basename(path)),
        receiver=Ref(**e["receiver"]) if e.get("receiver") else None,
        argument=Ref(**e["argument"]) if e.get("argument") else None,
        scaled=e.get("scaled"),
        tensor_param=e.get("tensor_param"),
        region=e.get("region", "inherit"),
        framework_scaler=e.get("framework_scaler"),
        reported=bool(e.get("reported")),
        use=e.get("use"),
    )


def _factory_return(raw: Optional[Mapping[str, Any]]) -> Optional[FactoryReturn]:
    if not raw:
        return None
    return FactoryReturn(raw["framework"], frozenset(raw["precisions"]), bool(raw["complete"]), raw.get("parameter"), int(raw.get("position", -1)))


@dataclass
class ForeignModule:
    path: str
    functions: Dict[str, ForeignFunction]
    scalers: Dict[str, Dict[str, Any]]
    # What its functions and classes do with objects' saved state (`amplint.semantic.saved_state`).
    state: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    # What fact families exported: family key -> class or function name -> its facts, as exported.
    facts: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)


def load_summary(path: str, data: Mapping[str, Any]) -> Optional[ForeignModule]:
    if not isinstance(data, Mapping) or data.get("version") != SUMMARY_VERSION:
        return None
    functions = {}
    for name, raw in data.get("functions", {}).items():
        sequences = raw.get("sequences")
        table = [*raw["events"], *raw.get("sequence_events", ())]
        # A function a package re-exports from one of its modules is that module's (`amplint.project.reexports`).
        home = raw.get("home") if isinstance(raw.get("home"), str) else path
        functions[name] = ForeignFunction(
            name,
            tuple(raw["params"]),
            bool(raw.get("method")),
            tuple(_foreign_event(e, home) for e in raw["events"]),
            tuple(
                (
                    frozenset((Condition(text, frozenset(names)), bool(value)) for text, names, value in s["facts"]),
                    # an event of its own in each way through, as each was written out before
                    tuple(_foreign_event(table[_place(place, len(table))], home) for place in s["events"]),
                )
                for s in sequences
            )
            if sequences is not None
            else None,
            tuple(FreshScaler(f["name"], f["text"], f["optimizer"], f.get("optimizer_text", "the optimizer")) for f in raw.get("fresh_scalers", ())),
            os.path.basename(home),
            tuple(
                ForeignHook(h["framework"], h["owner"], h["hook"], h["text"], h["tensor"], h["origin"], int(h["line"]), int(h["position"]))
                for h in raw.get("framework_hooks", ())
            ),
            _factory_return(raw.get("returns_framework")),
        )
    facts = data.get("facts", {})
    if not isinstance(facts, Mapping) or not all(isinstance(family, Mapping) for family in facts.values()):
        facts = {}
    return ForeignModule(path, functions, dict(data.get("scalers", {})), state=dict(data.get("state", {})), facts=facts)


def _place(place: Any, size: int) -> int:
    """An event's place in its function's table, as a summary gives it (ValueError when it
    has none there: the summary is not one amplint wrote)."""
    if type(place) is not int or not 0 <= place < size:
        raise ValueError(f"no event at {place!r}")
    return place


@dataclass
class ExternalModules:
    """The summaries of the linted modules a file may import, found by where they are.

    `summaries` maps each linted file's path to its summary; `path` is the importing
    file's. `from .optim_utils import f` is looked up beside it; `from pkg.optim_utils
    import f` as any linted file ending in `pkg/optim_utils.py` (or its `__init__.py`),
    when exactly one does."""

    path: str
    summaries: Mapping[str, Mapping[str, Any]]
    _loaded: Dict[str, Optional[ForeignModule]] = field(default_factory=dict)
    _index: Optional["PathIndex"] = None

    def module(self, name: Optional[str], level: int) -> Optional[ForeignModule]:
        target = self.path_of(name, level)
        if target is None:
            return None
        if target not in self._loaded:
            self._loaded[target] = load_summary(target, self.summaries[target])
        return self._loaded[target]

    def raw(self, name: Optional[str], level: int) -> Optional[Mapping[str, Any]]:
        """The summary, as exported, of the linted module `from <level dots><name> import`
        refers to (when this file is linted with it): its functions copied as they are."""
        if self.module(name, level) is None:
            return None
        return self.summaries[self.path_of(name, level) or ""]

    def constant(self, name: Optional[str], level: int, key: str) -> Optional[Mapping[str, Any]]:
        """What the summary of the linted module `from <level dots><name> import` refers to
        says of its constant `key` (`AMP_DTYPE`, `TrainConfig.mixed_precision`: an entry of
        its `constants`), or None."""
        raw = self.raw(name, level)
        constants = raw.get("constants") if isinstance(raw, Mapping) else None
        entry = constants.get(key) if isinstance(constants, Mapping) else None
        return entry if isinstance(entry, Mapping) else None

    def words(self) -> str:
        """The code the summaries quote (each event's call, each scaler built), for the words
        a rule looks for before a file is parsed: a file that calls a helper which builds a
        GradScaler runs a GradScaler."""
        texts = []
        for summary in self.summaries.values():
            for function in summary.get("functions", {}).values():
                texts.extend(event.get("text", "") for event in function.get("events", ()))
                texts.extend(fresh.get("text", "") for fresh in function.get("fresh_scalers", ()))
            texts.extend(entry.get("scaler", "") for entry in summary.get("state", {}).values())
            texts.extend(summary.get("trains_here", {}).get("words", ()))
            for family in summary.get("facts", {}).values():
                for entry in family.values():
                    texts.extend(entry.get("words", ()))
        return "\n" + "\n".join(texts)

    def trained_here(self) -> Dict[Tuple[str, str], Tuple[bool, str]]:
        """The classes of this file that another linted module fits with a framework object that
        may train them in float16 (train.py's `L.Trainer(precision="16-mixed").fit(LitModel())`:
        what `project.link` found of its `trains` for this file): (class name, framework) ->
        whether float16 is sure rather than one of several settings, and the fitting module's
        path from here (one that surely fits it in float16 first)."""
        found: Dict[Tuple[str, str], Tuple[bool, str]] = {}
        for summary in self.summaries.values():
            given = summary.get("trains_here")
            if not isinstance(given, Mapping):
                continue
            for name, framework, surely, origin in given.get("classes", ()):
                before = found.get((name, framework))
                if before is None or (surely and not before[0]) or (surely == before[0] and origin < before[1]):
                    found[(name, framework)] = (bool(surely), origin)
        return found

    def scaler(self, key: str) -> Optional[ScalerInfo]:
        """A scaler another module holds (`ext:<path>:<key>`), as its summary describes it."""
        for module in self._loaded.values():
            if module is not None and key in module.scalers:
                raw = module.scalers[key]
                return ScalerInfo(key, raw.get("name", "scaler"), raw.get("enabled"), (), raw.get("framework"))
        return None

    def used(self) -> List[str]:
        """The linted modules this file's analysis looked up, for cache keys."""
        return sorted(path for path, module in self._loaded.items() if module is not None)

    def path_of(self, name: Optional[str], level: int) -> Optional[str]:
        """The linted file `from <level dots><name> import ...` refers to, if any."""
        if self._index is None:
            self._index = PathIndex(self.summaries)
        return self._index.path_of(self.path, name, level)


# What a file asks of other modules: (module, relative level, the function or method looked
# up in its summary; None: the summary as a whole).
Lookup = Tuple[Optional[str], int, Optional[str]]


class _Asked(dict):
    """A summary's functions that has none, and notes each name looked up in it."""

    def __init__(self, noted: Callable[[Optional[str]], None]) -> None:
        super().__init__()
        self._noted = noted

    def get(self, key: Any, default: Any = None) -> Any:
        self._noted(key if isinstance(key, str) else None)
        return default

    def __contains__(self, key: object) -> bool:
        self._noted(key if isinstance(key, str) else None)
        return False

    def __getitem__(self, key: Any) -> Any:
        self._noted(key if isinstance(key, str) else None)
        raise KeyError(key)

    # Read whole: every function counts.
    def __iter__(self) -> Any:
        self._noted(None)
        return iter(())

    def __len__(self) -> int:
        self._noted(None)
        return 0

    def keys(self) -> Any:
        self._noted(None)
        return {}.keys()

    def values(self) -> Any:
        self._noted(None)
        return {}.values()

    def items(self) -> Any:
        self._noted(None)
        return {}.items()


class _AskedFamilies(dict):
    """A summary's facts that has none: each family asked for notes the names looked up in it."""

    def __init__(self, noted: Callable[[Optional[str]], None]) -> None:
        super().__init__()
        self._noted = noted

    def get(self, key: Any, default: Any = None) -> Any:
        return _Asked(self._noted)

    def __getitem__(self, key: Any) -> Any:
        return _Asked(self._noted)


class _NoSummaries(Mapping):
    """Every module's summary, empty."""

    def __getitem__(self, path: str) -> Mapping[str, Any]:
        return {}

    def __iter__(self) -> Iterator[str]:
        return iter(())

    def __len__(self) -> int:
        return 0


class LookupRecorder(ExternalModules):
    """Stands in for `ExternalModules` in a file's lint without other modules' summaries: every
    module it looks up has nothing, so the analysis is the one without summaries, and what it
    looked up is noted (`lookups`). Linted again with summaries in which none of these is
    found, the file's analysis would be that same one (`amplint.project.link` then keeps its first
    result). Every way the analysis reads another module's summary goes through `module` or
    `path_of`, and so is noted here."""

    def __init__(self, path: str) -> None:
        super().__init__(path, _NoSummaries())
        self.lookups: Set[Lookup] = set()

    def module(self, name: Optional[str], level: int) -> Optional[ForeignModule]:
        noted: Callable[[Optional[str]], None] = lambda function: self.lookups.add((name, level, function))  # noqa: E731
        return ForeignModule("", _Asked(noted), {}, state=_Asked(noted), facts=_AskedFamilies(noted))

    def path_of(self, name: Optional[str], level: int) -> Optional[str]:
        self.lookups.add((name, level, None))
        return None

    def constant(self, name: Optional[str], level: int, key: str) -> Optional[Mapping[str, Any]]:
        self.lookups.add((name, level, key))  # found again only where a summary has that constant
        return None


def imported_module(binding_node: cst.CSTNode, local: str) -> Optional[Tuple[Optional[str], int, Optional[str]]]:
    """For a name bound by an import: (module, relative level, the name imported from it).

    `from .optim_utils import clip as c` binds `c` -> ("optim_utils", 1, "clip");
    `import pkg.utils as u` binds `u` -> ("pkg.utils", 0, None)."""
    if isinstance(binding_node, cst.ImportFrom) and not isinstance(binding_node.names, cst.ImportStar):
        module = dotted_name(binding_node.module) if binding_node.module is not None else None
        level = len(binding_node.relative)
        for alias in binding_node.names:
            bound = alias.asname.name if alias.asname is not None else alias.name
            if dotted_name(bound) == local:
                return module, level, dotted_name(alias.name)
    if isinstance(binding_node, cst.Import):
        for alias in binding_node.names:
            if alias.asname is not None and dotted_name(alias.asname.name) == local:
                return dotted_name(alias.name), 0, None
            full = dotted_name(alias.name) or ""
            if alias.asname is None and full.split(".")[0] == local:
                return full, 0, None
    return None


def import_targets(name: str, bindings: Iterable[Any]) -> Iterator[Tuple[Optional[str], int, str]]:
    """Where the dotted name `name` may be defined in another module, by the imports among
    `bindings` (those of its first part): (the module as imported, its relative level, the
    name in it). `ModelEMA` of `from utils import ModelEMA` -> ("utils", 0, "ModelEMA");
    `utils.ModelEMA` of `import utils` or `from pkg import utils` -> ("utils" or "pkg.utils",
    0, "ModelEMA"); `pkg.utils.ModelEMA` of `import pkg.utils` -> ("pkg.utils", 0, ...)."""
    head, _, rest = name.partition(".")
    parts = rest.split(".") if rest else []
    for binding in bindings:
        if binding.kind != "import":
            continue
        found = imported_module(binding.node, head)
        if found is None:
            continue
        module, level, imported = found
        if not parts:  # `from utils import ModelEMA`
            if imported is not None:
                yield module, level, imported
            continue
        if imported is None:  # `import utils`, `import pkg.utils`, `import pkg.utils as u`
            targets = [".".join(filter(None, [module, *parts[:-1]]))]
            if module is not None and "." in module and module.split(".")[0] == head:
                targets.append(".".join([head, *parts[:-1]]))  # `import pkg.utils`: `pkg` is bound
        else:  # `from pkg import utils`; `utils.ModelEMA`
            targets = [".".join(filter(None, [module, imported, *parts[:-1]]))]
        for target in dict.fromkeys(targets):
            yield target or None, level, parts[-1]


def _constants(model: "SemanticModel") -> Dict[str, Dict[str, List[str]]]:
    """The module's top-level names, and the fields of its top-level classes (`TrainConfig.
    mixed_precision`), that hold a precision: a value that may be a half dtype (`AMP_DTYPE =
    torch.float16`, `torch.bfloat16 if BF16 else torch.float16`: its `dtypes`), or settings
    known whole that may choose one (`MIXED_PRECISION = "fp16"`, a field `fp16: bool = True`:
    its `settings`). What an importer's `Resolver.dtypes` and `Resolver.settings` read of
    `from config import AMP_DTYPE` and of `TrainConfig().mixed_precision`."""
    index = model.index
    found: Dict[str, Dict[str, List[str]]] = {}
    owners = [(index.module_scope, "", index.module.body)]
    for scope in index.scopes:
        if scope.kind == "class" and scope.parent is index.module_scope and isinstance(scope.node, cst.ClassDef) and isinstance(scope.node.body, cst.IndentedBlock):
            owners.append((scope, f"{scope.name}.", scope.node.body.body))
    for scope, prefix, body in owners:
        direct = {id(small) for line in body if isinstance(line, cst.SimpleStatementLine) for small in line.body}
        for name, bindings in scope.bindings.items():
            if name.startswith("_") or not all(b.kind == "assign" and b.value is not None for b in bindings):
                continue
            # The last value written in the block itself, and each one a branch may write after it.
            last = max((i for i, b in enumerate(bindings) if id(b.node) in direct), default=0)
            entry = _precision_held(model, name, [field_default(b.value) for b in bindings[last:]], scope)
            if entry:
                found[prefix + name] = entry
    return found


def _precision_held(model: "SemanticModel", name: str, values: List[Optional[cst.BaseExpression]], scope) -> Dict[str, List[str]]:
    """What `_constants` exports of a name given `values`: the half dtypes they may be, and the
    settings they may hold when they are known whole and one chooses a precision."""
    entry: Dict[str, List[str]] = {}
    dtypes: FrozenSet[str] = frozenset()
    settings: FrozenSet[str] = frozenset()
    complete = True
    for value in values:
        dtypes |= model.resolver.dtypes(value, scope)
        held, known = model.resolver.settings(value, scope)
        settings, complete = settings | held, complete and known
    if dtypes & {"float16", "bfloat16"}:
        entry["dtypes"] = sorted(dtypes)
    # A number or True/False chooses a precision only under a name that says so (`precision: int
    # = 16`, `fp16: bool = True`; not `BATCH_SIZE = 16`).
    named = vocabulary.named_like_a_precision(name)
    if complete and any(s in frameworks.HALF_SETTINGS and not s.isdigit() or named and s in ("16", "True", "False") for s in settings):
        entry["settings"] = sorted(settings)
    return entry


def imports_of(index) -> Tuple[Tuple[str, int], ...]:
    """Every module the file imports from, as (dotted name, relative level): for `from pkg
    import utils` both `pkg` and `pkg.utils`, since `utils` may be a module."""
    found = set()
    for scope in index.scopes:
        for bindings in scope.bindings.values():
            for binding in bindings:
                node = binding.node
                if binding.kind != "import":
                    continue
                if isinstance(node, cst.ImportFrom):
                    module = dotted_name(node.module) if node.module is not None else ""
                    level = len(node.relative)
                    found.add((module or "", level))
                    if not isinstance(node.names, cst.ImportStar):
                        for alias in node.names:
                            name = dotted_name(alias.name)
                            if name:
                                found.add((f"{module}.{name}" if module else name, level))
                elif isinstance(node, cst.Import):
                    for alias in node.names:
                        name = dotted_name(alias.name)
                        if name:
                            found.add((name, 0))
    return tuple(sorted(found))
