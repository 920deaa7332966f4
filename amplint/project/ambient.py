"""Ambient autocast: which functions of the project run under which autocast, found by
following calls down from the regions that open it, across files; and the float16 hazards
those functions hit there, reported in the model code with the way in.

A training script opens autocast and calls the model in it; the model's code (attention,
normalisations, losses), often in another file, never opens it, and runs under it all the
same. Each analysed file says what its code calls (`facts`: its regions with the devices and
dtypes they may run in, each function's calls that run under its caller's autocast, as
`amplint.analyses.call_graph.CallGraph` finds them) and what each function would hit under
each context (`Float16Hazards`). `Ambient` joins them: from each region, breadth first, into
the functions it calls, their calls in turn, in this file or another (an import resolved as
the analysis resolves it: `PathIndex`, and a package's re-exports), never into a function
that may switch autocast off itself; a function reached under a context in which it has a
hazard gets a finding there, which names where the region is opened and the calls on the way
(`train.py:88 torch.autocast("cuda", dtype=torch.float16) -> model(...) -> Net.forward ->
self.attn(...) -> Attention.forward`: in its help, and as related locations for SARIF, the
language server and JSON).

Nothing is assumed under autocast without a path from a region (or a framework's documented
hook, which the semantic layer reads as a region). What the file's own rules report already
(a region in the same file) is not reported twice.
"""

from __future__ import annotations

import ast
import os
import re
from collections import deque
from dataclasses import replace
from typing import Any, Deque, Dict, Iterator, List, Mapping, Optional, Sequence, Set, Tuple

from amplint.lint.diagnostics import FileResult, Finding, Related
from amplint.project.import_paths import PathIndex
from amplint.project.reexports import ReExports

# (path, function's qualified name): a function of the project.
Node = Tuple[str, str]
# (device, dtype): a context a region runs in.
Context = Tuple[str, str]
# Calls followed from a region, at most.
MAX_DEPTH = 12


# --------------------------------------------------------------------------- one file

# The codes of the hazards (`amplint.analyses.hazard_sites`) a region in another file may
# report in model code.
HAZARD_CODES = ("AMP013", "AMP020", "AMP021", "AMP022", "AMP023")


def names_a_hazard(source: str) -> bool:
    """The text may hold a `# noqa` for a hazard's code: whether it suppresses something only
    an analysis of the file can tell (`hazard_rows`), whatever words the file has. In any
    case, as `amplint.lint.noqa` reads directives (`# NOQA: amp020`)."""
    return _NOQA_WORD.search(source) is not None and _HAZARD_CODE.search(source) is not None


_NOQA_WORD = re.compile("noqa", re.IGNORECASE)
_HAZARD_CODE = re.compile("|".join(HAZARD_CODES), re.IGNORECASE)



