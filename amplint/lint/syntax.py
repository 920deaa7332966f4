"""Whether a file is valid Python: one verdict for every file, and a LibCST tree for analysis.

The verdict (`syntax_error`) never depends on what a file mentions. Every file, whether it
will be analysed or not, is parsed by CPython's own parser (`ast.parse`) with the grammar of
the project's Python: `target-version`, else `[project] requires-python`, else the newest
grammar amplint knows. Three cases need more than that:

- The running interpreter is older than that grammar (pre-commit on 3.11 for a 3.12 project):
  its parser rejects `type X = int` only because it predates it. A CPython rejection is then
  forgiven if LibCST, which knows the newer grammar, accepts the file and CPython's error is
  at syntax newer than the interpreter; string literals are still checked with CPython
  (`b'é'`, `'\\N{foo}'`), which LibCST accepts. (So on 3.11, 201 nested brackets are still
  an error, but one CPython cannot see past a `type` statement above it is not caught.)
- The project targets an older Python than the interpreter: CPython is asked for that
  version's grammar (`feature_version`), which catches `match` in a 3.9 project. This is
  CPython's best effort: not every newer construct is caught.
- CPython accepts what LibCST rejects (a tab/space indent CPython accepts, a backslash before
  the end of the file or alone on a line, thousands of implicitly concatenated strings):
  `parse_module` then rewrites the text for LibCST without moving any character (tabs in
  indentation become spaces, such a backslash a space, a huge run of strings one string of
  the same extent) and parses that. Only if LibCST still fails is the file an error, and it says
  that the code is valid Python amplint could not analyse.

Why every file pays for a CPython parse, when amplint analyses only files that mention AMP:
reporting syntax errors only where the tree is needed would make the verdict depend on
whether a file says "autocast", and LibCST both accepts code CPython rejects and rejects
code CPython accepts. CPython's parser is the cheapest complete check there is (compiling to
bytecode costs the same). A file amplint will not analyse needs the verdict, not the tree:
with the running interpreter's grammar, `symtable` runs that parser without turning the tree
into Python objects, for a third less; only where it objects (it is stricter) is `ast.parse`
asked, so the verdict is the same. Much of the rest is the cyclic garbage collector walking
the freshly built AST, so the collector is paused during the parse: an AST has no reference
cycles, so nothing is left for it. Measured numbers are in the README ("Syntax errors").
"""

from __future__ import annotations

import ast
import gc
import io
import re
import symtable
import sys
import threading
import tokenize
import warnings
from contextlib import contextmanager, nullcontext
from typing import TYPE_CHECKING, Any, Iterator, List, Optional, Set, Tuple, Union

from amplint.lint.diagnostics import FileError
from amplint.run.notebook import CellMap
from amplint.lint.parse_guard import parse_hazard

if TYPE_CHECKING:
    import libcst as cst

# LibCST is imported where a tree is wanted (and where a newer grammar must be asked), never
# for the verdict alone: a run on files that mention no AMP code does not import it.

PythonVersion = Tuple[int, int]
RUNNING: PythonVersion = sys.version_info[:2]
# The newest grammar amplint can parse: LibCST's.
NEWEST: PythonVersion = (3, 14)
# ast.parse's oldest feature_version.
_OLDEST_FEATURE_VERSION: PythonVersion = (3, 7)
# More implicitly concatenated strings than this in one expression are folded into one for
# LibCST (whose parser gives up at a few thousand); fewer are parsed as written.
_LONG_STRING_RUN = 500
_LONE_BACKSLASH = re.compile(r"\\(?:\r\n|\r|\n)")


_RECURSION_LIMIT = 10_000


@contextmanager
def recursion_room() -> Iterator[None]:
    """LibCST's tree walks recurse once per nesting level: a 400-term string concatenation
    is valid Python and must not become "nesting too deep"."""
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, _RECURSION_LIMIT))
    try:
        yield
    finally:
        sys.setrecursionlimit(limit)


@contextmanager
def quiet_collector() -> Iterator[None]:
    """No GC passes: a fresh AST has no reference cycles to find, only nodes to walk."""
    collecting = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if collecting:
            gc.enable()


