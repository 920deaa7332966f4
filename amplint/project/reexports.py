"""What a package's `__init__.py` re-exports from its modules, for the second phase of a run.

`from utils import grad_norm` names the package `utils`, whose `__init__.py` only binds
`grad_norm` from `.grads` (`from .grads import grad_norm`). Python gives the importer the
function of `utils/grads.py`; so does the linter: each linted `__init__.py` whose top-level
`from X import a [as b]` (or `from X import *`) names a linted module with a summary is seen,
by the files that import the package, with a summary that holds those functions, classes and
facts under the names it binds (`ReExports.apply`). Each copied function keeps its own file
(`home`), so a message still says "in grads.py". Chains (`utils/__init__.py` re-exporting
what `utils/ops/__init__.py` re-exports) are followed a few packages deep.

The re-exports are read from the `__init__.py`'s text, as `catalogue.text_imports` reads
imports (top-level lines only: an import under `if TYPE_CHECKING:` or in a function is not
one); a star import re-exports every public name, as Python does without an `__all__`.
"""

from __future__ import annotations

import functools
import os
import re
from typing import TYPE_CHECKING, Any, Dict, FrozenSet, Iterable, List, Mapping, Optional, Sequence, Tuple

from amplint.lint.catalogue import IMPORT_LINE

if TYPE_CHECKING:
    from amplint.project.import_paths import PathIndex

# Packages a re-export is followed through (`a/__init__.py` from `a/b/__init__.py` from `a/b/c.py`).
MAX_DEPTH = 3

# (the name the package binds, the module it comes from, the name there; "*": every public one)
Spec = Tuple[str, str, str]


@functools.lru_cache(maxsize=1024)  # asked for each import of a package, by every importer
def reexported(text: str) -> Tuple[Tuple[str, int, str, str], ...]:
    """The top-level `from X import ...` lines of `text`, one entry per name: (module, relative
    level, name there, name bound here). `from .grads import (grad_norm as gn,  # note` gives
    ("grads", 1, "grad_norm", "gn"); `from .ops import *` gives ("ops", 1, "*", "*")."""
    found = []
    for dots, module, names, plain in re.findall(IMPORT_LINE, text, re.M):
        if plain or not (module or dots):
            continue
        names = re.sub(r"#[^\n]*", "", names).strip("() \t\n")
        for item in names.split(","):
            parts = item.split()
            if len(parts) == 1 and (parts[0] == "*" or parts[0].isidentifier()):
                found.append((module, len(dots), parts[0], parts[0]))
            elif len(parts) == 3 and parts[1] == "as" and parts[0].isidentifier() and parts[2].isidentifier():
                found.append((module, len(dots), parts[0], parts[2]))
    return tuple(found)