def facts(model: Any, module: Any, source: Optional[str], hazards: Mapping[str, List[Dict[str, Any]]], later: bool = False) -> Optional[Dict[str, Any]]:
    """What a file tells the ambient pass (plain JSON, cached with its result): its regions
    and the calls made in them, each function's calls under its caller's autocast, and the
    hazards each function hits per context (`hazards_of`), or, with `later`, that it may
    have some, worked out when a region's way reaches the file ("later": `to_analyse`).
    None when it has none of them."""
    from amplint.analyses.call_graph import CallGraph
    from amplint.lint.positions import code_ranges
    from amplint.semantic import dotted_name, iter_tree

    graph = model.facts(CallGraph)
    seeds = graph.seeds()
    units: Dict[str, Any] = {}
    # id(unit) -> id(call) -> (its callee's name, k-th such call in the unit)
    order: Dict[int, Dict[int, Tuple[str, int]]] = {}

    def place(unit: Any, call: Any) -> Tuple[str, int]:
        """The call's name and its count among the unit's calls of that name; ("", -1) for a
        call that is not the unit's own (a region's anchor in another function)."""
        if id(unit) not in order:
            numbered = order[id(unit)] = {}
            counts: Dict[str, int] = {}
            body = unit.node.body if not unit.is_module else unit.node
            for node in iter_tree(body, lambda n: not _nested(n)):
                if type(node).__name__ == "Call":
                    name = dotted_name(node.func) or ""
                    numbered[id(node)] = (name, counts.get(name, 0))
                    counts[name] = counts.get(name, 0) + 1
        return order[id(unit)].get(id(call), ("", -1))

    for unit in model.units:
        if unit.is_module:
            continue
        edges = graph.calls(unit)
        found = hazards.get(unit.name)
        returned = graph.returned(unit)
        if not edges and not found and not returned:
            continue
        calls = []
        for edge in edges:
            row: List[Any] = [edge.target.to_json(), *place(unit, edge.call)]
            record = model.call_record(edge.call)
            passed = graph.arguments(record) if record is not None and edge.target.parameter is None else {}
            if passed:  # what other files' regions on its parameters run (`Target.parameter`)
                row.append({key: [target.to_json() for target in targets] for key, targets in sorted(passed.items())})
            calls.append(row)
        entry: Dict[str, Any] = {"calls": calls}
        if not graph.takes_callers_autocast(unit):
            entry["own"] = True
        if found:
            entry["hazards"] = found
        if returned:  # a factory: what an instance it returns runs when called
            entry["returns"] = [target.to_json() for target in returned]
        units[unit.name] = entry
    exported = []
    if seeds:
        # Where each region is: as a call of its function, counted like the calls on its ways
        # (found from the text in the few files a finding's chain passes through: `_Locator`);
        # an anchor that is no such call (a Trainer's precision, in another function) has its
        # position printed here.
        placed = {id(seed): place(seed.unit, seed.anchor) for seed in seeds}
        anchors = code_ranges(module, [seed.anchor for seed in seeds if not placed[id(seed)][0]], source)
        for seed in seeds:
            at: Dict[str, Any] = {"call": list(placed[id(seed)])} if seed.anchor not in anchors else {"at": [anchors[seed.anchor].start.line, anchors[seed.anchor].start.column + 1]}
            exported.append(
                {
                    **at,
                    "unit": seed.unit.name,
                    "text": _short(seed.words),
                    "contexts": [list(c) for c in seed.contexts],
                    "calls": [[edge.target.to_json(), *place(seed.unit, edge.call)] for edge in seed.edges],
                }
            )
    if not units and not exported and not later:
        return None
    return {"regions": exported, "units": units, **({"later": True} if later else {})}


def hazards_of(model: Any) -> Dict[str, List[Dict[str, Any]]]:
    """The float16 hazards each top-level function and method of the file has in some
    context (`Float16Hazards.export`: code, 1-based positions, message, help, contexts)."""
    from amplint.analyses.float16_hazards import Float16Hazards

    return {name: entry["hazards"] for name, entry in Float16Hazards.export(model, "").items()}


def hazard_rows(hazards: Mapping[str, List[Dict[str, Any]]]) -> List[Tuple[str, int]]:
    """(code, row) of each hazard a function of the file has under some context: what a run
    over the project may report on that row, if a region in another file reaches it."""
    return sorted({(hazard["code"], hazard["row"]) for found in hazards.values() for hazard in found})


def _nested(node: Any) -> bool:
    return type(node).__name__ in ("FunctionDef", "ClassDef", "Lambda")


def _short(text: str, limit: int = 80) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


# --------------------------------------------------------------------------- the project


