"""`amplint --fix`: lint, apply the wanted fixes that do not overlap, check, repeat.

Each round lints the current source, takes the fixes of the findings that are wanted (by
code and applicability) and not suppressed by a `# noqa`, applies those that touch no
statement another one touches (`amplint.lint.fix.non_overlapping`), and checks that the result
is still valid Python (`amplint.lint.fix.still_valid`). Fixes that overlapped one applied this
round are found again, on the new source, in the next one. A round whose combined result
would not parse falls back to the first fix that parses alone, and a fix that does not
parse alone is never applied. The loop ends when no wanted fix is left, or after
`MAX_ROUNDS`.

Notebooks are fixed cell by cell: the joined code cells are fixed as one module, and each
cell gets back its own rows (`fix_notebook`).
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable, Dict, List, Optional, Sequence, Tuple, Type, Union

import libcst as cst

from amplint.escape import visible
from amplint.lint.fix import MAX_ROUNDS, SAFE, Fix, apply, non_overlapping, still_valid
from amplint.lint.noqa import UNUSED_NOQA, might_have_reportable_directives, parse_suppressions
from amplint.run.notebook import Notebook, parse_notebook, replace_sources
from amplint.lint.positions import code_ranges
from amplint.lint.rule import Rule
from amplint.semantic import ExternalModules, analyze
from amplint.lint.syntax import PythonVersion, parse_module_exactly
from amplint.config.torch_target import TorchVersion

if TYPE_CHECKING:
    from amplint.lint.diagnostics import FileResult

# Whether a fix of rule `code` with `applicability` ("safe"/"unsafe") is wanted.
Wanted = Callable[[str, str], bool]


@dataclass
class FixOutcome:
    source: str  # the fixed source; the original when nothing was applied
    applied: Counter = field(default_factory=Counter)  # fixes applied, per rule code
    error: Optional[str] = None  # why the file was left as it was

    @property
    def count(self) -> int:
        return sum(self.applied.values())


def wanted_by(
    unsafe: bool, fixable: Sequence[str] = ("ALL",), unfixable: Sequence[str] = ()
) -> Wanted:
    """ruff's selection: a code is fixable when `fixable` names it (or a prefix of it, or
    "ALL") and `unfixable` does not; unsafe fixes only with `unsafe`."""

    def matches(code: str, selectors: Sequence[str]) -> bool:
        return any(s == "ALL" or code.startswith(s) for s in selectors)

    def wanted(code: str, applicability: str) -> bool:
        if applicability != "safe" and not unsafe:
            return False
        return matches(code, fixable) and not matches(code, unfixable)

    return wanted


def fix_source(
    source: str,
    path: str,
    rules: Sequence[Type[Rule]],
    wanted: Wanted,
    external: Optional[ExternalModules] = None,
    target: Optional[PythonVersion] = None,
    torch_target: Optional[TorchVersion] = None,
) -> FixOutcome:
    """`source` with every wanted fix applied that keeps it valid Python."""
    from amplint.lint.engine import recursion_room

    try:
        with recursion_room():
            return _fix_source(source, path, rules, wanted, external, target, torch_target)
    except RecursionError:
        return FixOutcome(source, error="not fixed: nesting too deep")


def _fix_source(
    source: str,
    path: str,
    rules: Sequence[Type[Rule]],
    wanted: Wanted,
    external: Optional[ExternalModules],
    target: Optional[PythonVersion],
    torch_target: Optional[TorchVersion] = None,
) -> FixOutcome:
    outcome = FixOutcome(source)
    # Counted per finding, not per fix applied: one fix can settle several findings (a
    # rewritten import and its uses), and a finding can take two rounds (nested calls). What
    # is fixed is every finding that had a wanted fix in some round and has none at the end:
    # those of the first round, and those a fix brought out (a backward scaled in round one
    # shows the clip before it unscales in round two), counted where a code's number rises
    # from one round to the next.
    seen: Optional[Counter] = None  # findings with a wanted fix, in every round so far
    previous: Optional[Counter] = None  # the wanted fixes the last round found
    left: Optional[Counter] = None  # the wanted fixes of `outcome.source`, where known
    applied: Counter = Counter()  # fixes applied: the count when `left` cannot be had
    for _ in range(MAX_ROUNDS):
        module, exact = parse_module_exactly(outcome.source)
        if not isinstance(module, cst.Module):
            outcome.error = outcome.error or "not fixed: LibCST cannot parse it"
            break
        if not exact:
            # Parsed only after normalising (`amplint.lint.syntax`): writing the tree back would
            # change the file beyond the fix.
            outcome.error = "not fixed: LibCST parses this file only after normalising it"
            break
        found = _wanted_fixes(module, outcome.source, rules, wanted, external, torch_target)
        seen, previous = _seen_so_far(seen, previous, Counter(code for code, _ in found))
        left = previous
        fixes = non_overlapping(found)
        if not fixes:
            break
        fixed = apply(module, [fix for _, fix in fixes]).code
        if not still_valid(fixed, path, target):
            fixes = _first_valid(module, fixes, path, target)
            if not fixes:
                break
            fixed = apply(module, [fix for _, fix in fixes]).code
        if fixed == outcome.source:
            break
        outcome.source = fixed
        applied.update(code for code, _ in fixes)
        left = None
    if applied and left is None:  # the last round applied fixes: what is left to fix?
        module, exact = parse_module_exactly(outcome.source)
        if isinstance(module, cst.Module) and exact:
            now = Counter(code for code, _ in _wanted_fixes(module, outcome.source, rules, wanted, external, torch_target))
            seen, left = _seen_so_far(seen, previous, now)
    if applied:
        settled = seen - left if seen is not None and left is not None else Counter()
        outcome.applied = settled or applied
    if outcome.error is None and wanted(UNUSED_NOQA, SAFE) and any(rule.code == UNUSED_NOQA for rule in rules):
        _remove_unused_directives(outcome, path, rules, external, target, torch_target)
    return outcome


def _remove_unused_directives(outcome: FixOutcome, path: str, rules, external, target, torch_target) -> None:
    """Last, on the fixed source (a fix may have left a directive with nothing to suppress):
    AMP100's fixes, the edits its findings carry. They only rewrite comments, so nothing they
    do can bring out a finding, or suppress one: one pass is all."""
    from amplint.lint.engine import lint_source

    if not might_have_reportable_directives(outcome.source):
        return
    result = lint_source(outcome.source, path, rules, external=external, target=target, analysis_limit=None, torch_target=torch_target, summary=False)
    edits = [edit for finding in result.findings if finding.code == UNUSED_NOQA and finding.fix is not None for edit in finding.fix.edits]
    fixed = _apply_text_edits(outcome.source, edits)
    if edits and still_valid(fixed, path, target):
        outcome.source = fixed
        outcome.applied[UNUSED_NOQA] += len(edits)


def _apply_text_edits(source: str, edits: Sequence[Tuple[int, int, int, int, str]]) -> str:
    """`source` with non-overlapping text edits (1-based rows and columns, the end exclusive)
    applied, the last first so that each one's place is as it was read."""
    starts = [0]
    for index, character in enumerate(source):
        if character == "\n":
            starts.append(index + 1)

    def offset(row: int, column: int) -> int:
        return starts[row - 1] + column - 1 if row <= len(starts) else len(source)

    for row, column, end_row, end_column, content in sorted(edits, reverse=True):
        source = source[: offset(row, column)] + content + source[offset(end_row, end_column) :]
    return source


