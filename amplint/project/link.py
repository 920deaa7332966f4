"""Linting files that import each other: the second phase of a run.

Each file is first linted on its own, and exports a summary of what its functions do to mixed
precision (`amplint.semantic.foreign`). Then every file that imports a linted module with
such a summary is linted again with it, so a call to `clip_and_step(...)` imported from
`.optim_utils` counts for what it does there. A summary that changes in that round (a module
whose functions call another's) is passed on in the next, for a few rounds at most.

A file the first phase *deferred* (AMP words, but no code any rule needs on its own:
`amplint.lint.evidence`) has no summary yet, only its imports. Before the rounds, each deferred
file that some linted or deferred file may import is analysed whole, for its summary: the
same summaries, and so the same findings, as if every file with AMP words had been parsed.
A deferred file that imports a module with a summary is then linted with it like any other.

Another module's summary can change a file's analysis only through a call to one of its
functions, and every such call names the function (or method) in the file's text: `f()`,
`u.f()`, `from m import f as g`, `self.train_step()`. A file that names none of them is not
linted again: its first result stands (a rule whose needs the file's own code lacks cannot
fire without the other module's events).

One fact flows the other way: a script that fits an instance of another module's class with
a framework object that may be float16 (`L.Trainer(precision="16-mixed").fit(LitModel())`)
names that class in its summary (`trains`). Each module that defines one is handed what was
found of it (`trained_by_importers`), so its LightningModule has the Trainer's scaler as if it
were built beside it; a deferred script that may be such one is analysed for its summary
first (`trainer_scripts`).

Nor is a file linted again where new summaries answer all its analysis asked as the old did. Each
lint notes what its analysis looked up in other modules' summaries (`FileResult.lookups`: the
module as imported, and the function, method, class or constant asked for, or the module
whole; every call is classified for it, whether a rule asked or not), with the summaries it
had: none, in a file's first lint. Linted again with summaries that answer each of these as
those did (the same entry for each name asked, the same summary where one was read whole),
its analysis would ask the same and find the same, and so would its result: it keeps the one
it has. A file of an import cycle, linted first with the summaries of the modules outside the
cycle, is so linted again only where a member's summary has a name it asked. Only a file
without noted lookups (deferred and not yet analysed, or a result from an older cache) is
linted again whenever a summary it imports changes.
"""

from __future__ import annotations

import functools
import os
import re
from dataclasses import replace
from typing import TYPE_CHECKING, Callable, Collection, Dict, FrozenSet, Iterator, List, Mapping, Optional, Sequence, Tuple

from amplint.lint.diagnostics import FileResult
from amplint.run.source import read_file
from amplint.project.reexports import ReExports
from amplint.project.summary_reads import class_methods, lists_name

if TYPE_CHECKING:
    from amplint.project.import_paths import PathIndex

# Rounds after the first: each follows imports one module further.
MAX_ROUNDS = 3

# Lints (path, summaries of the modules it imports) jobs, whole (`engine.lint_bytes`); returns
# results in the same order.
Relint = Callable[[Sequence[Tuple[str, Mapping[str, dict]]]], List[FileResult]]


# The text of a linted file (None: unknown, so every summary it imports is used).
ReadText = Callable[[str], Optional[str]]


def read_text(path: str) -> Optional[str]:
    """A file's text as the linter read it, for the names it mentions (ASCII identifiers are
    found as written in any encoding Python source uses, and in a notebook's JSON)."""
    data = read_file(path)  # the careful read: the file may have become a FIFO since
    return data.decode("latin-1") if isinstance(data, bytes) else None