class Ambient:
    """The project's ambient autocast, from the files' `facts` (each result's `ambient`)."""

    def __init__(self, results: Sequence[FileResult], index: Optional[PathIndex] = None, reexports: Optional[ReExports] = None) -> None:
        self.results = [r for r in results if r.ambient]
        self._reported = {r.path: {(f.code, f.row, f.column) for f in r.findings} for r in self.results}
        self.facts: Dict[str, Mapping[str, Any]] = {r.path: r.ambient for r in self.results}  # type: ignore[misc]
        self.index = index if index is not None else PathIndex([r.path for r in results])
        self.reexports = reexports
        # (node, context) -> (the node it was reached from, the hop: [path, unit, callee name, k]) or the region
        self.parents: Dict[Tuple[Node, Context], Tuple[Optional[Tuple[Node, Context]], Tuple[Any, ...]]] = {}
        self._walked = False
        self._callers: Optional[Dict[Node, List[Tuple[str, Dict[str, Any]]]]] = None
        # (file, top-level name) a call on a way from a region goes to, in a file with no facts (not analysed).
        self.missing: Set[Tuple[str, str]] = set()
        # The files a way from a region goes into whose hazards are still to come (`facts`' "later").
        self.later: Set[str] = set()

    # ---------------------------------------------------------------- resolution
    def target(self, path: str, target: Sequence[Any]) -> Optional[Node]:
        """The function a call of the file `path` goes to (`CallGraph`'s `Target`, as JSON),
        when it is one with calls or hazards of its own and runs under its caller's autocast
        (not one that may switch it off itself)."""
        found = self.targets(path, target)
        return found[0] if len(found) == 1 else None

    def targets(self, path: str, target: Sequence[Any], depth: int = 0) -> List[Node]:
        """`target`'s functions (several for an instance of what another module's factory
        returns: `model = build_model(cfg)`), as `target` has them."""
        from amplint.analyses.call_graph import RETURNED

        if len(target) == 4 and target[3] == RETURNED:
            factory = self.resolve(path, [*target[:3], None])
            if factory is not None and factory[0] not in self.facts:
                self.missing.add((factory[0], factory[1]))
            entry = self.facts.get(factory[0], {}).get("units", {}).get(factory[1]) if factory is not None and depth < 4 else None
            found: List[Node] = []
            for returned in (entry or {}).get("returns", ()):
                found += [node for node in self.targets(factory[0], returned, depth + 1) if node not in found]  # type: ignore[index]
            return found
        node = self.resolve(path, target)
        if node is not None and node[0] not in self.facts:
            self.missing.add((node[0], node[1].split(".")[0]))  # not analysed (no AMP words): `to_analyse` asks for it
        elif node is not None and self.facts[node[0]].get("later"):
            self.later.add(node[0])  # its hazards are worked out next round: `to_analyse`
        entry = self.facts.get(node[0], {}).get("units", {}).get(node[1]) if node is not None else None
        return [node] if node is not None and entry is not None and not entry.get("own") else []

    def resolve(self, path: str, target: Sequence[Any]) -> Optional[Node]:
        """The function a `Target` of the file `path` names, wherever it is (None for a module
        not linted, or a parameter's target)."""
        if len(target) == 1:
            return path, target[0]
        if len(target) != 4:
            return None
        module, level, name, member = target
        origin = self.index.path_of(path, module or None, level, exclude=path)
        if origin is None:
            return None
        if self.reexports is not None:  # `from models import Net`, bound in models/__init__.py
            origin, name = self.reexports.origin_of(origin, name)
        return origin, f"{name}.{member}" if member else name

    def passed(self, path: str, function: str, parameter: str, position: int) -> List[Tuple[Node, str]]:
        """What the project's calls of the top-level function `function` of `path` pass for
        its parameter (by position or keyword), as the functions calling it runs: each
        instance of a class the calling code shows (`train_one_epoch(Net(), loader)` in
        main.py), resolved among the linted files, each with the file whose call passes it."""
        if self._callers is None:
            self._callers = {}
            for caller_path in sorted(self.facts):
                for unit in sorted(self.facts[caller_path].get("units", {})):
                    for call in self.facts[caller_path]["units"][unit].get("calls", ()):
                        if len(call) > 3:
                            callee = self.resolve(caller_path, call[0])
                            if callee is not None:
                                self._callers.setdefault(callee, []).append((caller_path, call[3]))
        found: List[Tuple[Node, str]] = []
        for caller_path, arguments in self._callers.get((path, function), ()):
            for target in arguments.get(str(position), arguments.get(parameter, ())):
                for node in self.targets(caller_path, target):
                    if all(node != seen for seen, _ in found):
                        found.append((node, caller_path))
        return found

    # ---------------------------------------------------------------- the walk
    def walk(self) -> None:
        """Every function each region reaches, with each context, breadth first (so the way
        kept to each is a shortest one)."""
        if self._walked:
            return
        self._walked = True
        queue: Deque[Tuple[Node, Context, int]] = deque()
        for path in sorted(self.facts):
            for place, region in enumerate(self.facts[path].get("regions", ())):
                for context in map(tuple, region.get("contexts", ())):
                    for target, name, k, *_ in region.get("calls", ()):
                        # A parameter the region calls (`model(x)`): what the project's calls pass for it.
                        nodes = self.passed(path, *target) if len(target) == 3 else [(node, "") for node in self.targets(path, target)]
                        for node, passer in nodes:
                            if node is None:
                                continue
                            key = (node, context)
                            if key not in self.parents:
                                self.parents[key] = (None, ("region", path, place, name, k, passer))
                                queue.append((node, context, 1))  # type: ignore[arg-type]
        while queue:
            node, context, depth = queue.popleft()
            entry = self.facts.get(node[0], {}).get("units", {}).get(node[1])
            if entry is None or depth >= MAX_DEPTH:
                continue
            for target, name, k, *_ in entry.get("calls", ()):
                for callee in self.targets(node[0], target):  # not a parameter's: who passed it is not followed
                    key = (callee, context)
                    if key not in self.parents:
                        self.parents[key] = ((node, context), ("call", node[0], node[1], name, k))
                        queue.append((callee, context, depth + 1))

    def contexts_of(self, node: Node) -> List[Context]:
        """The contexts `node` runs under, reached from some region."""
        self.walk()
        return sorted(context for (reached, context) in self.parents if reached == node)

    def chain(self, node: Node, context: Context) -> List[Tuple[Any, ...]]:
        """The hops from the region to `node`, region first."""
        self.walk()
        hops: List[Tuple[Any, ...]] = []
        key: Optional[Tuple[Node, Context]] = (node, context)
        while key is not None:
            parent, hop = self.parents[key]
            hops.append(hop)
            key = parent
        return hops[::-1]

    # ---------------------------------------------------------------- findings
    def findings(self) -> Dict[str, List[Finding]]:
        """The hazards functions hit under the contexts regions of other files run them in,
        by file: one finding per hazard, for the first context (in a stable order) that has
        it, with the way in."""
        self.walk()
        found: Dict[str, List[Finding]] = {}
        locator = _Locator()
        rules = _rules()
        for (node, context) in sorted(self.parents):
            entry = self.facts[node[0]]["units"].get(node[1]) if node[0] in self.facts else None
            if not entry or not entry.get("hazards"):
                continue
            hops = self.chain(node, context)
            reported = self._reported.get(node[0], set())  # by the file's own rules (a region of its own)
            for hazard in entry["hazards"]:
                if (hazard["code"], hazard["row"], hazard["column"]) in reported:
                    continue
                if list(context) not in hazard.get("contexts", ()):
                    continue
                rule = rules.get(hazard["code"])
                if rule is None:
                    continue
                key = (hazard["code"], hazard["row"], hazard["column"])
                if any((f.code, f.row, f.column) == key for f in found.get(node[0], ())):
                    continue
                way, related = self._way(node, context, hops, locator)
                message, help_first = hazard.get("by_dtype", {}).get(context[1], (hazard["message"], hazard.get("help")))
                help_text = f"{help_first} It runs under {way}." if help_first else f"It runs under {way}."
                found.setdefault(node[0], []).append(
                    Finding(
                        path=node[0],
                        row=hazard["row"],
                        column=hazard["column"],
                        end_row=hazard.get("end_row", hazard["row"]),
                        end_column=hazard.get("end_column", hazard["column"]),
                        code=rule.code,
                        name=rule.name,
                        url=rule.url(),
                        message=message,
                        help=help_text,
                        severity=rule.severity,
                        related=tuple(related),
                    )
                )
        return found

    def _way(self, node: Node, context: Context, hops: List[Tuple[Any, ...]], locator: "_Locator") -> Tuple[str, List[Related]]:
        """The chain in words, and as related locations: the region, then each call on the way."""
        device, dtype = context
        _, path, place, *_ = hops[0]
        region = self.facts[path]["regions"][place]
        at = region["at"] if "at" in region else locator.call(path, region["unit"], *region["call"])
        where = f"{os.path.relpath(path, os.path.dirname(node[0]) or os.curdir)}:{at[0]}"
        parts = [f"{where} {region['text']} ({dtype}, {_DEVICE_WORDS.get(device, device)})"]
        related = [Related(path, at[0], at[1], f"the autocast region ({dtype}, {_DEVICE_WORDS.get(device, device)}): {region['text']}")]
        for index, (kind, hop_path, owner, name, k, *passer) in enumerate(hops):
            unit = region["unit"] if kind == "region" else owner
            callee_path, callee = (hops[index + 1][1], hops[index + 1][2]) if index + 1 < len(hops) else node
            passed = f" (what {os.path.relpath(passer[0], os.path.dirname(node[0]) or os.curdir)} passes for `{name}`)" if passer and passer[0] else ""
            parts.append(f"`{name}(...)`{passed} -> `{callee}`")
            row, column = locator.call(hop_path, unit, name, k)
            if row:
                related.append(Related(hop_path, row, column, f"`{name}(...)` runs `{callee}` ({os.path.basename(callee_path)})"))
        return " -> ".join(parts), related


