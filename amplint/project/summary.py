"""What a linted module tells the modules that import it: its summary, written after its
analysis (`export_summary`), read back by theirs (`amplint.semantic.foreign`).

A summary lists every event each top-level function and method may run, and every way
through it, with parameters left symbolic (`param:scaler`) and everything else the module's
own (`ext:<path>:...`). Classes are indexed too (`classes`: each top-level class with its
bases, as the module resolves them, and its methods). A method is exported as
`Class.method`, a constructor as `Class.__init__`: `ema = ModelEMA(model)` runs
`ModelEMA.__init__` there, `self.step()` in a subclass of an imported class runs the base's
`step`. A class whose base is another linted module's exports the methods it inherits from
it under its own name (with the scalers they name), so a chain of imported bases resolves
one module at a time, like calls between functions do. A function that builds a new
GradScaler on every call and steps an optimizer that outlives the call with it says so
(`fresh_scalers`): a loop of an importing module that calls it every iteration restarts the
scale each time (AMP008).

A script that fits an instance of another module's class with a framework object that may be
float16 (`L.Trainer(precision="16-mixed").fit(LitModel())`) names that class as imported
(`trains`). `amplint.project.link` resolves it among every linted file and hands the module
that defines it what it found (under `<script path>::trains`), whose class then has the
framework's scaler as if the Trainer were built beside it (`ExternalModules.trained_here`).

The fact families of `amplint.analyses` that cross modules (`EXPORTING`) put facts of their
own into the summary (`facts`, under the family's `SUMMARY_KEY`, each entry under the class or
function it is about); what the module's functions checkpoint is its `state` table
(`amplint.analyses.saved_state`), the precisions its constants hold its `constants`.

This runs above the semantic model: it reads the model's public queries and the analyses',
and nothing in the core calls back into it.
"""

from __future__ import annotations

import os
from typing import Any, Callable, Dict, FrozenSet, List, Mapping, Optional, Protocol, Sequence, Set, Tuple

import libcst as cst

from amplint.analyses import EXPORTING
from amplint.analyses.framework_hooks import FrameworkHooks
from amplint.analyses.saved_state import export_state
from amplint.analyses.scaled_gradients import ScaledGradients
from amplint.semantic import (
    SUMMARY_VERSION,
    UNKNOWN_SCALER,
    EventKind,
    Ref,
    SemanticModel,
    dotted_name,
    field_default,
    imported_module,
    local_chain,
    source_text,
)
from amplint.semantic.pytorch import frameworks, vocabulary


class ExportsFacts(Protocol):
    """A fact family whose facts cross modules (`amplint.analyses.EXPORTING`)."""

    SUMMARY_KEY: str  # where its facts are in a summary: `summary["facts"][SUMMARY_KEY]`

    @classmethod
    def export(cls, model: SemanticModel, path: str) -> Dict[str, Any]:
        """Plain JSON, per class or function of the module another module may import: what an
        importing module's analysis needs of it; empty when nothing (kept cheap: it runs on
        every file that is analysed). An entry's `words` are code it quotes, for the words a
        rule looks for before the importing file is parsed."""
        ...


def export_summary(model: SemanticModel, path: str, families: Sequence[ExportsFacts] = EXPORTING) -> Optional[Dict[str, Any]]:
    """The JSON summary of the module's top-level functions and methods that do AMP work,
    of its classes, and the facts `families` export of them; None when there is nothing."""
    functions: Dict[str, Any] = {}
    origin = os.path.basename(path)
    confirmed = _confirmed_entry_uses(model)
    fresh = _fresh_scalers(model)
    scaled_gradients = model.facts(ScaledGradients)

    # An event's code, printed once: a function's ways through repeat its events, and a
    # caller's summary repeats its helpers' (about 30 exports of each event node).
    printed: Dict[int, str] = {}

    def quoted(node) -> str:
        text = printed.get(id(node))
        if text is None:
            text = printed[id(node)] = f"`{source_text(node)}`"
        return text

    def export(event) -> Dict[str, Any]:
        return _event(event, path, origin, referenced, confirmed, scaled_gradients.corrupts(event.event), quoted)

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


