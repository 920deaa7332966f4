"""The editor's parse after an edit: the top-level statements whose text is unchanged are
taken from the parses before, and only the rest is given to LibCST.

An edit changes a line or two of a file the server has parsed many times, yet LibCST has no
incremental parse: its parse was a third of an edit's lint (a 1,000-line trainer: 101-124 ms
of 272-480). The file is cut into *pieces*, runs of whole top-level statements, where the cut
cannot change what LibCST makes of either side; each piece's statements are kept by its text
(`StatementCache`, one per editor worker), and a file is the pieces put back together.

Where a cut is made (`pieces`, from CPython's tree the lint has anyway): before a top-level
statement (its first decorator) that starts on a later line than the statement before ends,
where every line between is empty or a comment at column 0. LibCST gives such lines to the
statement after them (its `leading_lines`), and to the module's `header` when a piece is
parsed alone: that is the one difference, undone when the pieces are joined. An indented
comment after a block is the block's (`IndentedBlock.footer`), so no cut is made there, nor
after a line continued by a backslash. A file with `\\r`, a form feed, a byte-order mark or
no newline at its end is parsed whole.

LibCST stores a block's indentation as None where it is the module's default (the first
indentation of the file) and prints it as that: a piece parsed alone has the default of its
own first indentation, so every piece with an indented block must have the file's, which is
the first such piece's; otherwise the file is parsed whole. Joined, the tree equals
LibCST's parse of the whole file node for node (`tests/test_reparse.py` compares them on
every file of the repository and on the edge cases above).

A statement object stands at most once in a tree: a piece whose text is twice in a file is
parsed again for its second place. The nodes are never changed (LibCST's are immutable), and
the analyses' memos are per lint (`amplint.semantic.walk.remembered_children`), so a node
kept from one lint carries nothing into the next. The work meter charges the parse of the
whole file either way (`amplint.lint.engine`): what was kept never changes a verdict.
"""

from __future__ import annotations

import ast
import re
from collections import OrderedDict
from typing import List, NamedTuple, Optional, Sequence, Set, Tuple

import libcst as cst

from amplint.lint.syntax import parse_accepted, trusting_libcsts_parser

# Characters of source whose statements a worker keeps: the pieces of a few large files.
# LibCST's tree takes 16-30 bytes of Python objects per character of text (measured on
# accelerate's accelerator.py, yolov5's train.py, imagen-pytorch's trainer.py): ~30 MiB.
DEFAULT_LIMIT = 1_000_000

# A line between two cut statements: empty, or a comment at column 0.
_BETWEEN = re.compile(r"(?:#[^\n]*)?\n")


class _Piece(NamedTuple):
    """What LibCST makes of a piece's text parsed alone."""

    statements: Tuple[cst.BaseStatement, ...]
    header: Sequence[cst.EmptyLine]  # the empty and comment lines before its first statement
    footer: Sequence[cst.EmptyLine]  # ... and after its last (only the file's last piece has any)
    has_trailing_newline: bool
    default_indent: str
    indented: bool  # it has an indented block: its `default_indent` is its own first indentation


def pieces(source: str, tree: ast.Module) -> Optional[List[str]]:
    """The texts of the pieces `source` is cut into (they join to `source`); None where it
    is better parsed whole."""
    body = tree.body
    if not body or not source.endswith("\n") or "\r" in source or "\f" in source or source.startswith("\ufeff"):
        return None
    starts = [0]  # starts[n - 1]: the offset of line n
    for line in source.split("\n")[:-1]:
        starts.append(starts[-1] + len(line) + 1)
    cuts = [0]
    for before, statement in zip(body, body[1:]):
        first = min([statement.lineno, *(decorator.lineno for decorator in getattr(statement, "decorator_list", ()))])
        end = before.end_lineno or before.lineno
        if first <= end or source[starts[end] - 2] == "\\":
            continue
        if all(_BETWEEN.fullmatch(source, starts[line - 1], starts[line]) for line in range(end + 1, first)):
            cuts.append(starts[end])
    cuts.append(len(source))
    return [source[start:stop] for start, stop in zip(cuts, cuts[1:])]