def _seen_so_far(seen: Optional[Counter], previous: Optional[Counter], now: Counter) -> Tuple[Counter, Counter]:
    """(`seen` with the findings new in `now`, `now`): a code found more often than in the
    previous round has that many new findings (a persisting finding never raises it)."""
    if seen is None or previous is None:
        return Counter(now), now
    return seen + (now - previous), now


def _first_valid(module: cst.Module, fixes: List[Tuple[str, Fix]], path, target) -> List[Tuple[str, Fix]]:
    for code, fix in fixes:
        if still_valid(apply(module, [fix]).code, path, target):
            return [(code, fix)]
    return []


def _wanted_fixes(
    module: cst.Module,
    source: str,
    rules: Sequence[Type[Rule]],
    wanted: Wanted,
    external: Optional[ExternalModules],
    torch_target: Optional[TorchVersion] = None,
) -> List[Tuple[str, Fix]]:
    from amplint.lint.engine import run_rules

    reports = [(rule, report) for rule, _, report in run_rules(analyze(module, external, torch_target), rules)]
    reports = [(rule, report) for rule, report in reports if report.fix is not None and wanted(rule.code, report.fix.applicability)]
    if not reports:
        return []
    suppressions = parse_suppressions(source)
    positions = code_ranges(module, [report.node for _, report in reports], source)
    found = []
    for rule, report in reports:
        if not suppressions.suppresses(positions[report.node].start.line, rule.code):
            found.append((rule.code, report.fix))
    return found


