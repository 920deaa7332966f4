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

# LibCST's own newline pattern (libcst._nodes.internal): rows are counted where it counts them.
_NEWLINE = re.compile(r"\r\n?|\n")


def code_ranges(module: cst.Module, nodes: Iterable[cst.CSTNode]) -> Dict[cst.CSTNode, CodeRange]:
    """The ranges of `nodes` (nodes of `module`), as `PositionProvider` gives them."""
    wanted = {id(node): node for node in nodes}
    if not wanted:
        return {}
    state = _Recorder(module, set(wanted))
    try:
        module._codegen(state)
    except Exception:  # LibCST's printing changed under this private hook: ask the provider
        state.missing = True
    if state.missing:
        full = MetadataWrapper(module, unsafe_skip_copy=True).resolve(PositionProvider)
        return {node: full[node] for node in wanted.values() if node in full}
    return state.ranges(wanted)


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