def _confirmed_entry_uses(model: SemanticModel) -> Set[int]:
    """Events (ids) of clips and gradient reads on the gradients a function was called with
    that a later live scaler.step()/unscale_() in that function shows were scaled: what the
    function's own module reports (AMP003, AMP009)."""
    found: Set[int] = set()
    for occurrence, state in model.states_before(EventKind.SCALER_STEP, EventKind.UNSCALE):
        if occurrence.receiver is not None and model.is_live(occurrence.receiver.key, state.facts):
            found.update(id(use.event) for use in state.gradients.entry_uses)
    return found


def _classes(model: SemanticModel) -> Dict[str, Dict[str, Any]]:
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


def _params_of(model: SemanticModel, name: str) -> List[str]:
    unit = next((unit for unit in model.units if unit.name == name and not unit.is_module), None)
    return unit.parameters if unit is not None else []


def _trains(model: SemanticModel) -> Optional[Dict[str, Any]]:
    """The classes of other modules the file fits with a framework object that may be float16
    (`ScalerFacts.trained_imports`): [module, level, name, framework, whether float16 is sure],
    as imported. Which module that is, `project.link` works out among every linted file, and
    hands that module what it found (`ExternalModules.trained_here`)."""
    trained = model.scaler_facts.trained_imports
    if not trained:
        return None
    return {"classes": [[module, level, name, framework, surely] for (module, level, name, framework), surely in sorted(trained.items(), key=lambda item: (item[0][0] or "", *item[0][1:]))]}


def _framework_hooks(model: SemanticModel, origin: str, classes: Mapping[str, Mapping[str, Any]]) -> Dict[str, List[Dict[str, Any]]]:
    """For each class a framework trains whose hooks leave a plain backward pending for the
    framework's scaler (`FrameworkHooks.trained_class_hooks`: a Trainer subclass whose
    `training_step` runs `loss.backward()`), what a module that builds the class with its
    settings needs to report it there: the framework, the hook, the backward as written and
    its line, and where the constructor takes the settings (-1: by keyword only, for a class
    with an `__init__` of its own)."""
    trained = model.facts(FrameworkHooks).trained_class_hooks()
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


def _settings_position(model: SemanticModel, name: str, framework) -> int:
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


def _inherited(model: SemanticModel, classes: Mapping[str, Mapping[str, Any]]) -> Tuple[Dict[str, Any], Dict[str, Any]]:
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
        for owner in local_chain(name, classes):
            defined.update(classes[owner]["methods"])
            for _, imported in classes[owner]["bases"]:
                if imported is None:
                    continue
                module, level, base = imported
                found = external.methods(module, level, base)
                if found is None:
                    continue
                methods, held = found
                for method, function in methods.items():
                    if method in defined:
                        continue
                    if function.get("framework_hooks"):
                        # A hook the subclass overrides is its own, not the base's.
                        hooks = [hook for hook in function["framework_hooks"] if hook.get("hook") not in defined]
                        if not hooks and not function.get("events"):
                            continue
                        function = {**function, "framework_hooks": hooks}
                    functions.setdefault(f"{name}.{method}", function)
                    text = repr(function)
                    scalers.update((key, value) for key, value in held.items() if key in text)
    return functions, scalers


def _fresh_scalers(model: SemanticModel) -> Dict[int, List[Dict[str, str]]]:
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


def _event(event, path: str, origin: str, referenced: set, confirmed, use: Optional[str], quoted: Callable[[cst.CSTNode], str]) -> Dict[str, Any]:
    exported = {
        "reported": event.event.reported_where_written or id(event.event) in confirmed,
        "use": use,
        "kind": event.event.kind.value,
        "text": event.event.foreign or quoted(event.event.node),
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


def _constants(model: SemanticModel) -> Dict[str, Dict[str, List[str]]]:
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


def _precision_held(model: SemanticModel, name: str, values: List[Optional[cst.BaseExpression]], scope) -> Dict[str, List[str]]:
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
