"""Fixes: what a rule changes in the tree to correct what it reports, and how they are applied.

A rule attaches a `Fix` to a `Report`: a few structural changes to the LibCST tree it was
given (replace a node, insert statements before or after a statement, remove a statement),
with a title and an applicability. `safe` fixes change nothing but the mistake; `unsafe`
ones change code the user should look at (moving a step out of an autocast block, hoisting a
GradScaler out of a loop). Changes are made by identity on the parsed tree, so formatting and
comments everywhere else stay as they were.

`amplint.lint.fix_loop` lints, applies every selected fix that touches no statement another one
touches, checks that the result is still valid Python, and repeats on the new source until
no fix applies: overlapping fixes are applied one after another, never merged.
"""

from __future__ import annotations

import difflib
from bisect import bisect_right
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Dict, Iterator, List, Mapping, Optional, Sequence, Set, Tuple

import libcst as cst
from libcst._nodes.internal import CodegenState
from libcst.metadata import CodeRange

from amplint.escape import visible
from amplint.semantic import children, iter_tree

if TYPE_CHECKING:
    from amplint.lint.diagnostics import FixSuggestion
    from amplint.semantic import Occurrence, SemanticModel
    from amplint.semantic import ModuleIndex

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

    def nodes(self) -> List[cst.CSTNode]:
        """Every node of the parsed module the fix changes or reads."""
        found: List[cst.CSTNode] = [node for node, _ in self.replace]
        found += [statement for statement, _ in self.insert_before + self.insert_after]
        return found + list(self.remove) + list(self.touches)

    def anchors(self) -> Set[int]:
        return {id(node) for node in self.nodes()}


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


def _statements(tree: cst.CSTNode) -> Iterator[cst.CSTNode]:
    """The statements and blocks under `tree`, with what they hold but not inside expressions
    or simple statements (where no statement can be)."""
    return iter_tree(tree, descend=lambda node: not isinstance(node, (cst.BaseExpression, cst.SimpleStatementLine)))


def block_of(index: "ModuleIndex", statement: cst.CSTNode) -> Optional[Sequence[cst.BaseStatement]]:
    """The statements of the indented block (or module) `statement` stands in, by identity; None
    for a statement of a one-line suite (`if x: a(); b()`) or an `elif`."""
    block = index.block_of(statement)
    return block if isinstance(statement, cst.BaseStatement) else None  # type: ignore[return-value]


def contains(tree: cst.CSTNode, node: cst.CSTNode) -> bool:
    """Whether `node` (by identity) is `tree` or inside it."""
    return any(inner is node for inner in iter_tree(tree))


def unscale_before(model: "SemanticModel", occurrence: "Occurrence", scaler_key: Optional[str], what: str) -> Optional[Fix]:
    """`scaler.unscale_(optimizer)` before the statement that holds `occurrence` (a clip, a
    gradient read), in the block of the `scaler.step(optimizer)` that follows it: so that it
    runs once per step even when the use sits in a loop or a branch. A later `unscale_` of
    that optimizer in the same block is moved up instead (a second one would raise). None
    unless the function writes the use and one `scaler.step(...)` of one optimizer after it,
    with a plain GradScaler."""
    from amplint.semantic import EventKind

    info = model.scalers.get(scaler_key) if scaler_key is not None else None
    if occurrence.via or info is None or info.framework is not None:
        return None
    mine = [
        other for other in model.occurrences_in(occurrence.unit)
        if other.receiver is not None and other.receiver.key == scaler_key and isinstance(other.node, cst.Call)
    ]
    if any(other.via for other in mine):
        return None
    # The steps after the use: those whose block holds, before them, the statement with the use.
    found = []
    for step in mine:
        if step.kind is not EventKind.SCALER_STEP or step.argument is None:
            continue
        line = model.index.statement_of(step.node)
        block = block_of(model.index, line) if line is not None else None
        if block is None:
            continue
        position = next(i for i, item in enumerate(block) if item is line)
        anchor = next((item for item in block[:position] if contains(item, occurrence.node)), None)
        if anchor is not None:
            found.append((step, block, block.index(anchor), position))
    if len({step.argument.text for step, *_ in found}) != 1:
        return None
    step, block, start, position = found[0]
    optimizer = step.argument.text
    scaler = model.spelling_in(occurrence.unit, scaler_key)
    if scaler is None:
        return None
    anchor = block[start]
    title = f"Unscale before {what}: `{scaler}.unscale_({optimizer})`"
    between = [
        other for other in mine
        if other.kind is EventKind.UNSCALE and any(contains(item, other.node) for item in block[start:position])
    ]
    if not between:
        return Fix(title, insert_before=((anchor, (statement(f"{scaler}.unscale_({optimizer})"),)),))
    later_line = model.index.statement_of(between[0].node)
    if len(between) != 1 or later_line is None or not any(item is later_line for item in block[start + 1 : position]):
        return None
    return Fix(title + ", moved up from after it", insert_before=((anchor, (later_line,)),), remove=(later_line,))