class ReExports:
    """The re-exports of the linted `__init__.py` files that name another linted module."""

    def __init__(self, specs: Mapping[str, Sequence[Spec]]) -> None:
        self.specs = dict(specs)
        self._made: Dict[str, Tuple[Tuple[int, ...], dict]] = {}
        self._seen: Dict[Tuple[str, str], dict] = {}  # (package, importer) -> what it saw last
        self._names: Dict[Tuple[str, int], Dict[str, Dict[str, str]]] = {}  # names_from, once each

    @classmethod
    def found(cls, paths: Iterable[str], read, index: "PathIndex") -> "ReExports":
        """Read from the `__init__.py` files among `paths` (`read`: a file's text)."""
        specs: Dict[str, List[Spec]] = {}
        for path in paths:
            if os.path.basename(path) != "__init__.py":
                continue
            text = read(path)
            if not text or "import" not in text:
                continue
            for module, level, name, local in reexported(text):
                origin = index.path_of(path, module or None, level, exclude=path)
                if origin is not None:
                    specs.setdefault(path, []).append((local, origin, name))
        return cls(specs)

    def origin_of(self, package: str, name: str, depth: int = MAX_DEPTH) -> Tuple[str, str]:
        """The module that defines what `package` binds as `name` (`LitModel` of `models`, from
        `models/lit.py`), and its name there; (`package`, `name`) where it re-exports no such name."""
        specs = self.specs.get(package, ()) if depth > 0 else ()
        # A name the package binds by name first: a star before it may not hold it.
        found = next((spec for spec in specs if spec[0] == name), None) or next((spec for spec in specs if spec[0] == "*"), None)
        if found is None:
            return package, name
        _, origin, there = found
        return self.origin_of(origin, name if there == "*" else there, depth - 1)

    def apply(self, summaries: Mapping[str, dict]) -> Dict[str, dict]:
        """`summaries` with each re-exporting package's own summary (or none) joined by what it
        re-exports from them. A package's summary is the same object as long as what it is made
        of is, so that a file's summaries compare unchanged between rounds (`project._same`)."""
        if not self.specs:
            return dict(summaries)
        seen: Dict[str, dict] = dict(summaries)
        for _ in range(MAX_DEPTH):
            changed = False
            for package, specs in self.specs.items():
                made = self._make(package, specs, seen, summaries.get(package))
                if made is not None and seen.get(package) is not made:
                    seen[package] = made
                    changed = True
            if not changed:
                break
        return seen

    def names_from(self, package: Optional[str], depth: int = MAX_DEPTH) -> Mapping[str, Mapping[str, str]]:
        """The files the package `package` re-exports from, followed through the packages it
        re-exports from in turn: each with the names the package gives them (name there ->
        name in the package; "*": every public name, as it is). Worked out once per package
        and depth (asked for each import of a package, by every importer; a package of many
        names re-exported through packages of many names is their product): read only."""
        key = (package or "", depth)
        found = self._names.get(key)
        if found is None:
            found = self._names[key] = self._names_from(package or "", depth)
        return found

    def _names_from(self, package: str, depth: int) -> Dict[str, Dict[str, str]]:
        found: Dict[str, Dict[str, str]] = {}
        for local, origin, there in self.specs.get(package, ()) if depth > 0 else ():
            found.setdefault(origin, {})[there] = local
            for path, names in self.names_from(origin, depth - 1).items():
                for inner, here in names.items():
                    # `from .inner import a as b` of an inner `a` (or of everything inner re-exports)
                    if there == "*" or here == there:
                        found.setdefault(path, {})[inner] = here if there == "*" else local
        return found

    def only_packages_changed(self, before: Optional[Mapping[str, dict]], now: Mapping[str, dict]) -> bool:
        """Whether a file linted before with the summaries `before` would now be linted again only
        because a package's changed: a package stands for many modules, each of which may
        change round after round as its own imports settle. A file is linted with the first view
        of a package it names and not again for that package alone (as the rounds' limit cuts
        any chain short), so that a package costs one round, not one per module behind it."""
        if before is None or before.keys() != now.keys():
            return False
        changed = [path for path in now if before[path] is not now[path]]
        return bool(changed) and all(path in self.specs for path in changed)

    def seen_by(self, package: str, importer: str, summary: dict, text: Optional[str]) -> dict:
        """A package's summary as the file `importer` (whose text is `text`) sees it: only what it
        names, so that a change elsewhere in a package of many modules (its summary is theirs
        together) starts no new round for it; the same object while that part is unchanged."""
        if package not in self.specs or text is None:
            return summary
        named = _words(text)

        def kept(table: Any) -> Any:
            return {key: entry for key, entry in table.items() if key.split(".", 1)[0] in named} if isinstance(table, dict) else table

        seen = {part: kept(value) if part in _TABLES else value for part, value in summary.items()}
        if isinstance(summary.get("facts"), dict):
            seen["facts"] = {family: kept(entries) for family, entries in summary["facts"].items()}
        before = self._seen.get((package, importer))
        if before is not None and before == seen:
            return before
        self._seen[(package, importer)] = seen
        return seen

    def _make(self, package: str, specs: Sequence[Spec], seen: Mapping[str, dict], own: Optional[dict]) -> Optional[dict]:
        sources = [(local, seen.get(origin), name, origin) for local, origin, name in specs]
        sources = [(local, source, name, origin) for local, source, name, origin in sources if isinstance(source, dict) and source.get("version") is not None]
        if not sources:
            return own
        key = (id(own), *(id(source) for _, source, _, _ in sources))
        before = self._made.get(package)
        if before is not None and before[0] == key:
            return before[1]
        made: Dict[str, Any] = {"version": sources[0][1]["version"], "functions": {}, "scalers": {}, "classes": {}}
        for part, value in (own or {}).items():
            made[part] = {name: entry for name, entry in value.items()} if isinstance(value, dict) and part != "facts" else value
        made["facts"] = {family: dict(entries) for family, entries in (own or {}).get("facts", {}).items() if isinstance(entries, dict)}
        for local, source, name, origin in sources:
            for part in _TABLES:
                for bound, entry in _entries(source.get(part), name, local):
                    if part == "functions" and isinstance(entry, dict) and "home" not in entry:
                        entry = {**entry, "home": origin}
                    made.setdefault(part, {}).setdefault(bound, entry)
            # The scalers its classes and functions hold, by the origin's own keys (`ext:<origin>:...`).
            scalers = source.get("scalers")
            for scaler, entry in (scalers.items() if isinstance(scalers, dict) else ()):
                made["scalers"].setdefault(scaler, entry)
            facts = source.get("facts")
            for family, entries in (facts.items() if isinstance(facts, dict) else ()):
                for bound, entry in _entries(entries, name, local):
                    made["facts"].setdefault(family, {}).setdefault(bound, entry)
        if before is not None and before[1] == made:
            made = before[1]  # the same summary as before: its importers need no new round
        self._made[package] = (key, made)
        return made


# A summary's tables by function, class or `Class.method` name.
_TABLES = ("functions", "classes", "state", "constants")


@functools.lru_cache(maxsize=64)
def _words(text: str) -> FrozenSet[str]:
    return frozenset(re.findall(r"\w+", text))


def _entries(table: Any, name: str, local: str) -> List[Tuple[str, Any]]:
    """The entries of a summary's table (by function, class or `Class.method` name) that the
    re-export of `name` as `local` binds, under their names in the package."""
    if not isinstance(table, dict):
        return []
    if name == "*":
        return [(key, entry) for key, entry in table.items() if not key.startswith("_")]
    found = []
    for key, entry in table.items():
        if key == name:
            found.append((local, entry))
        elif key.startswith(name + "."):
            found.append((local + key[len(name) :], entry))
    return found