def link(
    results: List[FileResult], relint: Relint, read: ReadText = read_text, linked_with: Optional[Mapping[str, Dict[str, dict]]] = None
) -> List[FileResult]:
    """`results` of the first phase, with the files that import linted modules linted again.
    `linked_with`: the summaries a file of `results` was already linted with (the run's
    ordered pass, `amplint.project.order`); it is linted again only if they change."""
    results = list(results)
    # The texts read lately kept (a file is asked for once per module it imports), not every
    # text of a large repository at once.
    read = functools.lru_cache(maxsize=512)(read)

    @functools.lru_cache(maxsize=None)
    def every_path() -> "PathIndex":
        """Imports resolve among every linted file, summary or not: `import val` beside
        `classify/val.py` names `./val.py` even when only the other one has a summary."""
        from amplint.project.import_paths import PathIndex

        return PathIndex([r.path for r in results])

    # `from utils import grad_norm`, which `utils/__init__.py` binds from `.grads`.
    reexports = ReExports.found([r.path for r in results if r.error is None], read, every_path())
    wanted = sorted({*imported_deferred(results, read, reexports), *trainer_scripts(results, read, every_path, reexports)})
    if wanted:
        for index, result in zip(wanted, relint([(results[index].path, {}) for index in wanted])):
            results[index] = result
    summaries: Dict[str, dict] = {r.path: r.summary for r in results if r.summary}
    if not summaries:  # nothing to import (a run whose files mention no AMP code: no LibCST)
        return results
    paths = every_path()
    _read_imports_of_scaler_users(results, summaries, read, paths)
    # The summaries each file's result in `results` was linted with, the objects themselves: a
    # summary that changes is replaced in `summaries` by a new one, an unchanged one stays the
    # same object.
    done: Dict[str, Dict[str, dict]] = dict(linked_with or {})
    for index in wanted:
        done.pop(results[index].path, None)  # linted again above, without summaries
    handed: Dict[Tuple[str, str], Tuple[dict, dict]] = {}  # what `trained_by_importers` handed, kept
    for _ in range(MAX_ROUNDS):
        # A module whose classes a script trains is linted with that script's summary too.
        trained = trained_by_importers(summaries, paths, handed, reexports)
        visible = reexports.apply(summaries)
        jobs: List[Tuple[int, Dict[str, dict], Dict[str, dict]]] = []
        for index, result in enumerate(results):
            given = trained.get(result.path, {})
            if result.error is not None or not (result.imports or given):
                continue
            used = summaries_used(result.path, result.imports, visible, paths, reexports, read) if result.imports else {}
            used = {**used, **given}
            before = done.get(result.path)
            if used and not _same(before, used) and not reexports.only_packages_changed(before, used):
                done[result.path] = used
                jobs.append((index, used, before or {}))
        if not jobs:
            break
        relinted = _relint_finding(jobs, results, relint, set(trained))
        changed = False
        for (index, _, _), result in zip(jobs, relinted):
            results[index] = result
            if result.summary and summaries.get(result.path) != result.summary:
                summaries[result.path] = result.summary  # (also a module that exports only now: a subclass of an imported class)
                changed = True
        if not changed:
            break
    return results


def _read_imports_of_scaler_users(results: List[FileResult], summaries: Mapping[str, dict], read: ReadText, index: "PathIndex") -> None:
    """Give the imports of its CPython tree to each file skipped for having no AMP words (or
    only those of rules that read a file alone), in place in `results`, that calls something
    of another module's summary that brings a GradScaler with it: a class
    whose instance builds and keeps one (`trainer = AMPTrainer(model, loader, optimizer)`,
    the `held_scalers` facts), a function that returns one (`scaler = build_scaler()`, the
    state table). Such a file runs a scaler without a word of AMP, and its checkpoint may
    leave the scaler out; with its imports, the rounds lint it with the summaries it imports
    like any other. Only a file whose import lines name it or its module (its
    `import_words`, kept from the first phase) is read again, and only one whose text calls
    it and imports it from that module (`from .train_loop import AMPTrainer`, or the module
    itself) is parsed."""
    sources = {path: set(_scaler_sources(summary)) for path, summary in summaries.items()}
    sources = {path: names for path, names in sources.items() if names}
    if not sources:
        return
    import ast

    from amplint.lint.evidence import imports
    from amplint.project.import_paths import module_name

    wanted = sorted({name for names in sources.values() for name in names})
    # What an import of one of them names: the name, or its module (`import train_loop`).
    words = set(wanted) | {module_name(path) for path in sources}
    for position, result in enumerate(results):
        if not result.skipped or result.deferred or result.imports or result.error is not None:
            continue
        if words.isdisjoint(result.import_words):
            continue  # (kept from the first phase: its text is not read again)
        text = read(result.path)
        if text is None:
            continue
        named = {name for name in wanted if name in text and _called(name, text)}
        if not named or not any(named & sources.get(index.path_of(result.path, module, level) or "", set()) for module, level in _modules_imported(text)):
            continue
        try:
            tree = ast.parse(text)
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            continue
        results[position] = replace(result, imports=imports(tree))