def out_of_region(model: "SemanticModel", occurrence: "Occurrence") -> Optional[Fix]:
    """Unsafe: the flagged call's statement and everything after it in the `with` block of its
    autocast region move after the block (code after it that should stay in low precision
    moves too: the user reads the diff)."""
    from amplint.semantic import EventKind
    from amplint.semantic import source_text

    region = occurrence.region
    if region is None or occurrence.via or not isinstance(occurrence.call_site, cst.Call):
        return None  # a helper called under autocast may run a forward pass too
    tensor = occurrence.event.tensor
    call = occurrence.event.node
    if tensor is None and occurrence.kind is EventKind.FRAMEWORK_BACKWARD and isinstance(call, cst.Call):
        # A framework's backward (`accelerator.backward(loss)`): the loss is its first argument.
        if not call.args or call.args[0].keyword is not None:
            return None
        tensor = call.args[0].value
    if tensor is not None and not _computed_already(tensor):
        return None  # `criterion(out, y).backward()`: moving it would move the loss out of autocast
    line = model.index.statement_of(occurrence.call_site)
    if line is None:
        return None
    return out_of_with(model.index, region.anchor, line, f"`{source_text(occurrence.call_site)}`")


def _computed_already(tensor: cst.BaseExpression) -> bool:
    """Whether a backward's tensor is a value already computed (`loss`, `self.loss`,
    `losses[0]`, `loss / accum`, `scaler.scale(loss)`), not a computation that would move."""
    if isinstance(tensor, (cst.Name, cst.Attribute, cst.Integer, cst.Float)):
        return True
    if isinstance(tensor, cst.Subscript):
        return _computed_already(tensor.value)
    if isinstance(tensor, cst.BinaryOperation):
        return _computed_already(tensor.left) and _computed_already(tensor.right)
    if isinstance(tensor, cst.Call) and isinstance(tensor.func, cst.Attribute) and tensor.func.attr.value == "scale":
        return len(tensor.args) == 1 and _computed_already(tensor.args[0].value)
    return False


def out_of_with(index: "ModuleIndex", anchor: cst.Call, line: cst.BaseStatement, what: str) -> Optional[Fix]:
    """Move `line`, and the statements after it in the same `with` body, to just after the
    `with` statement whose only item is `anchor` (`with torch.autocast(...):`). None when
    `line` is not directly in that body, or would leave it empty."""
    with_node = index.with_of(anchor)
    if with_node is None or len(with_node.items) != 1 or not isinstance(with_node.body, cst.IndentedBlock):
        return None
    body = list(with_node.body.body)
    at = next((i for i, item in enumerate(body) if item is line), None)
    if at is None or at == 0:
        return None
    return Fix(
        f"Move {what} and the rest of the `with` block after it, out of autocast",
        applicability=UNSAFE,
        replace=((with_node, with_node.with_changes(body=with_node.body.with_changes(body=body[:at]))),),
        insert_after=((with_node, tuple(body[at:])),),
    )


def with_import(module: cst.Module, code: str, fix: Fix) -> Fix:
    """`fix` that also adds the import `code` to the module: after its last top-level import,
    else after its docstring and `__future__` imports, else at the top."""
    body = list(module.body)
    imports = [i for i, item in enumerate(body) if isinstance(item, cst.SimpleStatementLine) and isinstance(item.body[0], (cst.Import, cst.ImportFrom))]
    added = (statement(code),)
    if imports:
        anchor = body[imports[-1]]
        return replace(fix, insert_after=fix.insert_after + ((anchor, added),), touches=fix.touches + (anchor,))
    first = 1 if body and _is_docstring(body[0]) else 0
    if first < len(body):
        anchor = body[first]
        return replace(fix, insert_before=fix.insert_before + ((anchor, added),), touches=fix.touches + (anchor,))
    return fix if not body else replace(fix, insert_after=fix.insert_after + ((body[-1], added),), touches=fix.touches + (body[-1],))


