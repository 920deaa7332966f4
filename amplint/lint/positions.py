"""Where a few nodes are, exactly as LibCST's `PositionProvider` says, for a sixth of its cost.

`PositionProvider` prints the whole module and records a range for every node as it goes: it
moves a row and column after each token (a regex split each) and enters a context manager per
node, about twice the cost of parsing the file. amplint needs the places of a handful of
nodes: the ones it reports, and those its fix suggestions read. `code_ranges` prints the
module once with a codegen state that notes, for those nodes only, the index of the token
where each starts and ends; rows and columns come afterwards from the printed text, once.

The ranges are the provider's: a node's syntactic range (`record_syntactic_position`, with
the start or end hoisted from a child where LibCST does that) wins over its printed extent,
and rows are counted at the newlines LibCST counts (`\\r\\n`, `\\r`, `\\n`). Should a hoisted
child go unprinted, or printing fail (the codegen state is LibCST's internal API), the
provider itself is asked; the tests compare both on every node of real files.
"""

from __future__ import annotations

import bisect
import itertools
import re
from typing import Any, Dict, Iterable, Optional, Set, Tuple

import libcst as cst
from libcst._nodes.internal import CodegenState
from libcst.metadata import CodePosition, CodeRange, MetadataWrapper, PositionProvider

from amplint.semantic import iter_tree

# LibCST's own newline pattern (libcst._nodes.internal): rows are counted where it counts them.
_NEWLINE = re.compile(r"\r\n?|\n")


def code_ranges(
    module: cst.Module, nodes: Iterable[cst.CSTNode], source: Optional[str] = None, printed: Optional[Dict[int, str]] = None
) -> Dict[cst.CSTNode, CodeRange]:
    """The ranges of `nodes` (nodes of `module`), as `PositionProvider` gives them.
    `source`: the text `module` was parsed from as written (LibCST prints it back exactly):
    then only the top-level statements that hold `nodes` are printed, and their code is
    added to `printed` (id of the statement -> `module.code_for_node` of it), if given."""
    wanted = {id(node): node for node in nodes}
    if not wanted:
        return {}
    if source is not None:
        try:
            found = _in_statements(module, wanted, source, printed)
        except Exception:  # LibCST's printing changed under this private hook: print all, as below
            found = None
        if found is not None:
            return found
    state = _Recorder(module, set(wanted))
    try:
        module._codegen(state)
    except Exception:  # LibCST's printing changed under this private hook: ask the provider
        state.missing = True
    if state.missing:
        full = MetadataWrapper(module, unsafe_skip_copy=True).resolve(PositionProvider)
        return {node: full[node] for node in wanted.values() if node in full}
    return state.ranges(wanted)


def _in_statements(
    module: cst.Module, wanted: Dict[int, cst.CSTNode], source: str, printed: Optional[Dict[int, str]] = None
) -> Optional[Dict[cst.CSTNode, CodeRange]]:
    """The ranges, printing only the top-level statements that hold wanted nodes; None where
    that cannot say (a node outside the statements, a hoisted child unprinted): print all.

    A top-level statement starts at column 0 and its printed text is the source's from there.
    Where it starts: right after the last statement placed, if it is the next one; else at the
    only place its text occurs in the rest of the source (the statement is somewhere there);
    else after the statements between, printed to count their length."""
    remaining = set(wanted)
    holding = []
    body = module.body
    for index, statement in enumerate(body):
        if not remaining:
            break
        hit = False
        for node in iter_tree(statement):
            if id(node) in remaining:
                remaining.discard(id(node))
                hit = True
        if hit:
            holding.append(index)
    if remaining or (not module.has_trailing_newline and holding[-1] == len(body) - 1):
        return None  # the module, its header or footer; or a last line printed without its newline
    state = _Recorder(module, set(wanted))
    header = CodegenState(default_indent=module.default_indent, default_newline=module.default_newline)
    for line in module.header:
        line._codegen(header)
    placed, last = len("".join(header.tokens)), -1  # where the statement after `last` starts
    segments = []  # (first token, source offset of that token)
    segment_of: Dict[int, int] = {}  # node id -> its segment
    codes: Dict[int, str] = {}  # id(statement) -> its code
    for index in holding:
        first, noted = len(state.tokens), len(state.spans)
        body[index]._codegen(state)
        if state.missing:
            return None
        text = "".join(state.tokens[first:])
        if index == last + 1:
            offset = placed
        else:
            offset = source.find(text, placed)
            if offset < 0 or source.find(text, offset + 1) >= 0:
                between = CodegenState(default_indent=module.default_indent, default_newline=module.default_newline)
                for statement in body[last + 1 : index]:
                    statement._codegen(between)
                offset = placed + len("".join(between.tokens))
        if not source.startswith(text, offset):
            return None
        for key in itertools.islice(state.spans, noted, None):
            segment_of[key] = len(segments)
        segments.append((first, offset))
        codes[id(body[index])] = text
        placed, last = offset + len(text), index
    lengths = list(itertools.accumulate(map(len, state.tokens), initial=0))
    row_starts = [0] + [match.end() for match in _NEWLINE.finditer(source, 0, placed)]

    def position(index: int, segment: int) -> CodePosition:
        first, start = segments[segment]
        offset = start + lengths[index] - lengths[first]
        row = bisect.bisect_right(row_starts, offset)
        return CodePosition(row, offset - row_starts[row - 1])

    if printed is not None:
        printed.update(codes)
    ranges = {}
    for key, node in wanted.items():
        if key in state.spans:
            start, end = state.spans[key]
            ranges[node] = CodeRange(position(start, segment_of[key]), position(end, segment_of[key]))
    return ranges


