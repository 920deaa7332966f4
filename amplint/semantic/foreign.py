"""What other linted modules' summaries say, read back for the file that imports them.

Each linted module exports a summary of what its functions and classes do to mixed precision
(written by `amplint.project.summary`; plain JSON, so a cache can keep it beside the file's
findings). A file linted with the summaries of the modules it imports reads them here
(`ExternalModules`): a call to `clip_and_step(...)` imported from `.optim_utils` stands for
its events there (`ForeignFunction`), reported at the call; `self.step()` in a subclass of an
imported class runs the base's `step`; a constant of another module (`from config import
AMP_DTYPE`) has the dtypes its summary gives it.

A fact family of `amplint.analyses` may put facts of its own into a summary (`facts`, under
the family's `SUMMARY_KEY`): the core carries them without reading them
(`ForeignModule.facts`), and an importing module's analysis asks for them with
`SemanticModel.exported_facts`.

A file's lint notes what its analysis looked up (`LookupRecorder`): linted again with summaries
that answer each of these lookups as the ones it had did, its result is the same.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, FrozenSet, Iterable, Iterator, List, Mapping, Optional, Set, Tuple

import libcst as cst

from amplint.project.import_paths import PathIndex
from amplint.project.summary_reads import class_methods, lists_name
from amplint.semantic.conditions import Assumption, Condition
from amplint.semantic.types import EventKind, Ref, ScalerInfo
from amplint.semantic.names import dotted_name

# The summaries' format: a summary of another version is not read (`load_summary`).
SUMMARY_VERSION = 4


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
    # What its functions and classes do with objects' saved state (`amplint.analyses.saved_state`).
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
        return self._load(self._target(name, level))

    def raw(self, name: Optional[str], level: int) -> Optional[Mapping[str, Any]]:
        """The summary, as exported, of the linted module `from <level dots><name> import`
        refers to (when this file is linted with it): its functions copied as they are."""
        return self._raw(name, level)

    def constant(self, name: Optional[str], level: int, key: str) -> Optional[Mapping[str, Any]]:
        """What the summary of the linted module `from <level dots><name> import` refers to
        says of its constant `key` (`AMP_DTYPE`, `TrainConfig.mixed_precision`: an entry of
        its `constants`), or None."""
        raw = self._raw(name, level)
        constants = raw.get("constants") if isinstance(raw, Mapping) else None
        entry = constants.get(key) if isinstance(constants, Mapping) else None
        return entry if isinstance(entry, Mapping) else None

    def methods(self, name: Optional[str], level: int, cls: str) -> Optional[Tuple[Dict[str, Any], Mapping[str, Any]]]:
        """The methods of the class `cls` that the summary of the linted module `from <level
        dots><name> import` refers to exports (method name -> its function, as exported), and
        the scalers of that module (key -> as exported); None when it has no summary."""
        raw = self._raw(name, level)
        if raw is None:
            return None
        return class_methods(raw, cls), raw.get("scalers", {})

    def has(self, name: Optional[str], level: int) -> bool:
        """Whether the linted module `from <level dots><name> import` refers to has a summary
        this file is linted with."""
        return self._raw(name, level) is not None

    def lists(self, name: Optional[str], level: int, qualified: str) -> Optional[bool]:
        """Whether the summary of the linted module `from <level dots><name> import` refers to
        lists the class or function `qualified` (among its classes, functions or state
        table); None when it has no summary."""
        raw = self._raw(name, level)
        return None if raw is None else lists_name(raw, qualified)

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
        return self._target(name, level)

    def _target(self, name: Optional[str], level: int) -> Optional[str]:
        if self._index is None:
            self._index = PathIndex(self.summaries)
        return self._index.path_of(self.path, name, level)

    def _raw(self, name: Optional[str], level: int) -> Optional[Mapping[str, Any]]:
        target = self._target(name, level)
        return self.summaries[target] if self._load(target) is not None else None

    def _load(self, target: Optional[str]) -> Optional[ForeignModule]:
        if target is None:
            return None
        if target not in self._loaded:
            self._loaded[target] = load_summary(target, self.summaries[target])
        return self._loaded[target]


# What a file asks of other modules: (module, relative level, the function or method looked
# up in its summary, `Class.*`: the class's methods, `?name`: whether it lists the name, "":
# whether it has a summary; None: the summary as a whole).
Lookup = Tuple[Optional[str], int, Optional[str]]


class _Asked(dict):
    """A family of a summary (its functions, its state table, one of its fact families), as
    the summary has it (nothing, for a module without one), noting each name looked up in it
    and, read whole, None."""

    def __init__(self, noted: Callable[[Optional[str]], None], entries: Optional[Mapping[str, Any]] = None) -> None:
        super().__init__(entries or {})
        self._noted = noted

    def get(self, key: Any, default: Any = None) -> Any:
        self._noted(key if isinstance(key, str) else None)
        return dict.get(self, key, default)

    def __contains__(self, key: object) -> bool:
        self._noted(key if isinstance(key, str) else None)
        return dict.__contains__(self, key)

    def __getitem__(self, key: Any) -> Any:
        self._noted(key if isinstance(key, str) else None)
        return dict.__getitem__(self, key)

    # Read whole: every name counts.
    def __iter__(self) -> Any:
        self._noted(None)
        return dict.__iter__(self)

    def __len__(self) -> int:
        self._noted(None)
        return dict.__len__(self)

    def keys(self) -> Any:
        self._noted(None)
        return dict.keys(self)

    def values(self) -> Any:
        self._noted(None)
        return dict.values(self)

    def items(self) -> Any:
        self._noted(None)
        return dict.items(self)

    def copy(self) -> Any:
        self._noted(None)
        return dict(dict.items(self))


class _AskedFamilies(dict):
    """A summary's fact families: each family asked for (one the summary lacks too) notes the
    names looked up in it."""

    def __init__(self, noted: Callable[[Optional[str]], None], families: Optional[Mapping[str, Mapping[str, Any]]] = None) -> None:
        super().__init__()
        self._noted = noted
        self._families = families or {}

    def get(self, key: Any, default: Any = None) -> Any:
        return _Asked(self._noted, self._families.get(key) or {})

    def __getitem__(self, key: Any) -> Any:
        return _Asked(self._noted, self._families.get(key) or {})

    # Which families there are: the summary read whole.
    def __contains__(self, key: object) -> bool:
        self._noted(None)
        return key in self._families

    def __iter__(self) -> Any:
        self._noted(None)
        return iter(self._families)

    def __len__(self) -> int:
        self._noted(None)
        return len(self._families)

    def keys(self) -> Any:
        self._noted(None)
        return self._families.keys()

    def values(self) -> Any:
        self._noted(None)
        return self._families.values()

    def items(self) -> Any:
        self._noted(None)
        return self._families.items()


class _NoSummaries(Mapping):
    """Every module's summary, empty."""

    def __getitem__(self, path: str) -> Mapping[str, Any]:
        return {}

    def __iter__(self) -> Iterator[str]:
        return iter(())

    def __len__(self) -> int:
        return 0