def without_import(index: "ModuleIndex", alias: cst.ImportAlias, fix: Fix) -> Fix:
    """`fix` that also drops `alias` from its import (the whole import when it is the only
    name there). Where that would leave a block empty (`try: from torch.cuda.amp import
    autocast`), the import becomes `pass`, so that no unused import stays behind."""
    found = [
        (line, small)
        for line in _statements(index.module)
        if isinstance(line, cst.SimpleStatementLine)
        for small in line.body
        if isinstance(small, (cst.Import, cst.ImportFrom))
        and not isinstance(small.names, cst.ImportStar)
        and any(name is alias for name in small.names)
    ]
    if not found:
        return fix
    line, importer = found[0]
    names = [name for name in importer.names if name is not alias]  # type: ignore[union-attr]
    if names:
        names[-1] = names[-1].with_changes(comma=cst.MaybeSentinel.DEFAULT)
        return replace(fix, replace=fix.replace + ((importer, importer.with_changes(names=names)),), touches=fix.touches + (line,))
    if len(line.body) != 1:  # `import os; from torch.cuda.amp import autocast`
        rest = [small for small in line.body if small is not importer]
        rest[-1] = rest[-1].with_changes(semicolon=cst.MaybeSentinel.DEFAULT)
        return replace(fix, replace=fix.replace + ((line, line.with_changes(body=rest)),), touches=fix.touches + (line,))
    block = block_of(index, line)
    if block is None:
        return fix
    if len(block) < 2:
        return replace(fix, replace=fix.replace + ((line, line.with_changes(body=[cst.Pass()])),), touches=fix.touches + (line,))
    return replace(fix, remove=fix.remove + (line,), touches=fix.touches + (line,))


def _is_docstring(item: cst.BaseStatement) -> bool:
    return (
        isinstance(item, cst.SimpleStatementLine)
        and isinstance(item.body[0], cst.Expr)
        and isinstance(item.body[0].value, (cst.SimpleString, cst.ConcatenatedString))
    )


# --------------------------------------------------------------------------- applying


class _Applier(cst.CSTTransformer):
    def __init__(self, fixes: Sequence[Fix], within: Optional[Set[int]] = None) -> None:
        super().__init__()
        # The ids of the nodes worth descending into (those on the way to what the fixes
        # change); None: all of them.
        self.within = within
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

    def on_visit(self, node: cst.CSTNode) -> bool:
        return self.within is None or id(node) in self.within

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


def non_overlapping(found: Sequence[Tuple[str, Fix]]) -> List[Tuple[str, Fix]]:
    """A subset of (rule code, fix) pairs, in order, no two of whose fixes touch the same node."""
    chosen: List[Tuple[str, Fix]] = []
    taken: Set[int] = set()
    for code, fix in found:
        anchors = fix.anchors()
        if anchors & taken:
            continue
        taken |= anchors
        chosen.append((code, fix))
    return chosen


def still_valid(code: str, path: str, target=None) -> bool:
    """Whether fixed code is still valid Python, judged as every linted file is
    (`amplint.lint.syntax`): CPython's verdict for the project's grammar, and LibCST can parse it."""
    from amplint.lint.syntax import parse_module, syntax_error

    try:
        return syntax_error(code, path, target) is None and isinstance(parse_module(code), cst.Module)
    except RecursionError:
        return False


def edits(original: str, fixed: str, first_row: int = 1) -> List[Edit]:
    """The text edits that turn `original` into `fixed`, by whole lines; `original` starts at
    row `first_row` of its file."""
    before = original.splitlines(keepends=True)
    after = fixed.splitlines(keepends=True)
    found = []
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(a=before, b=after, autojunk=False).get_opcodes():
        if tag == "equal":
            continue
        found.append(Edit(i1 + first_row, 1, i2 + first_row, 1, "".join(after[j1:j2])))
    return found


