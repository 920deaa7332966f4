"""The order a run analyses its files in: each module after the linted modules it imports.

A file's analysis reads the summaries of the modules it imports (`amplint.semantic.foreign`),
so analysing the imported module first lets the importer be analysed once, with them. The
import graph is read from the files' text (`catalogue.text_imports`: no parse), resolved
among the files a run analyses (`PathIndex`); its strongly connected components (import
cycles) are ordered so that every component comes after the components it imports, and
grouped in waves: a wave holds the components whose imports all lie in earlier waves, so
its files can be analysed side by side.

A cycle's files are analysed together, each without the summaries of the others at first:
the rounds that follow (`amplint.project.link`) lint again what a summary changes, until
nothing does. The text can miss an import (one inside a function, built at run time); the
rounds catch that too, at the cost of a second lint of that file. The order only saves work:
the results are the rounds' fixed point either way.
"""

from __future__ import annotations

from typing import Callable, Dict, Iterable, List, Mapping, Optional, Sequence, Set, Tuple

from amplint.lint.diagnostics import FileResult
from amplint.project.import_paths import PathIndex
from amplint.project.link import ReadText, summaries_used
from amplint.project.reexports import ReExports


def import_graph(texts: Mapping[str, str], index: PathIndex, reexports: Optional[ReExports] = None) -> Dict[str, Set[str]]:
    """For each file of `texts` (path -> text), the files of `texts` its imports may name
    (`imports_named`, resolved among every linted file by `index`): `from pkg import utils`
    may name `pkg/__init__.py` and `pkg/utils.py`, and through `pkg/__init__.py` the modules
    it re-exports from (`reexports`)."""
    return {path: {target for target in imported_files(path, text, index, reexports) if target in texts and target != path} for path, text in texts.items()}


def imported_files(path: str, text: str, index: PathIndex, reexports: Optional[ReExports] = None) -> Set[str]:
    """The linted files the imports of `path` (its `text`) may name, and through a package's
    `__init__.py` the modules it re-exports from."""
    found: Set[str] = set()
    for module, level in imports_named(text):
        for target in index.paths_of(path, module or None, level, exclude=path):
            found.add(target)
            if reexports is not None:
                found.update(reexports.names_from(target))
    return found


def components(graph: Mapping[str, Iterable[str]]) -> List[List[str]]:
    """The strongly connected components of `graph` (Tarjan's algorithm, iteratively), each
    sorted, every component after those it has edges to: imported modules first."""
    index: Dict[str, int] = {}
    low: Dict[str, int] = {}
    stack: List[str] = []
    on_stack: Set[str] = set()
    found: List[List[str]] = []
    counter = 0
    edges = {node: sorted(set(targets) & set(graph)) for node, targets in graph.items()}
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(edges[root]))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(edges[child])))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                found.append(sorted(component))
    return found  # Tarjan emits a component only after every component it reaches


def waves(graph: Mapping[str, Iterable[str]]) -> List[List[str]]:
    """The files of `graph` in waves: each file in the first wave after every wave holding a
    file it imports (outside its own import cycle). Within a wave, in `sorted` order."""
    level: Dict[str, int] = {}
    for component in components(graph):
        members = set(component)
        depth = 0
        for node in component:
            for target in graph[node]:
                if target in level and target not in members:
                    depth = max(depth, level[target] + 1)
        for node in component:
            level[node] = depth
    grouped: Dict[int, List[str]] = {}
    for node, depth in level.items():
        grouped.setdefault(depth, []).append(node)
    return [sorted(grouped[depth]) for depth in sorted(grouped)]


def cycles(graph: Mapping[str, Iterable[str]]) -> List[Sequence[str]]:
    """The import cycles of `graph`: its components of more than one file."""
    return [component for component in components(graph) if len(component) > 1]


# Lints (position, the summaries it is linted with or None, whole) jobs; results in order.
LintWave = Callable[[Sequence[Tuple[int, Optional[Dict[str, dict]], bool]]], List[FileResult]]