# --------------------------------------------------------------------------- files


@dataclass
class FileFix:
    """One file's fixes: its contents before and after (bytes as they are on disk)."""

    path: str
    original: bytes
    fixed: bytes
    outcome: FixOutcome
    text_before: str = ""
    text_after: str = ""

    @property
    def changed(self) -> bool:
        return self.fixed != self.original


def fix_file(
    path: str,
    data: bytes,
    rules: Sequence[Type[Rule]],
    wanted: Wanted,
    external: Optional[ExternalModules] = None,
    target: Optional[PythonVersion] = None,
    torch_target: Optional[TorchVersion] = None,
) -> FileFix:
    """Fix one file's contents: a notebook cell by cell, Python source in its own encoding."""
    from amplint.run.notebook import is_notebook
    from amplint.run.source import decode_notebook, decode_python, encode_like

    if is_notebook(path):
        text = decode_notebook(data, path)
        if not isinstance(text, str):
            return FileFix(path, data, data, FixOutcome("", error=text.message))
        fixed_text, outcome = fix_notebook(text, path, rules, wanted, external, target, torch_target)
        bom = b"\xef\xbb\xbf" if data.startswith(b"\xef\xbb\xbf") else b""
        fixed = bom + fixed_text.encode("utf-8") if fixed_text != text else data
        return FileFix(path, data, fixed, outcome, text, fixed_text)
    source = decode_python(data, path)
    if not isinstance(source, str):
        return FileFix(path, data, data, FixOutcome("", error=source.message))
    outcome = fix_source(source, path, rules, wanted, external, target, torch_target)
    if outcome.source == source:
        return FileFix(path, data, data, outcome, source, source)
    try:
        fixed = encode_like(outcome.source, data)
    except (UnicodeEncodeError, LookupError, SyntaxError) as error:
        return FileFix(path, data, data, FixOutcome(source, error=f"not fixed: cannot encode the result ({error})"), source, source)
    return FileFix(path, data, fixed, outcome, source, outcome.source)


def fix_results(
    results: Sequence["FileResult"],
    codes_by_path: Dict[str, Tuple[str, ...]],
    wanted: Wanted,
    target: Optional[PythonVersion] = None,
    stdin_data: Optional[bytes] = None,
    torch_target: Optional[TorchVersion] = None,
) -> List[FileFix]:
    """The fixes of a lint run's files that have a wanted fix, each file fixed with the rules
    selected for it and the summaries of the linted modules it imports (as it was linted)."""
    from amplint.project.link import imported_summaries
    from amplint.rules import ALL_RULES
    from amplint.run.source import read_file

    summaries = {r.path: r.summary for r in results if r.summary}
    fixes = []
    for result in results:
        if result.error is not None or not any(
            f.fix is not None and wanted(f.code, f.fix.applicability) for f in result.findings
        ):
            continue
        data = stdin_data if stdin_data is not None else read_file(result.path)
        if not isinstance(data, bytes):  # changed into a FIFO, grown too large, gone since it was linted
            fixes.append(FileFix(result.path, b"", b"", FixOutcome("", error=f"not fixed: {data.message}")))
            continue
        used = imported_summaries(result, summaries)
        external = ExternalModules(result.path, used) if used else None
        codes = codes_by_path.get(result.path, ())
        rules = [rule for rule in ALL_RULES if rule.code in codes]
        fixes.append(fix_file(result.path, data, rules, wanted, external, target, torch_target))
    return fixes


def write_fixed(fix: FileFix, roots: Sequence[str] = (".",)) -> Optional[str]:
    """Write a fixed file back (`amplint.run.write_back`); why not ("not fixed: ..."), or None.

    `roots` are the paths the user named: the linted tree, which a symbolic link may be
    written through to."""
    from amplint.run.write_back import write_back

    return write_back(fix.path, fix.original, fix.fixed, roots)


def fixed_by_severity(fixes: Sequence[FileFix]) -> Tuple[int, int]:
    """(errors, warnings) fixed in the files that `fixes` changed, by their rules' severity."""
    from amplint.rules import ALL_RULES

    warning = {rule.code for rule in ALL_RULES if rule.severity == "warning"}
    counts = Counter()
    for fix in fixes:
        if fix.changed:
            counts.update(fix.outcome.applied)
    warnings = sum(n for code, n in counts.items() if code in warning)
    return sum(counts.values()) - warnings, warnings