@contextmanager
def _quiet_parse() -> Iterator[None]:
    """No SyntaxWarnings on stderr for the user's invalid escapes, and no GC passes."""
    with quiet_collector(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield


def syntax_error(
    source: str, path: str, target: Optional[PythonVersion] = None, cells: Optional[CellMap] = None
) -> Optional[FileError]:
    """The file's syntax error under the project's grammar, or None if it is valid Python:
    `python_tree`'s verdict, for a file whose tree is not needed."""
    if _feature_version(target) is None and _running_parser_accepts(source, path):
        return None
    return python_tree(source, path, target, cells)[1]


def _running_parser_accepts(source: str, path: str) -> bool:
    """Whether CPython's parser accepts the file, without building its tree as Python objects
    (a third cheaper than `ast.parse`): `symtable` parses into C structures and walks them once
    for scopes. It is stricter than the parse (a duplicate argument, `nonlocal` at module
    level, `import *` in a function), so False is no verdict: `python_tree` gives it."""
    try:
        with _quiet_parse():
            symtable.symtable(source, path, "exec")
    except Exception:  # SyntaxError, RecursionError, MemoryError, ValueError: ask ast.parse
        return False
    return True


def _feature_version(target: Optional[PythonVersion]) -> Optional[PythonVersion]:
    """The grammar to ask CPython's parser for: None for the running one's."""
    grammar = target or NEWEST
    return max(grammar, _OLDEST_FEATURE_VERSION) if grammar < RUNNING else None


def python_tree(
    source: str, path: str, target: Optional[PythonVersion] = None, cells: Optional[CellMap] = None
) -> Tuple[Optional[ast.Module], Optional[FileError]]:
    """CPython's tree of the file and its syntax error under the project's grammar: (tree,
    None) for valid Python; (None, None) for code valid only in a grammar newer than the
    running interpreter's, which has no CPython tree; (None, error) otherwise."""
    grammar = target or NEWEST
    feature_version = _feature_version(target)
    try:
        with _quiet_parse():
            return ast.parse(source, filename=path, feature_version=feature_version), None
    except SyntaxError as error:
        if grammar > RUNNING and _newer_grammar_explains(source, error, grammar):
            return None, None
        return None, _describe(error, path, cells)
    except (RecursionError, MemoryError):  # CPython's "too complex"
        return None, FileError(path, "not parsed: nested too deeply for CPython's parser (and LibCST, amplint's parser, would crash)")
    except ValueError as error:  # a lone surrogate or NUL that the decoding let through
        return None, FileError(path, f"could not parse: {error or type(error).__name__}")


def _describe(error: SyntaxError, path: str, cells: Optional[CellMap]) -> FileError:
    message = error.msg
    if cells is not None:
        # CPython's "... on line 7" counts rows of the joined cells; say where that is.
        message = re.sub(r"on line (\d+)", lambda m: _cell_line(int(m.group(1)), cells), message)
    row, column = error.lineno or 1, error.offset or 1
    cell, cell_row = cells.place(row) if cells is not None else (None, None)
    return FileError(path, f"syntax error at {where(row, column, cells)}: {message}", row, column, cell, cell_row)


def _cell_line(row: int, cells: CellMap) -> str:
    number, cell_row = cells.locate(row)
    return f"in cell {number} on line {cell_row}" if number is not None else f"on line {row}"


def where(row: int, column: int, cells: Optional[CellMap]) -> str:
    return cells.describe(row, column) if cells is not None else f"{row}:{column}"


def _newer_grammar_explains(source: str, error: SyntaxError, grammar: PythonVersion) -> bool:
    """Whether the file is valid in a grammar newer than the running interpreter's, and the
    running parser rejected it only for syntax that grammar added."""
    if parse_hazard(source) is not None:  # LibCST would take minutes or crash on it
        return False
    import libcst as cst

    from amplint.lint.newer_syntax import NewerSyntax

    try:
        module = parse_module(source)
        if not isinstance(module, cst.Module):
            return False
        finder = NewerSyntax(grammar)
        cst.MetadataWrapper(module, unsafe_skip_copy=True).visit(finder)
    except RecursionError:
        return False
    # LibCST does not evaluate string literals; CPython does, the same way in every version.
    # Elsewhere (a 201st nested bracket) only an error at newer syntax is forgiven.
    return finder.literals_valid and any(first <= (error.lineno or 0) <= last for first, last in finder.rows)


# --------------------------------------------------------------------------- LibCST


def parse_module(source: str) -> Union[cst.Module, cst.ParserSyntaxError]:
    """LibCST's tree of valid Python, normalised if that is what it takes; else LibCST's error.

    Raises RecursionError for nesting too deep for LibCST's tree.
    """
    return parse_module_exactly(source)[0]


def parse_module_exactly(source: str, cpython_accepts: bool = False) -> Tuple[Union[cst.Module, cst.ParserSyntaxError], bool]:
    """`parse_module`, and whether the tree is of `source` as written (not normalised): only
    such a tree can be written back, as a fix does. `cpython_accepts`: CPython's parser
    accepted `source` (the caller built its tree), so LibCST's nodes need no validation."""
    import libcst as cst

    with trusting_libcsts_parser() if cpython_accepts else nullcontext():
        first = _libcst_parse(source)
        if isinstance(first, cst.Module):
            return first, True
        normalised = normalise_for_libcst(source)
        if normalised != source:
            second = _libcst_parse(normalised)
            if isinstance(second, cst.Module):
                return second, False
        return first, False


def parse_accepted(source: str) -> Union[cst.Module, cst.ParserSyntaxError]:
    """LibCST's tree of code CPython's parser accepted, as written (never normalised), its
    nodes unvalidated (`trusting_libcsts_parser`); else LibCST's error."""
    with trusting_libcsts_parser():
        return _libcst_parse(source)


_TRUST = threading.Lock()
_trusting = 0  # parses under way that skip validation


@contextmanager
def trusting_libcsts_parser() -> Iterator[None]:
    """No validation of the nodes LibCST's parser builds, a sixth of its parse.

    Every node runs `CSTNode._validate` when it is made, which is for nodes a program builds
    by hand; LibCST's own comment on it says validating a parsed tree is wasted work. A tree
    of code CPython accepted is valid Python by construction (the tests compare the trees
    built with and without validation). The switch is process-wide and counted, so nested or
    concurrent parses restore it once; no other thread builds nodes meanwhile (the language
    server lints in a single worker thread, and its code actions are text edits)."""
    global _trusting
    import libcst as cst

    if _validation() is None:  # a LibCST that validates some other way: nothing to skip
        yield
        return
    with _TRUST:
        _trusting += 1
        if _trusting == 1:
            cst.CSTNode.__post_init__ = _no_validation  # type: ignore[method-assign]
    try:
        yield
    finally:
        with _TRUST:
            _trusting -= 1
            if _trusting == 0:
                cst.CSTNode.__post_init__ = _validation()  # type: ignore[method-assign]


_VALIDATION: Any = ...  # LibCST's own node validation, read when LibCST is first needed


def _validation() -> Any:
    global _VALIDATION
    if _VALIDATION is ...:
        import libcst as cst

        _VALIDATION = getattr(cst.CSTNode, "__post_init__", None)
    return _VALIDATION


def _no_validation(self: cst.CSTNode) -> None:
    return None


def _libcst_parse(source: str) -> Union[cst.Module, cst.ParserSyntaxError]:
    import libcst as cst

    try:
        return cst.parse_module(source)
    except cst.ParserSyntaxError as error:
        return error
    except RecursionError:
        raise
    except BaseException as error:  # noqa: B902
        # LibCST also refuses with CSTValidationError (`b'' ''`), and its Rust parser can
        # panic (PanicException, a BaseException): both mean "cannot parse", not a crash.
        if not isinstance(error, Exception) and type(error).__name__ != "PanicException":
            raise
        return cst.ParserSyntaxError(f"{type(error).__name__}: {error}", lines=[""], raw_line=1, raw_column=0)


def normalise_for_libcst(source: str) -> str:
    """The same program in a form LibCST parses, with every character where it was."""
    try:
        with _quiet_parse():
            tree = ast.parse(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return source
    lines = source.splitlines(keepends=True)
    in_string = _rows_inside_strings(tree)
    for index, line in enumerate(lines):
        if index + 1 in in_string:
            continue
        if _LONE_BACKSLASH.fullmatch(line) and not (index and lines[index - 1].rstrip("\r\n").endswith("\\")):
            # A line that is only a backslash in column 0: CPython takes the indentation of
            # the line it continues onto, as if this line were blank; LibCST may not.
            lines[index] = " " + line[1:]
            continue
        body = line.lstrip(" \t\f")
        indent = line[: len(line) - len(body)]
        if "\t" in indent:
            # CPython accepts mixed indentation only when it means the same with tabs
            # counted as 1 and as 8 columns, so one space per tab keeps its meaning.
            lines[index] = indent.replace("\t", " ") + body
    text = "".join(lines)
    # A backslash continuing onto the end of the file joins nothing.
    text = re.sub(r"\\(?=[ \t\f]*(?:\r\n|\r|\n)?[ \t\f\r\n]*\Z)", " ", text, count=1)
    return _fold_string_runs(text, tree)


def _rows_inside_strings(tree: ast.AST) -> Set[int]:
    """Rows that start inside a multi-line string literal: their whitespace is the string's."""
    rows = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.JoinedStr) or (isinstance(node, ast.Constant) and isinstance(node.value, (str, bytes))):
            end = node.end_lineno or node.lineno
            rows.update(range(node.lineno + 1, end + 1))
    return rows


def _fold_string_runs(text: str, tree: ast.AST) -> str:
    """Each run of more than _LONG_STRING_RUN implicitly concatenated strings becomes one
    string literal spanning exactly the same characters (newlines kept)."""
    lines = text.splitlines(keepends=True)
    starts = [0]
    for line in lines:
        starts.append(starts[-1] + len(line))
    edits: List[Tuple[int, int, str]] = []
    for node in ast.walk(tree):
        if not isinstance(node, (ast.Constant, ast.JoinedStr)) or getattr(node, "end_lineno", None) is None:
            continue
        if isinstance(node, ast.Constant) and not isinstance(node.value, (str, bytes)):
            continue
        start = _offset(lines, starts, node.lineno, node.col_offset)
        end = _offset(lines, starts, node.end_lineno, node.end_col_offset)
        segment = text[start:end]
        if segment.count("'") + segment.count('"') < 2 * _LONG_STRING_RUN or _count_strings(segment) <= _LONG_STRING_RUN:
            continue
        is_bytes = isinstance(node, ast.Constant) and isinstance(node.value, bytes)
        edits.append((start, end, _one_string(segment, is_bytes)))
    for start, end, replacement in sorted(edits, reverse=True):
        text = text[:start] + replacement + text[end:]
    return text


def _offset(lines: List[str], starts: List[int], row: int, column: int) -> int:
    # ast columns are UTF-8 byte offsets within the line.
    line = lines[row - 1] if row - 1 < len(lines) else ""
    return starts[row - 1] + len(line.encode("utf-8")[:column].decode("utf-8", "replace"))


def _count_strings(segment: str) -> int:
    count = 0
    try:
        for token in tokenize.generate_tokens(io.StringIO(segment).readline):
            if token.type == tokenize.STRING or token.type == getattr(tokenize, "FSTRING_START", -1):
                count += 1
    except (tokenize.TokenError, SyntaxError):
        pass
    return count


def _one_string(segment: str, is_bytes: bool) -> str:
    prefix = "b" if is_bytes else ""
    filler = re.sub(r"[^\r\n]", "x", segment)
    if "\n" in segment or "\r" in segment:
        quote = '"""'
    else:
        quote = '"'
    inner = filler[len(prefix) + len(quote) : len(filler) - len(quote)]
    return prefix + quote + inner + quote
