"""Valid Python that LibCST cannot parse in reasonable time, or at all: found before it tries.

LibCST's parser is quadratic or worse in the length of a left-nested chain (`a + a + ...`,
`a.b.c...`, `f()()...`, `x[0][0]...`, `a if b else a if b else ...`, `not not ...`): 2,000
terms take seconds and 5,000 minutes. Past a few thousand levels of nesting (1,500 nested
brackets, 4,000 nested `lambda:`, `a and a and ...` 8,000 times) its native code overflows
the stack and kills the process. CPython's own
parser handles all of these in milliseconds, so it measures the nesting first, for files
where such nesting can be: one with a line long enough to hold it and holding enough brackets
or operators.

A chain spread over many short lines is not caught here; the per-file CPU budget and the
worker isolation (`amplint.run.driver`) stop those instead. This guard only turns the common
shape (generated code, minified data) into a clear error at no cost to ordinary files.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from typing import List, Optional, Tuple

# LibCST parses a 2,000-term `+` chain in about 2 s and crashes on 4,000 nested lambdas; the
# deepest nesting in timm, diffusers, pytorch/examples and accelerate is 41. Between this limit
# and what LibCST parses quickly (a 1,500-term string concatenation, in 0.5 s), the per-file
# budget decides.
NESTING_LIMIT = 2000
# CPython refuses more than 200 nested brackets ("too many nested parentheses"); LibCST
# crashes on 1,500.
_BRACKET_LIMIT = 200
# A line that can hold that many brackets, each with its closing one.
_LONG_LINE = re.compile(r"^[^\n]{%d}" % (2 * _BRACKET_LIMIT), re.MULTILINE)
_LONG_LINES = re.compile(r"^[^\n]{%d,}" % (2 * _BRACKET_LIMIT), re.MULTILINE)
_BRACKETS = ("(", "[", "{")
# Every level of a chain needs one of these.
_CHAIN_MARKS = ("+", "-", "*", "/", "%", "@", "&", "|", "^", "~", ".", "(", "[", "{", "<", ">", "=", " and ", " or ", "not ", " if ", "lambda", "await ")


@dataclass(frozen=True)
class Hazard:
    """Why LibCST must not be given a source: a statement at `row`:`column` nests `depth`
    levels deep, or CPython's parser rejects the file too (`syntax`: its message is the one to
    report), or gives up on its nesting (`depth` 0)."""

    depth: int = 0
    row: int = 1
    column: int = 1
    syntax: bool = False

    def message(self, where: str) -> str:
        if not self.depth:
            return "not parsed: nested too deeply for CPython's parser, and LibCST, amplint's parser, would crash"
        return (
            f"not parsed: the statement at {where} nests {self.depth} levels deep; LibCST, amplint's "
            f"parser, takes minutes or crashes beyond {NESTING_LIMIT}"
        )


def parse_hazard(source: str) -> Optional[Hazard]:
    """Why LibCST must not be given `source`, or None when it may."""
    if _LONG_LINE.search(source) is None:
        return None
    if not any(_can_nest_deeply(line.group()) for line in _LONG_LINES.finditer(source)):
        return None
    try:
        tree = ast.parse(source)
    except SyntaxError:  # "too many nested parentheses", or simply invalid
        return Hazard(syntax=True)
    except (MemoryError, RecursionError, ValueError):  # CPython's "too complex"
        return Hazard()
    depth, (row, column) = nesting(tree)
    return Hazard(depth, row, column) if depth > NESTING_LIMIT else None


def _can_nest_deeply(line: str) -> bool:
    if sum(line.count(bracket) for bracket in _BRACKETS) > _BRACKET_LIMIT:
        return True
    return len(line) > NESTING_LIMIT and sum(line.count(mark) for mark in _CHAIN_MARKS) > NESTING_LIMIT


def nesting(tree: ast.AST) -> Tuple[int, Tuple[int, int]]:
    """The deepest nesting in `tree` as LibCST builds it, and the statement it is in (row,
    1-based column). `a and b and c` is one node to CPython but a chain of two to LibCST."""
    deepest, where = 0, (1, 1)
    stack: List[Tuple[ast.AST, int, Tuple[int, int]]] = [(tree, 0, where)]
    children = ast.iter_child_nodes
    while stack:
        node, depth, statement = stack.pop()
        if isinstance(node, ast.stmt):
            statement = (node.lineno, node.col_offset + 1)
        elif isinstance(node, ast.BoolOp):
            depth += len(node.values) - 2
        if depth > deepest:
            deepest, where = depth, statement
        depth += 1
        for child in children(node):
            stack.append((child, depth, statement))
    return deepest, where