_DEVICE_WORDS = {"cuda": "CUDA", "cpu": "CPU"}


class _Locator:
    """Where a call of a chain is, from the file's text (CPython's tree, only for the few
    files on the way to a finding): the k-th call of that name in the function, in source
    order, as `facts` counted it."""

    def __init__(self) -> None:
        self._trees: Dict[str, Optional[ast.Module]] = {}

    def call(self, path: str, unit: str, name: str, k: int) -> Tuple[int, int]:
        from amplint.lint.evidence import dotted

        tree = self._tree(path)
        function = _function(tree, unit) if tree is not None else None
        if function is None:
            return 0, 0
        count = 0
        for node in _pre_order(function.body if unit != "<module>" else function):
            if isinstance(node, ast.Call) and dotted(node.func) == name:
                if count == k:
                    return node.lineno, node.col_offset + 1
                count += 1
        return 0, 0

    def _tree(self, path: str) -> Optional[ast.Module]:
        if path not in self._trees:
            try:
                with open(path, "rb") as handle:
                    self._trees[path] = ast.parse(handle.read())
            except (OSError, SyntaxError, ValueError, RecursionError, MemoryError):
                self._trees[path] = None
        return self._trees[path]


def _function(tree: ast.Module, qualified: str) -> Any:
    if qualified == "<module>":
        return tree
    body: Sequence[ast.stmt] = tree.body
    found: Any = None
    for part in qualified.split("."):
        found = next((n for n in body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and n.name == part), None)
        if found is None:
            return None
        body = found.body
    return found


