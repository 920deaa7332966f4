"""A fast walk over LibCST trees.

LibCST's visitors rebuild every node they pass (`_visit_and_replace_children`), which made
them most of amplint's analysis time. The semantic layer only reads trees, so it walks them
through the dataclass fields that hold child nodes, skipping whitespace, commas, brackets and
operators. Measured on 150 real files: ~15x faster than a `CSTVisitor` doing nothing.

Walks are iterative: a 5,000-term `a + a + ...` must not hit Python's recursion limit.

The analyses walk the same tree again and again (a node of a lint is expanded seven times on
average): inside `remembered_children()` (one file's lint) each node's children are worked
out once. Every expansion is still a step of the file's work meter, remembered or not, so the
work limit's verdict does not depend on the memo.
"""

from __future__ import annotations

import dataclasses
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Callable, Dict, Iterator, List, Optional, Sequence, Tuple, Type

import libcst as cst

from amplint.work import METER, WorkLimitExceeded

_meter = METER.get  # the file's work meter (amplint.work): every node expanded is a step

# Fields that only hold layout: whitespace, punctuation, brackets, operators, comments.
_LAYOUT_PREFIXES = (
    "whitespace",
    "lpar",
    "rpar",
    "comma",
    "semicolon",
    "colon",
    "first_colon",
    "second_colon",
    "equal",
    "dot",
    "lbracket",
    "rbracket",
    "lbrace",
    "rbrace",
    "leading_lines",
    "header",
    "footer",
    "newline",
    "first_line",
    "lines_after_decorator",
    "trailing_whitespace",
    "empty_lines",
    "indent",
    "asynchronous",
    "star",
    "operator",
    "arrow",
    "walrus",
    "equals",
    "semicolon",
    "lines_after",
)

_FIELDS: Dict[Type[cst.CSTNode], Tuple[str, ...]] = {}
# Node types are checked once each and remembered (through ABCMeta, isinstance against
# LibCST's classes was a fifth of the walk's time; `node_classes` makes it plain where it can).
_IS_NODE: Dict[type, bool] = {}


def _is_node(value: object) -> bool:
    kind = type(value)
    known = _IS_NODE.get(kind)
    if known is None:
        known = _IS_NODE[kind] = issubclass(kind, cst.CSTNode)
    return known


def _child_fields(cls: Type[cst.CSTNode]) -> Tuple[str, ...]:
    fields = _FIELDS.get(cls)
    if fields is None:
        fields = tuple(f.name for f in dataclasses.fields(cls) if not f.name.startswith(_LAYOUT_PREFIXES))
        _FIELDS[cls] = fields
    return fields


# Nodes with no children that carry code: answered without looking at their fields.
_LEAVES = frozenset({cst.Name, cst.SimpleString, cst.Integer, cst.Float, cst.Imaginary, cst.Ellipsis, cst.Pass})


# id(node) -> (the node, its children), for the lint in progress. The node is kept with its
# children so that its id cannot be reused by another node while the memo lives.
_Memo = Dict[int, Tuple[cst.CSTNode, Tuple[cst.CSTNode, ...]]]
_MEMO: ContextVar[Optional[_Memo]] = ContextVar("amplint_children", default=None)
_memo = _MEMO.get


@contextmanager
def remembered_children() -> Iterator[None]:
    """Inside: each node's children are worked out once (one file's lint; the memo holds its
    trees until the block ends)."""
    token = _MEMO.set({})
    try:
        yield
    finally:
        _MEMO.reset(token)


def children(node: cst.CSTNode) -> Sequence[cst.CSTNode]:
    """The node's children that carry code, in field order (lexical order for expressions)."""
    meter = _meter()
    if meter is not None:
        meter.spent += 1
        if meter.spent > meter.limit:
            raise WorkLimitExceeded()
    memo = _memo()
    if memo is None:
        return _children(node)
    known = memo.get(id(node))
    if known is not None and known[0] is node:
        return known[1]
    found = _children(node)
    memo[id(node)] = (node, found)
    return found


def _children(node: cst.CSTNode) -> Tuple[cst.CSTNode, ...]:
    if type(node) in _LEAVES:
        return ()
    found: List[cst.CSTNode] = []
    for name in _child_fields(type(node)):
        value = getattr(node, name)
        kind = type(value)
        if kind is list or kind is tuple:
            found.extend(item for item in value if _is_node(item))
        elif _is_node(value):
            found.append(value)
    return tuple(found)


def iter_tree(node: cst.CSTNode, descend: Optional[Callable[[cst.CSTNode], bool]] = None) -> Iterator[cst.CSTNode]:
    """Every node under `node` (itself first), pre-order; `descend(n)` False skips n's children."""
    stack = [node]
    while stack:
        current = stack.pop()
        yield current
        if descend is not None and not descend(current):
            continue
        stack.extend(reversed(children(current)))


def own_returns(function: cst.CSTNode) -> List[cst.Return]:
    """The `return` statements of a function, not those of a function or class nested in it.
    A `return` is a statement: the walk goes into no expression and no other small statement."""

    def descend(node: cst.CSTNode) -> bool:
        return node is function or not isinstance(node, (cst.FunctionDef, cst.ClassDef, cst.BaseExpression, cst.BaseSmallStatement))

    return [node for node in iter_tree(function, descend) if isinstance(node, cst.Return)]


def post_order(node: cst.CSTNode, descend: Optional[Callable[[cst.CSTNode], bool]] = None) -> Iterator[cst.CSTNode]:
    """Every node under `node`, children before their parent: a call's arguments come before
    the call, which is the order Python evaluates them in."""
    stack: List[Tuple[cst.CSTNode, bool]] = [(node, False)]
    while stack:
        current, expanded = stack.pop()
        if expanded:
            yield current
            continue
        stack.append((current, True))
        if descend is not None and not descend(current):
            continue
        stack.extend((child, False) for child in reversed(children(current)))


def top_level_lines(module: cst.Module) -> Dict[int, int]:
    """id(top-level statement) -> the line it starts on (a class, a function: its `class`/`def`
    line, decorators and comments before it left out), counted from the code of the
    statements before it: each statement printed once."""
    lines = 1 + "".join(module.code_for_node(line) for line in module.header).count("\n")
    found: Dict[int, int] = {}
    for statement in module.body:
        own = module.code_for_node(statement)
        start = own.find("class ") if isinstance(statement, cst.ClassDef) else own.find("def ") if isinstance(statement, cst.FunctionDef) else 0
        found[id(statement)] = lines + own[: max(start, 0)].count("\n")
        lines += own.count("\n")
    return found