def _called(name: str, text: str) -> bool:
    """Whether `text` may call `name` (`AMPTrainer(...)`, `(AMPTrainer if amp else
    SimpleTrainer)(...)`), not only subclass it (`class Mine(AMPTrainer):`)."""
    import re

    word = re.escape(name)
    return re.search(r"\b%s\s*\(|\b%s\s+if\b|\belse\s+%s\s*\)\s*\(" % (word, word, word), text) is not None


def _modules_imported(text: str) -> Iterator[Tuple[Optional[str], int]]:
    """The modules `text`'s top-level imports may name (`catalogue.text_imports`): `from pkg
    import utils` may name `pkg` and `pkg.utils`."""
    from amplint.lint.catalogue import text_imports

    for module, level, names in text_imports(text):
        yield module or None, level
        for name in names:
            yield f"{module}.{name}" if module else name, level


def _scaler_sources(summary: Mapping[str, object]) -> List[str]:
    """The classes and functions of a summary that build a GradScaler for their caller."""
    facts = summary.get("facts")
    held = facts.get("held_scalers") if isinstance(facts, dict) else None
    state = summary.get("state")
    return [*(held if isinstance(held, dict) else ()), *(name for name, entry in (state.items() if isinstance(state, dict) else ()) if isinstance(entry, dict) and entry.get("scaler"))]


def _relint_finding(
    jobs: Sequence[Tuple[int, Dict[str, dict], Dict[str, dict]]], results: Sequence[FileResult], relint: Relint, trained: Collection[str] = ()
) -> List[FileResult]:
    """The results of `jobs` (index, the summaries to lint with, those its result in `results`
    was linted with): linted again only where one of the lookups its analysis made
    (`FileResult.lookups`) is answered otherwise by the new summaries than by those it had, or
    another file trains its classes (`trained`); elsewhere the result it has, which is the one
    it would get."""
    out = [results[index] for index, _, _ in jobs]
    wanted = [
        position
        for position, (index, used, before) in enumerate(jobs)
        if results[index].lookups is None or results[index].path in trained or _answered_otherwise(results[index].path, before, used, results[index].lookups)
    ]
    if wanted:
        for position, result in zip(wanted, relint([(results[jobs[p][0]].path, jobs[p][1]) for p in wanted])):
            out[position] = result
    return out