def _pre_order(body: Any) -> Iterator[ast.AST]:
    pending: List[ast.AST] = list(reversed(body if isinstance(body, list) else [body]))
    while pending:
        node = pending.pop()
        yield node
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
            continue
        pending.extend(reversed(list(ast.iter_child_nodes(node))))


def _rules() -> Dict[str, Any]:
    from amplint.rules import ALL_RULES

    return {rule.code: rule for rule in ALL_RULES}


# Rounds of files analysed for the calls the regions lead into, at most (a chain's files).
MAX_ROUNDS = MAX_DEPTH


def to_analyse(results: Sequence[FileResult], read: Any, index: PathIndex, reexports: Optional[ReExports] = None, tried: Optional[Set[str]] = None) -> List[int]:
    """The files (their places in `results`) to analyse whole next, for what the regions lead
    into: each file that a call on a way from a region goes to (`Ambient.missing`: a model
    class, a factory, a sub-module of another file) and that was not analysed (no AMP words:
    model code never says `autocast`); and, for a region that calls a parameter (`model(x)`
    in `def train_one_epoch(model, ...)`), the files that import its file and name the
    function (what they pass for it is what runs); and each file a way goes into whose
    hazards are still to come (`facts`' "later": analysed again as it was, with them). Called
    round after round until none is left, so only the files on the ways from regions are
    analysed, and only theirs have their hazards worked out; none without a region. (A
    file the pre-check deferred, with AMP words but no code a rule needs, is not analysed for
    its own regions: an inference script's, or a configuration's `mixed_precision`.)"""
    tried = tried if tried is not None else set()
    place = {r.path: i for i, r in enumerate(results)}
    ambient = Ambient(results, index, reexports)
    ambient.walk()
    # A file that defines what the call names (not a package's `__init__.py` that imports it lazily).
    wanted = {path for path, name in ambient.missing if re.search(rf"^\s*(?:async\s+)?(?:def|class)\s+{re.escape(name)}\b", read(path) or "", re.M)}
    if not tried:  # the first round: the regions' files are all analysed already
        wanted |= _callers_of_parameters(results, read, index, reexports)
    wanted = {path for path in wanted if path in place and results[place[path]].ambient is None} | {path for path in ambient.later if path in place}
    return sorted(place[path] for path in wanted if path not in tried and path.endswith(".py") and results[place[path]].error is None)