class Suggestions:
    """How output formats show each fix of one module: its title, applicability, and the
    edits it makes alone.

    Only the top-level statements that hold what a fix changes are rewritten and compared,
    so a fix of one line of a 2,000-line file costs that statement, not the file; and only
    the nodes on the way down to what it changes are visited. A statement's code and the
    way to each node in it are worked out once for all the module's fixes."""

    def __init__(self, module: cst.Module, positions: Mapping[cst.CSTNode, CodeRange], codes: Optional[Mapping[int, str]] = None) -> None:
        """`codes`: the code of top-level statements already printed (id -> `code_for_node`)."""
        self.module = module
        self.positions = positions
        self._codes: Dict[int, str] = dict(codes or {})
        self._parents: Dict[int, Dict[int, cst.CSTNode]] = {}
        self._spans: List[Tuple[int, int, cst.CSTNode]] = []  # (first row, last row, top-level statement)
        self._starts: Optional[List[int]] = None
        self._made: Dict[int, Tuple[Fix, "FixSuggestion"]] = {}  # id(fix) -> (fix, its suggestion)

    @staticmethod
    def anchors(module: cst.Module, changed: Optional[Set[int]] = None) -> Iterator[cst.CSTNode]:
        """The nodes whose positions suggestions read besides the fixes' own: each top-level
        statement, and the first decorator of a decorated one; given the ids of the nodes the
        fixes change, only the statements that hold them (the others are never rewritten), or
        all where one is outside every statement."""
        items: Sequence[cst.CSTNode] = module.body
        if changed:
            remaining = set(changed)
            items = [item for item in module.body if remaining and _holds(item, remaining)]
            if remaining:
                items = module.body
        for item in items:
            yield item
            decorators = getattr(item, "decorators", ())
            if decorators:
                yield decorators[0]

    def __call__(self, fix: Fix) -> "FixSuggestion":
        """The suggestion `fix` makes; worked out once for a fix several findings share."""
        made = self._made.get(id(fix))
        if made is None:
            made = self._made[id(fix)] = (fix, self._suggestion(fix))
        return made[1]

    def _suggestion(self, fix: Fix) -> "FixSuggestion":
        from amplint.lint.diagnostics import FixSuggestion

        positions = self.positions
        rows = sorted({positions[node].start.line for node in fix.nodes() if node in positions})
        changes: List[Edit] = []
        for start, item in self._holding(rows):
            way = self._way_to(item, fix.nodes())
            old = self._code(item)
            new = self._rewritten_in(item, old, fix, way)
            if new is None:
                applier = _Applier([fix], within=way)
                new = "".join(self.module.code_for_node(node) for node in applier._body([item.visit(applier)]))
            changes.extend(edits(old, new, start - len(item.leading_lines)))
        found = tuple((e.row, e.column, e.end_row, e.end_column, e.content) for e in changes)
        return FixSuggestion(fix.title, fix.applicability, found)

    def _holding(self, rows: Sequence[int]) -> List[Tuple[int, cst.CSTNode]]:
        """(first row, statement) of the top-level statements that hold any of `rows` (sorted),
        in the module's order: found by bisection, so a module's many fixes cost no more than
        their own statements."""
        if self._starts is None:
            for item in self.module.body:
                span = self.positions.get(item)
                if span is None:
                    continue
                # A decorated definition's position starts at `def`/`class`: its code, at the decorators.
                decorators = getattr(item, "decorators", ())
                start = self.positions[decorators[0]].start.line - len(decorators[0].leading_lines) if decorators else span.start.line
                self._spans.append((start, span.end.line, item))
            self._starts = [start for start, _, _ in self._spans]
        spans, starts = self._spans, self._starts
        found: Dict[int, Tuple[int, cst.CSTNode]] = {}
        for row in rows:
            at = bisect_right(starts, row) - 1
            if at >= 0 and row <= spans[at][1]:
                found[at] = (spans[at][0], spans[at][2])
        return [found[at] for at in sorted(found)]

    def _code(self, item: cst.CSTNode) -> str:
        code = self._codes.get(id(item))
        if code is None:
            code = self._codes[id(item)] = self.module.code_for_node(item)
        return code

    def _rewritten_in(self, item: cst.CSTNode, code: str, fix: Fix, way: Optional[Set[int]]) -> Optional[str]:
        """`item`'s code with `fix` applied, printing only the innermost statement of a block
        that holds all the fix changes in it: its code as the fix leaves it, put in place of
        its code as it is, in `code` (`item`'s). None where that cannot be said (the fix
        changes `item` itself or several of its statements, or the statement's code is not
        found once, at the start of a line): then `item` is printed whole.

        A statement prints the same alone as in its module, given its block's indentation
        (`CodegenState.indent_tokens`): LibCST's blocks print their statements one after the
        other, each from the state alone."""
        if way is None:
            return None
        changed = {id(node) for node in fix.nodes()}
        inner, indents = _innermost_statement(item, way, changed, self.module.default_indent)
        if inner is None:
            return None
        try:
            old = self._printed(inner, indents)
        except Exception:  # LibCST's printing changed under this private state: print it whole
            return None
        at = code.find(old)
        if at < 0 or code.find(old, at + 1) >= 0 or (at > 0 and code[at - 1] not in "\r\n"):
            return None
        applier = _Applier([fix], within=way)
        new = "".join(self._printed(node, indents) for node in applier._body([inner.visit(applier)]))
        return code[:at] + new + code[at + len(old) :]

    def _printed(self, statement: cst.CSTNode, indents: Sequence[str]) -> str:
        """`statement`'s code in a block indented by `indents` (outermost first)."""
        state = CodegenState(default_indent=self.module.default_indent, default_newline=self.module.default_newline)
        state.indent_tokens = list(indents)
        statement._codegen(state)
        return "".join(state.tokens)

    def _way_to(self, item: cst.CSTNode, nodes: Sequence[cst.CSTNode]) -> Optional[Set[int]]:
        """The ids of `item` and of every node between it and those of `nodes` inside it; None
        (visit everything) where one inside it is off the code-carrying walk."""
        parents = self._parents.get(id(item))
        if parents is None:
            parents = self._parents[id(item)] = {id(child): parent for parent in iter_tree(item) for child in children(parent)}
        way: Set[int] = {id(item)}
        for node in nodes:
            key = id(node)
            if key not in parents and key not in way:
                if node not in self.positions or not self._outside(node, item):
                    return None
                continue  # in another top-level statement: a fix may touch several
            while key not in way:
                way.add(key)
                key = id(parents[key])
        return way

    def _outside(self, node: cst.CSTNode, item: cst.CSTNode) -> bool:
        span, outer = self.positions[node], self.positions[item]
        decorators = getattr(item, "decorators", ())
        first = self.positions[decorators[0]].start.line if decorators else outer.start.line
        return span.end.line < first or span.start.line > outer.end.line