def _answered_otherwise(
    importer: str, before: Mapping[str, dict], now: Mapping[str, dict], lookups: Collection[Tuple[Optional[str], int, Optional[str]]]
) -> bool:
    """Whether one of `importer`'s `lookups` (`foreign.Lookup`), made with the summaries
    `before`, finds something else in the summaries `now`, resolved as
    `foreign.ExternalModules` resolves them (without importing the semantic core: a warm run
    decides this for every cached file): another module, another entry for a name asked, or
    another summary where it was read whole. A summary telling a module of the classes
    another one trains (`trains_here`) counts whole: `trained_here` reads every summary."""
    from amplint.project.import_paths import PathIndex

    if any("trains_here" in summary for summaries in (before, now) for summary in summaries.values()):
        return True
    was, index = PathIndex(before), PathIndex(now)
    for module, level, name in lookups:
        then, found = was.path_of(importer, module, level), index.path_of(importer, module, level)
        if then is not None and found is not None and then != found:
            return True  # another module (its events would be quoted as another file's)
        old, new = before.get(then) if then is not None else None, now.get(found) if found is not None else None
        if old is new:
            continue
        if name is None:
            if old != new:  # (an equal one: a package's view made again)
                return True
            continue
        if (old is not None and new is not None and old.get("version") != new.get("version")) or _entries(old, name) != _entries(new, name):
            return True
    return False


def _entries(summary: Optional[Mapping[str, object]], name: str) -> List[object]:
    """What a summary says of `name` in each of its tables: its functions, the facts of each
    fact family, its state table, its constants (`_fact_names`); for `Class.*`, the class's
    methods and, if it has any, the module's scalers (`ExternalModules.methods`); for
    `?name`, whether it lists the name (`ExternalModules.lists`); for "", that it has one
    (`ExternalModules.has`); nothing, for no summary."""
    if not name:
        return [summary is not None]
    if name.startswith("?"):
        return [None if summary is None else lists_name(summary, name[1:])]
    if summary is None:
        return []
    if name.endswith(".*"):
        methods = class_methods(summary, name[:-2])
        return [sorted(methods.items()), summary.get("scalers")] if methods else []
    facts = summary.get("facts")
    families = sorted(facts.items()) if isinstance(facts, dict) else []
    tables = [("functions", summary.get("functions")), *families, ("state", summary.get("state")), ("constants", summary.get("constants"))]
    return [(key, table[name]) for key, table in tables if isinstance(table, dict) and name in table]


def _fact_names(summary: Mapping[str, object]) -> List[str]:
    """The classes, functions and constants a summary says something of besides their events:
    what its fact families export (`summary.ExportsFacts`), its state table (what they
    checkpoint, `analyses.saved_state`) and its constants (`AMP_DTYPE = torch.float16`)."""
    facts = summary.get("facts")
    families = list(facts.values()) if isinstance(facts, dict) else []
    return [name for family in [*families, summary.get("state"), summary.get("constants")] if isinstance(family, dict) for name in family]


def _same(before: Optional[Dict[str, dict]], now: Dict[str, dict]) -> bool:
    # The same objects, mostly (a summary that does not change stays the object it was); equal
    # ones where a package's view of its modules was made again.
    return before is not None and before.keys() == now.keys() and all(before[path] is now[path] or before[path] == now[path] for path in now)


def _called_from(text: Optional[str], used: Dict[str, dict]) -> Dict[str, dict]:
    """The summaries in `used` with a function that `text` may call: one it names."""
    if text is None:
        return used
    return {path: summary for path, summary in used.items() if _names_one_of(text, [*summary.get("functions", {}), *_fact_names(summary)])}


def _names_one_of(text: str, functions: Collection[str]) -> bool:
    for qualified in functions:
        owner, _, name = qualified.rpartition(".")
        cls = owner.split(".", 1)[0]
        # A method runs on an instance of its class, made or subclassed where the class is
        # named (`Trainer(...)`): `model(x)` runs `__call__` (an nn.Module's `forward`)
        # without naming it, so dunder methods and `forward` count wherever their class is
        # named. A subclass (`class Mine(Trainer)`) inherits every method, named or not.
        if cls not in text:
            continue
        if name.startswith("__") or name == "forward" or name in text or (cls and _subclasses(text, cls)):
            return True
    return False


def _subclasses(text: str, cls: str) -> bool:
    """Whether `text` defines a class with `cls` among its bases (`class A(pkg.Trainer, B):`)."""
    return cls in _base_names(text)


