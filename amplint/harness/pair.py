"""What a reader of `amplint verify --report` needs to see of a fixture pair besides its curves:
the lines where buggy.py and fixed.py differ, side by side, and the regime they train in.

Read from the scripts themselves, so the page cannot drift from what ran: the diff skips the
module docstrings (they differ by design, and say what the code shows), and the setup is the
module's constants (the scenarios, their optimizers and loss weights, the number of steps)
and every statement that builds a model or draws the data.
"""

from __future__ import annotations

import ast
import difflib
import re
from dataclasses import dataclass
from typing import List, Optional, Sequence, Tuple

# Diff lines kept around a change, as in `diff -U2`.
CONTEXT = 2
# The incidental details every fixture declares (fixtures/README.md): the report states the
# run's values of them, not the defaults.
INCIDENTAL = frozenset({"SEED", "LR_SCALE"})
# A statement builds the model or the data when it calls one of these.
_BUILDS = re.compile(r"\bnn\.[A-Z]\w*\(|\btorch\.(?:randn|rand|randint)\(")


@dataclass(frozen=True)
class Line:
    number: int  # 1-based, in its file
    text: str
    changed: bool


# One row of the side-by-side diff: the buggy line, the fixed line (either may be missing), or
# None for the gap between two hunks.
DiffRow = Optional[Tuple[Optional[Line], Optional[Line]]]


def side_by_side(buggy: str, fixed: str) -> List[DiffRow]:
    """The code of the two scripts (docstrings aside) where they differ, with CONTEXT lines
    around each change; None between hunks."""
    left, left_start = _code(buggy)
    right, right_start = _code(fixed)
    matcher = difflib.SequenceMatcher(None, left, right, autojunk=False)
    rows: List[DiffRow] = []
    for group in matcher.get_grouped_opcodes(CONTEXT):
        if rows:
            rows.append(None)
        for tag, i1, i2, j1, j2 in group:
            changed = tag != "equal"
            olds = [Line(left_start + i, left[i], changed) for i in range(i1, i2)]
            news = [Line(right_start + j, right[j], changed) for j in range(j1, j2)]
            for index in range(max(len(olds), len(news))):
                rows.append((olds[index] if index < len(olds) else None, news[index] if index < len(news) else None))
    return rows


def _code(source: str) -> Tuple[List[str], int]:
    """The script's lines after its module docstring, and the 1-based number of the first."""
    lines = source.splitlines()
    try:
        body = ast.parse(source).body
    except SyntaxError:
        return lines, 1
    end = 0
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) and isinstance(body[0].value.value, str):
        end = body[0].end_lineno or 0
    while end < len(lines) and not lines[end].strip():
        end += 1
    return lines[end:], end + 1


def setup(source: str) -> List[Tuple[str, str]]:
    """(what, code) of the regime a script trains in: its module-level constants, each with the
    comment above it, and the statements that build a model or draw the data."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return []
    lines = source.splitlines()
    found: List[Tuple[str, str]] = []
    for node in tree.body:
        if isinstance(node, (ast.Assign, ast.AnnAssign)) and not (_names(node) & INCIDENTAL or _is_dunder(node)):
            found.append(("constant", _with_comment(lines, node)))
    for node in ast.walk(tree):
        if isinstance(node, (ast.Assign, ast.Return)) and node.value is not None and node not in tree.body:
            text = _segment(lines, node)
            if _BUILDS.search(text):
                found.append(("model" if "nn." in text else "data", text))
    return found


def _names(node: ast.stmt) -> set:
    targets = node.targets if isinstance(node, ast.Assign) else [node.target]  # type: ignore[attr-defined]
    return {target.id for target in targets if isinstance(target, ast.Name)}


def _is_dunder(node: ast.stmt) -> bool:
    return any(name.startswith("__") for name in _names(node))


def dedented(rows: Sequence[DiffRow]) -> List[DiffRow]:
    """The rows with each side's common indentation taken off (a hunk deep in a loop reads the
    same at the left margin)."""
    def margin(side: int) -> int:
        texts = [row[side].text for row in rows if row is not None and row[side] is not None and row[side].text.strip()]
        return min((len(text) - len(text.lstrip()) for text in texts), default=0)

    cut = (margin(0), margin(1))
    return [
        None if row is None else tuple(  # type: ignore[misc]
            None if line is None else Line(line.number, line.text[cut[side]:], line.changed) for side, line in enumerate(row)
        )
        for row in rows
    ]


def _segment(lines: Sequence[str], node: ast.stmt) -> str:
    chosen = lines[node.lineno - 1 : node.end_lineno]
    indent = min(len(line) - len(line.lstrip()) for line in chosen if line.strip())
    return "\n".join(line[indent:] for line in chosen)


def _with_comment(lines: Sequence[str], node: ast.stmt) -> str:
    start = node.lineno - 1
    while start > 0 and lines[start - 1].lstrip().startswith("#"):
        start -= 1
    return "\n".join(lines[start : node.end_lineno])