# Where the way to a fix's nodes may go on down towards a statement of an inner block: the
# parts of compound statements that print their block at one more indentation (a `match`'s
# cases add one of their own: not followed).
_ENCLOSING = (
    cst.FunctionDef,
    cst.ClassDef,
    cst.If,
    cst.Else,
    cst.For,
    cst.While,
    cst.With,
    cst.Try,
    cst.TryStar,
    cst.ExceptHandler,
    cst.ExceptStarHandler,
    cst.Finally,
)


def _innermost_statement(item: cst.CSTNode, way: Set[int], changed: Set[int], default_indent: str) -> Tuple[Optional[cst.CSTNode], List[str]]:
    """The deepest statement of an indented block inside `item` that the whole `way` goes
    through (the ids of the nodes from `item` down to a fix's nodes), at or above every node
    the fix changes (`changed`), with its block's indentation (outermost first); (None, [])
    where the way parts, or goes into anything but compound statements and their blocks,
    before it reaches one."""
    found: Optional[cst.CSTNode] = None
    indents: List[str] = []
    found_indents: List[str] = []
    current = item
    while id(current) not in changed:
        onward = [child for child in children(current) if id(child) in way]
        if len(onward) != 1:
            break
        if isinstance(current, cst.IndentedBlock):
            indents.append(default_indent if current.indent is None else current.indent)
            found, found_indents = onward[0], list(indents)
        elif not isinstance(current, _ENCLOSING):
            break
        current = onward[0]
    return found, found_indents


def _holds(item: cst.CSTNode, remaining: Set[int]) -> bool:
    """Whether `item` holds nodes of `remaining` (ids), which are taken out of it."""
    held = False
    for node in iter_tree(item):
        if id(node) in remaining:
            remaining.discard(id(node))
            held = True
    return held


def diff(original: str, fixed: str, path: str) -> str:
    """A unified diff, as `--diff` prints it."""
    return "".join(
        difflib.unified_diff(
            original.splitlines(keepends=True),
            fixed.splitlines(keepends=True),
            fromfile=f"a/{visible(path)}",
            tofile=f"b/{visible(path)}",
        )
    )