@functools.lru_cache(maxsize=4)  # the same file's text, asked of each summary it imports
def _base_names(text: str) -> FrozenSet[str]:
    """Every identifier in the bases of the classes `text` defines."""
    import re

    # `class` found by its letters, the word boundary checked after: a pattern that starts
    # with `\b` is tried at every position of the text (fifteen times slower).
    return frozenset(
        name
        for found in re.finditer(r"class\s+\w+\s*\(([^)]*)", text)
        if not (found.start() and (text[found.start() - 1].isalnum() or text[found.start() - 1] == "_"))
        for name in re.findall(r"\w+", found.group(1))
    )


def summaries_used(
    path: str, imports: Sequence[Tuple[str, int]], visible: Mapping[str, dict], index: "PathIndex", reexports: ReExports, read: ReadText
) -> Dict[str, dict]:
    """The summaries (of `visible`: every summary, packages seen with what they re-export)
    that the file `path` is linted with: those of the linted modules among its `imports`
    whose functions its text names (`_called_from`), a package as this importer sees it."""
    used = _imported(path, imports, visible, index)
    if not used:
        return used
    text = read(path)
    return _called_from(text, {origin: reexports.seen_by(origin, path, summary, text) for origin, summary in used.items()})


def imported_summaries(result: FileResult, summaries: Mapping[str, dict], index: Optional[PathIndex] = None) -> Dict[str, dict]:
    """The summaries of the linted modules `result`'s file imports (`index`: of every linted
    file's path, when the caller has one; else of `summaries`')."""
    if index is None:
        from amplint.project.import_paths import PathIndex

        index = PathIndex(summaries)
    return _imported(result.path, result.imports, summaries, index)


def _imported(path: str, imports: Sequence[Tuple[str, int]], summaries: Mapping[str, dict], index: "PathIndex") -> Dict[str, dict]:
    if not summaries or (len(summaries) == 1 and path in summaries):
        return {}
    found = {}
    for module, level in imports:
        target = index.path_of(path, module or None, level, exclude=path)
        if target is not None and target in summaries:
            found[target] = summaries[target]
    return found

def trained_by_importers(
    summaries: Mapping[str, dict], index: "PathIndex", kept: Dict[Tuple[str, str], Tuple[dict, dict]], reexports: Optional[ReExports] = None
) -> Dict[str, Dict[str, dict]]:
    """For each linted file that defines a class another module fits with a framework object
    that may be float16 (that module's summary's `trains`: `L.Trainer(precision="16-mixed").fit(
    LitModel())` of `from model import LitModel`), what to hand it, by `<that module>::trains`:
    `{"trains_here": {"classes": [[name, framework, surely, the module's path from there]],
    "words": [...]}}`. Which of its classes the framework trains (their bases) is the file's to
    say (`ExternalModules.trained_here`). `kept`: what was handed before, by (file, module),
    with the module's summary it came from, so that an unchanged summary hands the same object.
    A class a package re-exports (`from models import LitModel`) is its module's (`reexports`)."""
    from amplint.semantic.pytorch.frameworks import BY_NAME

    found: Dict[str, Dict[str, list]] = {}
    for importer, summary in summaries.items():
        trains = summary.get("trains")
        if not isinstance(trains, dict):
            continue
        for module, level, name, framework, surely in trains.get("classes", ()):
            target = index.path_of(importer, module or None, level, exclude=importer)
            if target is not None and reexports is not None:
                target, name = reexports.origin_of(target, name)
            if target is not None and framework in BY_NAME:
                origin = os.path.relpath(importer, os.path.dirname(target) or os.curdir)
                found.setdefault(target, {}).setdefault(importer, []).append([name, framework, bool(surely), origin])
    given: Dict[str, Dict[str, dict]] = {}
    for target, by_importer in found.items():
        for importer, classes in by_importer.items():
            key = (target, importer)
            summary = summaries[importer]
            if key not in kept or kept[key][0] is not summary:
                words = sorted({f"{BY_NAME[framework].precision_keyword}=" for _, framework, _, _ in classes})
                kept[key] = (summary, {"trains_here": {"classes": sorted(classes), "words": words}})
            given.setdefault(target, {})[f"{importer}::trains"] = kept[key][1]
    return given