def _callers_of_parameters(results: Sequence[FileResult], read: Any, index: PathIndex, reexports: Optional[ReExports]) -> Set[str]:
    """The files that import a file whose region calls a parameter of its function, and name
    that function (read from the text)."""
    from amplint.project.order import imported_files

    functions: Dict[str, Set[str]] = {}
    for result in results:
        for region in (result.ambient or {}).get("regions", ()):
            for target, *_ in region.get("calls", ()):
                if len(target) == 3:
                    functions.setdefault(result.path, set()).add(target[0])
    if not functions:
        return set()
    names = {name for found in functions.values() for name in found}
    # A file the pre-check passed by kept the names it imports: most need no reading.
    imported_names = names | {os.path.splitext(os.path.basename(path))[0] for path in functions}
    found: Set[str] = set()
    for result in results:
        if result.error is not None or result.path in functions or not result.path.endswith(".py"):
            continue
        if result.import_words and imported_names.isdisjoint(result.import_words):
            continue
        text = read(result.path)
        if text and any(name in text for name in names) and imported_files(result.path, text, index, reexports) & set(functions):
            found.add(result.path)
    return found


def report(
    results: List[FileResult],
    index: Optional[PathIndex] = None,
    reexports: Optional[ReExports] = None,
    read: Any = None,
    codes: Optional[Mapping[str, Sequence[str]]] = None,
) -> List[FileResult]:
    """`results` with the ambient findings added to the files they are in (of the codes
    selected for that file, `codes`: path -> codes, when given; not what a `# noqa` there
    suppresses); each such file's text kept for its code frames."""
    if not any(r.ambient for r in results):
        return results
    if index is None:
        index = PathIndex([r.path for r in results])
    if reexports is None:
        from amplint.project.link import read_text

        reexports = ReExports.found([r.path for r in results if r.error is None], read or read_text, index)
    found = Ambient(results, index, reexports).findings()
    if not found:
        return results
    from amplint.lint.noqa import parse_suppressions

    out = []
    for result in results:
        added = found.get(result.path)
        if not added or result.error is not None:
            out.append(result)
            continue
        text = result.source if result.source is not None else _text(result.path)
        if text is None:
            out.append(result)
            continue
        suppressions = parse_suppressions(text)
        selected = codes.get(result.path) if codes is not None else None
        kept = [f for f in added if (selected is None or f.code in selected) and not suppressions.suppresses(f.row, f.code)]
        if not kept:
            out.append(result)
            continue
        out.append(replace(result, findings=sorted([*result.findings, *kept]), source=text))
    return out


def _text(path: str) -> Optional[str]:
    from amplint.run.source import decode_python, read_file

    data = read_file(path)
    if not isinstance(data, bytes):
        return None
    text = decode_python(data, path)
    return text if isinstance(text, str) else None