def applied_fixes(fixes: Sequence[FileFix]) -> str:
    """`--show-fixes`: what was fixed, per file and rule, as ruff lists it."""
    from amplint.rules import ALL_RULES

    from amplint.output.text import count_words

    names = {rule.code: rule.name for rule in ALL_RULES}
    changed = [fix for fix in fixes if fix.changed and fix.outcome.count]
    lines = [f"Fixed {count_words(*fixed_by_severity(changed))}:"]
    for fix in sorted(changed, key=lambda f: f.path):
        lines.append(f"- {visible(fix.path)}:")
        for code, count in sorted(fix.outcome.applied.items()):
            lines.append(f"    {count} × {code} ({names.get(code, '')})")
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------- notebooks


def fix_notebook(
    text: str,
    path: str,
    rules: Sequence[Type[Rule]],
    wanted: Wanted,
    external: Optional[ExternalModules] = None,
    target: Optional[PythonVersion] = None,
    torch_target: Optional[TorchVersion] = None,
) -> Tuple[str, FixOutcome]:
    """The notebook's JSON text with its code cells fixed, and the outcome for its joined code.

    A cell gets back the rows of the fixed module that stand for it. A fix that adds or
    removes rows does so within a cell, and a cell whose rows were not all kept (a cell
    joined with the next one, a magic line changed) leaves the notebook as it was."""
    notebook = parse_notebook(text, path)
    if not isinstance(notebook, Notebook):
        return text, FixOutcome(text)
    outcome = fix_source(notebook.python, path, rules, wanted, external, target, torch_target)
    if not outcome.count:
        return text, outcome
    cells = _split_cells(notebook, outcome.source)
    if cells is None:
        return text, FixOutcome(
            text, error="not fixed: a fix would change a cell with IPython magics or indented code, or move code between cells"
        )
    document = json.loads(text)
    sources: Dict[int, Union[str, List[str]]] = {}
    for index, lines in cells.items():
        source = document["cells"][index].get("source")
        joined = "".join(lines)
        if joined.endswith("\n") and not _ended_with_newline(source):
            joined = joined[:-1]
        sources[index] = joined.splitlines(keepends=True) if isinstance(source, list) else joined
    fixed = replace_sources(text, sources)
    if fixed is None:
        return text, FixOutcome(text, error="not fixed: the notebook's JSON could not be rewritten cell by cell")
    return fixed, outcome


def _ended_with_newline(source) -> bool:
    text = "".join(source) if isinstance(source, list) else (source or "")
    return text.endswith("\n")


def _split_cells(notebook, fixed: str) -> Optional[Dict[int, List[str]]]:
    """Fixed rows per code cell (index in the notebook's `cells`), for the cells that changed."""
    import difflib

    before = notebook.python.splitlines(keepends=True)
    after = fixed.splitlines(keepends=True)
    owner = [notebook.cells.cell_at(row) for row in range(1, len(before) + 1)]
    rows: Dict[int, List[str]] = {}  # cell's first row -> fixed rows
    changed = set()
    matcher = difflib.SequenceMatcher(a=before, b=after, autojunk=False)
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag == "equal":
            for k in range(i2 - i1):
                cell = owner[i1 + k]
                if cell is not None:
                    rows.setdefault(id(cell), []).append(after[j1 + k])
            continue
        cells = {id(owner[i]) for i in range(i1, i2) if owner[i] is not None}
        if not cells and i1 > 0:  # an insertion: it belongs to the cell of the row before
            cells = {id(owner[i1 - 1])} if owner[i1 - 1] is not None else set()
        if len(cells) != 1:
            return None
        key = cells.pop()
        changed.add(key)
        rows.setdefault(key, []).extend(after[j1:j2])
    shown = notebook.display.splitlines(keepends=True)
    result: Dict[int, List[str]] = {}
    for cell in notebook.cells.cells:
        if id(cell) not in changed:
            continue
        rows_of_cell = slice(cell.first_row - 1, cell.last_row)
        if cell.indent or shown[rows_of_cell] != before[rows_of_cell]:
            return None  # parsed dedented, or with magics neutralised: not written back
        result[cell.number - 1] = rows[id(cell)]
    return result