def trainer_scripts(results: Sequence[FileResult], read: ReadText, every_path: Callable[[], "PathIndex"], reexports: Optional[ReExports] = None) -> List[int]:
    """The indices of the deferred results that may build a framework object which trains the
    modules handed to it (`Framework.training_methods`: `L.Trainer(...)` and `.fit(`) and name
    a class that a file they import defines on one of its module bases, or on such a class of
    that file (`class LitModel(L.LightningModule)` in model.py): analysed whole, for the summary
    that says which classes it may fit in float16 (`trains`). Such a script is deferred when
    none of its own code is what a rule needs; its Trainer's precision is what the module's
    rules need."""
    candidates = [i for i, r in enumerate(results) if r.deferred and r.error is None and r.imports]
    if not candidates:
        return []
    import re

    from amplint.semantic.pytorch.frameworks import CLASS_FRAMEWORKS

    trainers = [f for f in CLASS_FRAMEWORKS if f.training_methods]
    # Found by its letters, the word boundary checked after (see `_base_names`).
    builders = re.compile(r"(?:%s)\s*\(" % "|".join(sorted({re.escape(n.rsplit(".", 1)[-1]) for f in trainers for n in f.constructors | f.bare_constructors})))
    methods = [f".{method}(" for f in trainers for method in f.training_methods]
    bases = frozenset(base for f in trainers for base in f.module_bases)
    found = []
    for i in candidates:
        text = read(results[i].path)
        if not text or not any(method in text for method in methods):
            continue
        if not any(not (m.start() and (text[m.start() - 1].isalnum() or text[m.start() - 1] == "_")) for m in builders.finditer(text)):
            continue
        index = every_path()
        for module, level in results[i].imports:
            path = index.path_of(results[i].path, module or None, level, exclude=results[i].path)
            defined = set(_classes_based_on(read(path) or "", bases)) if path is not None else set()
            if reexports is not None:  # and what a package re-exports
                for origin, names in reexports.names_from(path).items():
                    defined |= {names.get(name, name if "*" in names else "") for name in _classes_based_on(read(origin) or "", bases)} - {""}
            if any(re.search(r"\b%s\b" % name, text) for name in defined):
                found.append(i)
                break
    return found


def _classes_based_on(text: str, bases: FrozenSet[str]) -> FrozenSet[str]:
    """The names of the classes `text` defines with one of `bases` among their bases (`class
    LitModel(L.LightningModule):`, by the base's last name), or one of those classes."""
    import re

    classes = [
        (found.group(1), set(re.findall(r"\w+", found.group(2))))
        for found in re.finditer(r"class\s+(\w+)\s*\(([^)]*)", text)
        if not (found.start() and (text[found.start() - 1].isalnum() or text[found.start() - 1] == "_"))
    ]
    based = set(bases)
    while True:
        more = {name for name, names in classes if names & based} - based
        if not more:
            return frozenset(based - bases)
        based |= more