class _Recorder(CodegenState):
    """Prints the module, noting token indices for the wanted nodes only."""

    def __init__(self, module: cst.Module, wanted: Set[int]) -> None:
        super().__init__(default_indent=module.default_indent, default_newline=module.default_newline)
        self.wanted = wanted
        self.opened: Dict[int, int] = {}  # node id -> token index where its printing began
        self.spans: Dict[int, Tuple[int, int]] = {}  # node id -> token indices [start, end)
        self.missing = False

    def before_codegen(self, node: cst.CSTNode) -> None:
        if id(node) in self.wanted:
            self.opened[id(node)] = len(self.tokens)

    def after_codegen(self, node: cst.CSTNode) -> None:
        key = id(node)
        # A syntactic range recorded while printing the node stands (as in the provider).
        if key in self.wanted and key not in self.spans:
            self.spans[key] = (self.opened[key], len(self.tokens))

    def pop_trailing_newline(self) -> None:
        """Kept: the token indices already noted count it. Nothing here is ever written out."""

    def record_syntactic_position(
        self, node: cst.CSTNode, *, start_node: Optional[cst.CSTNode] = None, end_node: Optional[cst.CSTNode] = None
    ) -> Any:
        if id(node) not in self.wanted:
            return _UNWANTED
        # The children it hoists from are printed inside: note them too.
        for child in (start_node, end_node):
            if child is not None:
                self.wanted.add(id(child))
        return _Syntactic(self, node, start_node, end_node)

    def ranges(self, wanted: Dict[int, cst.CSTNode]) -> Dict[cst.CSTNode, CodeRange]:
        offsets = list(itertools.accumulate(map(len, self.tokens), initial=0))
        text = "".join(self.tokens)
        row_starts = [0] + [match.end() for match in _NEWLINE.finditer(text)]

        def position(index: int) -> CodePosition:
            offset = offsets[index]
            row = bisect.bisect_right(row_starts, offset)
            return CodePosition(row, offset - row_starts[row - 1])

        return {
            node: CodeRange(position(self.spans[key][0]), position(self.spans[key][1]))
            for key, node in wanted.items()
            if key in self.spans
        }


class _Syntactic:
    """`record_syntactic_position` for a wanted node: the range of the code printed inside,
    or its hoisted children's start and end."""

    __slots__ = ("state", "node", "start_node", "end_node", "start")

    def __init__(self, state: _Recorder, node: cst.CSTNode, start_node: Optional[cst.CSTNode], end_node: Optional[cst.CSTNode]) -> None:
        self.state, self.node, self.start_node, self.end_node = state, node, start_node, end_node
        self.start = 0

    def __enter__(self) -> None:
        self.start = len(self.state.tokens)

    def __exit__(self, *_: object) -> None:
        state = self.state
        start, end = self.start, len(state.tokens)
        for child, side in ((self.start_node, 0), (self.end_node, 1)):
            if child is None:
                continue
            span = state.spans.get(id(child))
            if span is None:
                state.missing = True
                return
            if side == 0:
                start = span[0]
            else:
                end = span[1]
        state.spans[id(self.node)] = (start, end)


class _Unwanted:
    __slots__ = ()

    def __enter__(self) -> None:
        return None

    def __exit__(self, *_: object) -> None:
        return None


_UNWANTED = _Unwanted()

