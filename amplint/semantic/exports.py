"""What a linted module's functions do to mixed precision, for the modules that import them.

Linting runs in two phases. Each file is analysed on its own first, and exports a summary of
its functions (`export_summary`): every event each one may run, and every way through it,
with parameters left symbolic (`param:scaler`) and everything else the module's own
(`ext:<path>:...`). The summary is plain JSON, so a cache can keep it beside the file's
findings. Then each file that imports a linted module whose summary has AMP events is linted
again with those summaries (`ExternalModules`): a call to `clip_and_step(...)` imported from
`.optim_utils` stands for its events there, reported at the call.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Dict, FrozenSet, Iterator, List, Mapping, Optional, Set, Tuple

import libcst as cst

from amplint.import_paths import PathIndex
from amplint.semantic.conditions import Assumption, Condition
from amplint.semantic.types import UNKNOWN_SCALER, EventKind, Ref, ScalerInfo
from amplint.semantic.names import dotted_name, source_text

if TYPE_CHECKING:
    from amplint.semantic.model import SemanticModel

SUMMARY_VERSION = 2


# --------------------------------------------------------------------------- export


def export_summary(model: "SemanticModel", path: str) -> Optional[Dict[str, Any]]:
    """The JSON summary of the module's top-level functions and methods that do AMP work;
    None when none does."""
    functions: Dict[str, Any] = {}
    origin = os.path.basename(path)
    confirmed = model.confirmed_entry_uses()

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
        if summary.sequences is not None:
            # Each way through: the conditions it assumed on the function's parameters and
            # on names its callers share (rewritten with the caller's arguments), its events.
            sequences = sorted(
                (
                    {
                        "facts": sorted([cond.text, sorted(cond.names), value] for cond, value in sequence.facts),
                        "events": [export(event) for event in sequence.events],
                    }
                    for sequence in summary.sequences
                ),
                key=repr,
            )
        functions[unit.name] = {
            "params": unit.parameters,
            "method": unit.scope.class_scope is not None,
            "events": exported_events,
            "sequences": sequences,
        }
    if not functions:
        return None
    scalers = {}
    for key, info in model.scalers.items():
        exported_key = _key(key, path)
        if exported_key in referenced or info.framework is not None:
            scalers[exported_key] = {"name": info.name, "enabled": info.enabled, "framework": info.framework}
    return {"version": SUMMARY_VERSION, "functions": functions, "scalers": scalers}


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
class ForeignFunction:
    name: str
    params: Tuple[str, ...]
    method: bool
    events: Tuple[ForeignEvent, ...]
    # Each way through: (the conditions it assumed, its events).
    sequences: Optional[Tuple[Tuple[FrozenSet[Assumption], Tuple[ForeignEvent, ...]], ...]]


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


@dataclass
class ForeignModule:
    path: str
    functions: Dict[str, ForeignFunction]
    scalers: Dict[str, Dict[str, Any]]


def load_summary(path: str, data: Mapping[str, Any]) -> Optional[ForeignModule]:
    if not isinstance(data, Mapping) or data.get("version") != SUMMARY_VERSION:
        return None
    functions = {}
    for name, raw in data.get("functions", {}).items():
        sequences = raw.get("sequences")
        functions[name] = ForeignFunction(
            name,
            tuple(raw["params"]),
            bool(raw.get("method")),
            tuple(_foreign_event(e, path) for e in raw["events"]),
            tuple(
                (
                    frozenset((Condition(text, frozenset(names)), bool(value)) for text, names, value in s["facts"]),
                    tuple(_foreign_event(e, path) for e in s["events"]),
                )
                for s in sequences
            )
            if sequences is not None
            else None,
        )
    return ForeignModule(path, functions, dict(data.get("scalers", {})))


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
    found, the file's analysis would be that same one (`amplint.project` then keeps its first
    result). Every way the analysis reads another module's summary goes through `module` or
    `path_of`, and so is noted here."""

    def __init__(self, path: str) -> None:
        super().__init__(path, _NoSummaries())
        self.lookups: Set[Lookup] = set()

    def module(self, name: Optional[str], level: int) -> Optional[ForeignModule]:
        return ForeignModule("", _Asked(lambda function: self.lookups.add((name, level, function))), {})

    def path_of(self, name: Optional[str], level: int) -> Optional[str]:
        self.lookups.add((name, level, None))
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