def imported_deferred(results: Sequence[FileResult], read: ReadText = read_text, reexports: Optional[ReExports] = None) -> List[int]:
    """The indices of the deferred results whose functions may do AMP work (a summary to
    export) that a result which may use a summary imports: every file an import may name
    (`PathIndex.paths_of`), so that which imports resolve, and to what, is what it would be
    had they all been analysed. (A deferred file without such code exports nothing on its
    own; if it imports a module with a summary, the rounds lint it with it.) A file skipped
    for having no AMP words counts when a function whose text has helper words
    (`catalogue.helper_names`) is named by a file that imports it: `utils.py`'s
    `grad_norm(model)` reads `p.grad` wherever it is called. So does a top-level function or
    class that saves or restores an object's state (`catalogue.state_names`): a
    `Checkpointer` handed the optimizer checkpoints it wherever it is made; and a function
    that casts to a half dtype (`catalogue.cast_names`): `val.run(model=ema.ema)` leaves the
    EMA copy in float16. A precision constant or config class (`catalogue.constant_names`:
    `AMP_DTYPE = torch.float16`, `TrainConfig` with `mixed_precision = "fp16"`) counts the same
    way, in a file without AMP words and in a deferred one whose functions export nothing."""
    importers = [r for r in results if r.error is None and r.imports and not (r.skipped and not r.deferred)]
    deferred = {r.path: index for index, r in enumerate(results) if r.error is None and r.skipped}
    if not deferred or not importers:
        return []
    from amplint.project.import_paths import PathIndex

    index = PathIndex(deferred)
    # `from utils import grad_norm` imports what `utils/__init__.py` re-exports (`amplint.project.reexports`).
    packages = PathIndex(list(reexports.specs)) if reexports is not None and reexports.specs else None
    wanted: Dict[int, List[str]] = {}  # -> the files that import it
    # -> the files that import a package re-exporting from it, and what the package calls its names
    through: Dict[int, List[str]] = {}
    renamed: Dict[int, Dict[str, str]] = {}
    for result in importers:
        for module, level in result.imports:
            for path in index.paths_of(result.path, module or None, level, exclude=result.path):
                wanted.setdefault(deferred[path], []).append(result.path)
            package = packages.path_of(result.path, module or None, level, exclude=result.path) if packages is not None else None
            for path, names in reexports.names_from(package).items() if reexports is not None else ():
                if path in deferred:
                    through.setdefault(deferred[path], []).append(result.path)
                    renamed.setdefault(deferred[path], {}).update(names)
    from amplint.lint.catalogue import cast_names, constant_names, helper_names, state_names

    def exportable(text: str) -> FrozenSet[str]:
        """What a file without AMP words may export, by name: helpers, state, casts, constants."""
        return helper_names(text) | state_names(text) | cast_names(text) | constant_names(text)

    found = []
    for i, importing in sorted(wanted.items()):
        if results[i].deferred and results[i].may_export:
            found.append(i)
            continue
        # No AMP words (or no code that exports): only if a file that imports it names one of
        # its functions that may do AMP work, or of its constants.
        text = read(results[i].path) or ""
        names = constant_names(text) if results[i].deferred else exportable(text)
        names |= {renamed[i][name] for name in names if renamed.get(i, {}).get(name, "*") != "*"}
        if names and any(name in (read(path) or "") for path in dict.fromkeys(importing) for name in names):
            found.append(i)
    # Reached through a package only (`from diffusers import *` reaches hundreds of modules): a
    # module whose code may do AMP work (or, without AMP words, whose such function) a file
    # importing the package names, as the package calls it.
    for i, importing in sorted(through.items()):
        if i in wanted:
            continue
        text = read(results[i].path) or ""
        if results[i].deferred:
            names = _defined_names(text) if results[i].may_export else constant_names(text)
        else:
            names = exportable(text)
        names = {renamed[i].get(name, name if "*" in renamed[i] else "") for name in names} - {""}
        if names and any(re.search(r"\b%s\b" % re.escape(name), read(path) or "") for path in dict.fromkeys(importing) for name in names):
            found.append(i)
    return sorted(found)


def _defined_names(text: str) -> FrozenSet[str]:
    """The top-level functions and classes a module's text defines, and the names it assigns."""
    return frozenset(defined or assigned for defined, assigned in re.findall(r"^(?:async[ \t]+)?(?:def|class)[ \t]+(\w+)|^(\w+)[ \t]*(?::[^=\n]*)?=(?!=)", text, re.M))