def lint_in_order(paths: Sequence[str], texts: Mapping[str, str], lint: LintWave, read: ReadText) -> Tuple[List[FileResult], Dict[str, Dict[str, dict]]]:
    """Every file of `paths` linted, those of `texts` (path -> text: the files the pre-check
    lets through) each after the modules it imports, with their summaries (as
    `link.summaries_used` picks them, by the text's imports); the rest with the first wave.

    A module another module's analysis needs the summary of is analysed whole before it, as
    `link.imported_deferred` would have it analysed after: one without AMP words whose
    exportable names (a gradient helper, a checkpointer, a cast, a precision constant) an
    importer's text names, and one the pre-check deferred (AMP words, but no code a rule
    needs on its own) whose code may export something, when a file imports it.

    Returns the results, in the order of `paths`, and the summaries each file was linted
    with (for `link`, which lints again only where they change)."""
    index = PathIndex(paths)
    reexports = ReExports.found(paths, read, index)
    helpers = _helpers_named(texts, index, read)
    nodes = {**texts, **helpers}
    graph = import_graph(nodes, index, reexports)
    importers: Set[str] = {target for targets in graph.values() for target in targets}
    position = {path: place for place, path in enumerate(paths)}
    results: List[Optional[FileResult]] = [None] * len(paths)
    summaries: Dict[str, dict] = {}
    linked_with: Dict[str, Dict[str, dict]] = {}
    rest = [(place, None, False) for place, path in enumerate(paths) if path not in graph]
    for wave in waves(graph) or [[]]:
        visible = reexports.apply(summaries)
        jobs: List[Tuple[int, Optional[Dict[str, dict]], bool]] = []
        for path in wave:
            used = summaries_used(path, imports_named(nodes[path]), visible, index, reexports, read) if summaries else {}
            if used:
                linked_with[path] = used
            jobs.append((position[path], used or None, bool(used) or path in helpers))
        jobs += rest
        rest = []
        done = lint(jobs)
        # Deferred, but imported: analysed whole now, before the files that import it.
        again = [(place, used, True) for (place, used, _), result in zip(jobs, done) if result.deferred and result.may_export and paths[place] in importers]
        if again:
            redone = dict(zip((place for place, _, _ in again), lint(again)))
            done = [redone.get(place, result) for (place, _, _), result in zip(jobs, done)]
        for (place, _, _), result in zip(jobs, done):
            results[place] = result
            if result.summary:
                summaries[result.path] = result.summary
    return [r if r is not None else FileResult(p) for r, p in zip(results, paths)], linked_with


def _helpers_named(texts: Mapping[str, str], index: PathIndex, read: ReadText) -> Dict[str, str]:
    """The files without AMP words (not in `texts`) that a file of `texts` imports and names
    one of the exportable names of (`catalogue.helper_names`, `state_names`, `cast_names`,
    `constant_names`): path -> text."""
    from amplint.lint.catalogue import cast_names, constant_names, helper_names, state_names

    found: Dict[str, str] = {}
    looked: Dict[str, frozenset] = {}
    for path, text in texts.items():
        for module, level in imports_named(text):
            for target in index.paths_of(path, module or None, level, exclude=path):
                if target in texts or not target.endswith(".py"):
                    continue
                if target not in looked:
                    other = read(target) or ""
                    looked[target] = helper_names(other) | state_names(other) | cast_names(other) | constant_names(other)
                if target not in found and any(name in text for name in looked[target]):
                    found[target] = read(target) or ""
    return found


def imports_named(text: str) -> List[Tuple[str, int]]:
    """What the text's imports may name, as (module, relative level), as a file's analysis
    lists them (`semantic.imports_of`): for `from pkg import utils` both `pkg` and `pkg.utils`."""
    from amplint.lint.catalogue import text_imports

    found = set()
    for module, level, names in text_imports(text):
        found.add((module or "", level))
        found.update((f"{module}.{name}" if module else name, level) for name in names)
    return sorted(found)