class LookupRecorder(ExternalModules):
    """Stands in for `ExternalModules` in a file's lint and notes what its analysis looked up in
    other modules' summaries (`lookups`): each name asked of a module (a function, a method, a
    class's facts or saved state, a constant), or the module whole (its summary read as it is,
    the scalers it holds, where it is). Without summaries (`summaries` None) every module it
    looks up has nothing, so the analysis is the one without them.

    Linted again with other summaries that answer each of these lookups as these did
    (`amplint.project.link`), the file's analysis asks the same and finds the same, and so
    has the same result: the analysis reads other modules' summaries through this object's
    lookups. A module without a summary has nothing for each name asked of it, as a module
    with an empty summary would (the names are noted all the same: a summary that comes
    later may have them); where the first of two places an import may come from is taken,
    whether it has a summary is asked (`has`). Two reads are not noted: the words of the
    summaries' code (`words`, read before the analysis) only pick the rules that run, and a
    rule they alone pick can fire only on what the analysis found in a summary, which its
    lookups noted (the premise a file's first lint already rested on); a class another
    module trains (`trained_here`) is linted again whenever it is
    (`link.trained_by_importers`)."""

    def __init__(self, path: str, summaries: Optional[Mapping[str, Mapping[str, Any]]] = None) -> None:
        super().__init__(path, _NoSummaries() if summaries is None else summaries)
        self.lookups: Set[Lookup] = set()
        self._asked: Dict[Tuple[Optional[str], int], ForeignModule] = {}  # each module `module` gave, as named
        self._reached: Set[Tuple[Optional[str], int]] = set()  # each module asked anything of, as named

    def module(self, name: Optional[str], level: int) -> Optional[ForeignModule]:
        asked = self._asked.get((name, level))
        if asked is None:
            self._reached.add((name, level))
            noted: Callable[[Optional[str]], None] = lambda function: self.lookups.add((name, level, function))  # noqa: E731
            found = self._load(self._target(name, level))
            if found is None:
                asked = ForeignModule("", _Asked(noted), {}, state=_Asked(noted), facts=_AskedFamilies(noted))
            else:
                asked = ForeignModule(found.path, _Asked(noted, found.functions), found.scalers, state=_Asked(noted, found.state), facts=_AskedFamilies(noted, found.facts))
            self._asked[(name, level)] = asked
        return asked

    def raw(self, name: Optional[str], level: int) -> Optional[Mapping[str, Any]]:
        self.lookups.add((name, level, None))
        return super().raw(name, level)

    def constant(self, name: Optional[str], level: int, key: str) -> Optional[Mapping[str, Any]]:
        self.lookups.add((name, level, key))  # found again only where a summary has that constant
        return super().constant(name, level, key)

    def methods(self, name: Optional[str], level: int, cls: str) -> Optional[Tuple[Dict[str, Any], Mapping[str, Any]]]:
        self.lookups.add((name, level, cls + ".*"))  # the class's methods, and the scalers if it has any
        return super().methods(name, level, cls)

    def lists(self, name: Optional[str], level: int, qualified: str) -> Optional[bool]:
        self.lookups.add((name, level, "?" + qualified))  # (its answer: `link._entries`)
        return super().lists(name, level, qualified)

    def has(self, name: Optional[str], level: int) -> bool:
        self.lookups.add((name, level, ""))  # (its answer: `link._entries`)
        return super().has(name, level)

    def _raw(self, name: Optional[str], level: int) -> Optional[Mapping[str, Any]]:
        self._reached.add((name, level))
        return super()._raw(name, level)

    def path_of(self, name: Optional[str], level: int) -> Optional[str]:
        self.lookups.add((name, level, None))
        return self._target(name, level)

    def scaler(self, key: str) -> Optional[ScalerInfo]:
        # Found in the first module loaded that holds it: every module asked anything of counts
        # whole (one without a summary here may have one, and the scaler, in another lint).
        self.lookups.update((name, level, None) for name, level in self._reached)
        return super().scaler(key)


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


def is_module_class(summary: Optional[Mapping[str, Any]], name: str) -> bool:
    """Whether the class `name` a summary indexes derives from `torch.nn.Module` (itself or
    through bases of its module): calling an instance runs its `forward`."""
    classes = (summary or {}).get("classes", {})
    for owner in local_chain(name, classes):
        for _, imported in classes[owner]["bases"]:
            if imported is not None and list(imported) in (["torch.nn", 0, "Module"], ["torch.nn.modules.module", 0, "Module"]):
                return True
    return False


def local_chain(name: str, classes: Mapping[str, Mapping[str, Any]]) -> List[str]:
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
