"""Fixes: what a rule changes in the tree to correct what it reports, and how they are applied.

A rule attaches a `Fix` to a `Report`: a few structural changes to the LibCST tree it was
given (replace a node, insert statements before or after a statement, remove a statement),
with a title and an applicability. `safe` fixes change nothing but the mistake; `unsafe`
ones change code the user should look at (moving a step out of an autocast block, hoisting a
GradScaler out of a loop). Changes are made by identity on the parsed tree, so formatting and
comments everywhere else stay as they were.

`fix_source` runs the rules, applies every selected fix that does not touch a statement
another fix touches, checks the result still parses, and repeats on the new source until no
fix applies: overlapping fixes are applied one after another, never merged. A fix whose
result does not parse is never written.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Optional, Sequence, Set, Tuple, Type, Union

import libcst as cst

SAFE = "safe"
UNSAFE = "unsafe"
APPLICABILITIES = (SAFE, UNSAFE)

# Rounds of lint-and-fix before giving up: each round applies the fixes that do not overlap.
MAX_ROUNDS = 10


@dataclass(frozen=True, eq=False)
class Fix:
    """Changes to one parsed module that correct one finding."""

    title: str  # what the fix does: "Insert `scaler.unscale_(optimizer)` before the clip"
    applicability: str = SAFE
    # (node, its replacement): an expression by an expression, a statement by a statement.
    replace: Tuple[Tuple[cst.CSTNode, cst.CSTNode], ...] = ()
    # (statement, statements to put before / after it in its block).
    insert_before: Tuple[Tuple[cst.BaseStatement, Tuple[cst.BaseStatement, ...]], ...] = ()
    insert_after: Tuple[Tuple[cst.BaseStatement, Tuple[cst.BaseStatement, ...]], ...] = ()
    remove: Tuple[cst.BaseStatement, ...] = ()
    # Statements the fix reads or changes besides those above: two fixes that touch the same
    # statement are not applied in one round.
    touches: Tuple[cst.CSTNode, ...] = ()

    def anchors(self) -> Set[int]:
        found = {id(node) for node, _ in self.replace}
        found |= {id(statement) for statement, _ in self.insert_before + self.insert_after}
        found |= {id(statement) for statement in self.remove}
        found |= {id(node) for node in self.touches}
        return found


@dataclass(frozen=True)
class Edit:
    """A text replacement: 1-based rows, columns; the end column is exclusive."""

    row: int
    column: int
    end_row: int
    end_column: int
    content: str


def statement(code: str) -> cst.BaseStatement:
    """A statement parsed from code, for a fix to insert: `scaler.unscale_(optimizer)`."""
    return cst.parse_statement(code)


def expression(code: str) -> cst.BaseExpression:
    return cst.parse_expression(code)


# --------------------------------------------------------------------------- applying


class _Applier(cst.CSTTransformer):
    def __init__(self, fixes: Sequence[Fix]) -> None:
        super().__init__()
        self.replacements: Dict[int, cst.CSTNode] = {}
        self.before: Dict[int, List[cst.BaseStatement]] = {}
        self.after: Dict[int, List[cst.BaseStatement]] = {}
        self.removed: Set[int] = set()
        for fix in fixes:
            for node, new in fix.replace:
                self.replacements[id(node)] = new
            for anchor, statements in fix.insert_before:
                self.before.setdefault(id(anchor), []).extend(statements)
            for anchor, statements in fix.insert_after:
                self.after.setdefault(id(anchor), []).extend(statements)
            self.removed |= {id(s) for s in fix.remove}
        # Statements by the id of the node they stand for in the original tree: a replaced or
        # edited statement is a new object by the time its block is rebuilt.
        self._originals: Dict[int, int] = {}

    def on_leave(self, original_node: cst.CSTNode, updated_node: cst.CSTNode):  # type: ignore[override]
        new = self.replacements.get(id(original_node), updated_node)
        if isinstance(new, cst.CSTNode):
            self._originals[id(new)] = id(original_node)
        if isinstance(new, (cst.Module, cst.IndentedBlock)):
            new = new.with_changes(body=self._body(new.body))
        return new

    def _body(self, body: Sequence[cst.BaseStatement]) -> List[cst.BaseStatement]:
        result: List[cst.BaseStatement] = []
        for item in body:
            key = self._originals.get(id(item), id(item))
            result.extend(self.before.get(key, ()))
            if key not in self.removed:
                result.append(item)
            result.extend(self.after.get(key, ()))
        return result


def apply(module: cst.Module, fixes: Sequence[Fix]) -> cst.Module:
    """The module with `fixes` applied (by identity: the fixes must be made on `module`)."""
    applied = module.visit(_Applier(fixes))
    assert isinstance(applied, cst.Module)
    return applied


def non_overlapping(fixes: Sequence[Fix]) -> List[Fix]:
    """A subset of `fixes`, in order, no two of which touch the same node."""
    chosen: List[Fix] = []
    taken: Set[int] = set()
    for fix in fixes:
        anchors = fix.anchors()
        if anchors & taken:
            continue
        taken |= anchors
        chosen.append(fix)
    return chosen


def still_valid(code: str, path: str, target=None) -> bool:
    """Whether fixed code is still valid Python, judged as every linted file is
    (`amplint.syntax`): CPython's verdict for the project's grammar, and LibCST can parse it."""
    from amplint.syntax import parse_module, syntax_error

    try:
        return syntax_error(code, path, target) is None and isinstance(parse_module(code), cst.Module)
    except RecursionError:
        return False


def edits(original: str, fixed: str) -> List[Edit]:
    """The text edits that turn `original` into `fixed`, by whole lines."""
    before = original.splitlines(keepends=True)
    after = fixed.splitlines(keepends=True)
    found = []
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(a=before, b=after, autojunk=False).get_opcodes():
        if tag == "equal":
            continue
        found.append(Edit(i1 + 1, 1, i2 + 1, 1, "".join(after[j1:j2])))
    return found


def diff(original: str, fixed: str, path: str) -> str:
    """A unified diff, as `--diff` prints it."""
    return "".join(
        difflib.unified_diff(
            original.splitlines(keepends=True),
            fixed.splitlines(keepends=True),
            fromfile=f"a/{path}",
            tofile=f"b/{path}",
        )
    )