class StatementCache:
    """The statements of the pieces parsed lately, by the piece's text, the least recently
    used dropped past `limit` characters of text."""

    def __init__(self, limit: int = DEFAULT_LIMIT) -> None:
        self.limit = limit
        self._pieces: "OrderedDict[str, _Piece]" = OrderedDict()
        self.parsed = self.kept = 0  # pieces parsed and pieces taken as kept, for tests and benchmarks

    def parse(self, texts: Sequence[str]) -> Optional[cst.Module]:
        """LibCST's tree of the file the pieces `texts` make, or None where they cannot give
        it (a piece LibCST does not parse alone, an indentation that is not the file's, a
        file larger than the cache). Code CPython accepted: LibCST's nodes, those made here
        included, are not validated (`syntax.trusting_libcsts_parser`), as in a whole
        parse of it (`if.5:pass` is valid Python that LibCST's validation refuses)."""
        if sum(map(len, texts)) > self.limit:
            return None  # its pieces would only push each other out
        found: List[_Piece] = []
        used: Set[int] = set()
        with trusting_libcsts_parser():
            for text in texts:
                piece = self._pieces.get(text)
                if piece is not None and id(piece) not in used:
                    self._pieces.move_to_end(text)
                    self.kept += 1
                else:
                    piece = _parse(text)
                    if piece is None:
                        return None
                    self.parsed += 1
                    if text not in self._pieces:
                        self._keep(text, piece)
                used.add(id(piece))
                found.append(piece)
            return _joined(found)

    def forget(self) -> None:
        self._pieces.clear()

    def _keep(self, text: str, piece: _Piece) -> None:
        self._pieces[text] = piece
        # Counted afresh each time: a CPU budget's exception between two updates of a
        # running count would leave it wrong for the worker's life.
        size = sum(map(len, self._pieces))
        while size > self.limit:
            dropped, _ = self._pieces.popitem(last=False)
            size -= len(dropped)


def _parse(text: str) -> Optional[_Piece]:
    module = parse_accepted(text)
    if not isinstance(module, cst.Module) or not module.body:
        return None
    indented = any(_has_block(statement) for statement in module.body)
    return _Piece(tuple(module.body), module.header, module.footer, module.has_trailing_newline, module.default_indent, indented)


# The fields in which a statement holds blocks and statements: `if`'s body and `elif`/`else`,
# `try`'s handlers and `finally`, a block's statements.
_BLOCK_FIELDS = ("body", "orelse", "handlers", "finalbody")


def _has_block(statement: cst.BaseStatement) -> bool:
    """Whether an indented block is in it (what LibCST takes the default indentation from).
    Walked through the fields that hold blocks and statements alone, never an expression,
    and unmetered: a lint's steps are the same whatever was kept (`amplint.work`)."""
    pending: List[object] = [statement]
    while pending:
        node = pending.pop()
        if type(node) is cst.IndentedBlock or type(node) is cst.Match:
            return True
        for name in _BLOCK_FIELDS:
            value = getattr(node, name, None)
            if isinstance(value, (list, tuple)):
                pending.extend(value)
            elif isinstance(value, cst.CSTNode):
                pending.append(value)
    return False


def _joined(found: Sequence[_Piece]) -> Optional[cst.Module]:
    indent = next((piece.default_indent for piece in found if piece.indented), "    ")
    body: List[cst.BaseStatement] = []
    last = len(found) - 1
    for place, piece in enumerate(found):
        if piece.indented and piece.default_indent != indent:
            return None
        if place < last and (piece.footer or not piece.has_trailing_newline):
            return None  # not where a cut is made: parse whole
        statements = list(piece.statements)
        if place > 0 and piece.header:
            # Parsed alone, the lines before its first statement are the module's header;
            # in the file they are that statement's own.
            first = statements[0]
            statements[0] = first.with_changes(leading_lines=[*piece.header, *first.leading_lines])
        body += statements
    return cst.Module(
        body=body,
        header=found[0].header,
        footer=found[last].footer,
        encoding="utf-8",
        default_indent=indent,
        default_newline="\n",
        has_trailing_newline=found[last].has_trailing_newline,
    )


# The cache of this process: set in a worker of the editor's (`keep_statements`), else none.
_ACTIVE: Optional[StatementCache] = None


def keep_statements(limit: int = DEFAULT_LIMIT) -> None:
    """This process keeps the statements it parses for the lints after (the language
    server's workers, which lint the same files edit after edit)."""
    global _ACTIVE
    _ACTIVE = StatementCache(limit)


def active() -> Optional[StatementCache]:
    return _ACTIVE


def forget() -> None:
    """Drop what this process keeps (a lint ran out of memory: the next starts lighter)."""
    if _ACTIVE is not None:
        _ACTIVE.forget()
