"""Jupyter notebooks: the code cells joined into one Python source, and the way back to cells.

A notebook is linted like a `.py` file made of its code cells in order, which is what the
kernel runs when the notebook is executed top to bottom: a `GradScaler` made in cell 2 and
used in cell 7 is the same scaler. Only plain `json` is used (nbformat 4); nothing here needs
Jupyter installed.

IPython syntax is not Python, so before parsing, each line that IPython would rewrite is
replaced by one that parses and does nothing, keeping every line where it was:

- line magics `%time ...`, shell escapes `!pip ...`, `!!ls`, help `model?`, `?model`,
  `%timeit?` and autocalls (`/f x`, `,f a b`, `;f a`) become `pass` (indented as they were);
- `files = !ls` and `t = %time f()` become `files = None` / `t = None`;
- a cell magic `%%time`, `%%capture`, ... whose body is Python keeps its body; a cell whose
  cell magic runs something else (`%%bash`, `%%writefile`, `%%html`, ...) is not Python and
  is left out, as are cells whose VS Code language is not Python.

Cells are numbered as Jupyter shows them: 1-based, counting every cell (markdown too), as
ruff does, so `cell 3` is the third cell on screen.
"""

from __future__ import annotations

import bisect
import json
import json.decoder
import json.scanner
import re
from dataclasses import dataclass, field
from typing import Any, Dict, Iterator, List, Optional, Sequence, Tuple, Union

from amplint.lint.diagnostics import FileError

# Cell magics whose body IPython runs as Python (ruff's list): the body is linted.
PYTHON_CELL_MAGICS = frozenset({"capture", "debug", "prun", "pypy", "python", "python3", "time", "timeit"})

_LINE_BREAK = re.compile(r"[^\r\n]*(?:\r\n|\r|\n)|[^\r\n]+\Z")
_LONE_SURROGATE = re.compile("[\ud800-\udfff]")
_CELL_MAGIC = re.compile(r"%%(?P<name>\w+)")
_ESCAPE = ("%", "!", "?", "/", ",", ";")
# `obj?`, `obj.attr??`, `np.*load*?`, `%timeit?`: IPython's help suffix.
_HELP_SUFFIX = re.compile(r"[%\w.*\[\]]+\?{1,2}\s*\Z")
# `files = !ls`, `a, b = %sx cmd`, `out = %time f()`: the assignment stays, the command goes.
# Targets may be subscripted or annotated: `res['gpu'] = !nvidia-smi`, `outs: list = !ls`.
_ASSIGNED_ESCAPE = re.compile(r"(?P<targets>[A-Za-z_][^=!%#'\"]*?(?:\[[^\]]*\][^=!%#'\"]*?)*)\s*=\s*[%!]")


@dataclass(frozen=True)
class CellSpan:
    number: int  # 1-based, counting every cell of the notebook
    first_row: int  # 1-based row in the joined source
    last_row: int
    # Columns removed from every line: IPython runs a cell whose first line is indented
    # as if dedented, and so is it parsed here.
    indent: int = 0


@dataclass(frozen=True)
class CellMap:
    """Which rows of the joined source came from which cell."""

    cells: Tuple[CellSpan, ...]

    def cell_at(self, row: int) -> Optional[CellSpan]:
        cell = self._cell_from(row)
        return cell if cell is not None and row <= cell.last_row else None

    def _cell_from(self, row: int) -> Optional[CellSpan]:
        index = bisect.bisect_right([cell.first_row for cell in self.cells], row) - 1
        return self.cells[index] if index >= 0 else None

    def locate(self, row: int) -> Tuple[Optional[int], Optional[int]]:
        """(cell number, row within the cell) of a joined row."""
        cell = self.cell_at(row)
        return (cell.number, row - cell.first_row + 1) if cell else (None, None)

    def place(self, row: int) -> Tuple[Optional[int], Optional[int]]:
        """(cell number, row within the cell) of a joined row where a syntax error may be:
        one at end of input is reported one row past the last cell's end."""
        cell = self._cell_from(row)
        return (cell.number, row - cell.first_row + 1) if cell else (None, None)

    def describe(self, row: int, column: int) -> str:
        """`cell 3:2:5`, as the text output writes a syntax error's place."""
        number, cell_row = self.place(row)
        return f"cell {number}:{cell_row}:{column}" if number is not None else f"{row}:{column}"


@dataclass
class Notebook:
    python: str  # the joined code cells with IPython syntax neutralised: what is parsed
    display: str  # the same rows as the user wrote them: what code frames show
    cells: CellMap
    text: str  # the .ipynb file itself, to find where a cell line sits in the JSON
    _rows: Optional[List["_RowInFile"]] = field(default=None, repr=False)

    def file_span(self, row: int, column: int, end_row: int, end_column: int) -> Tuple[int, int, int, int]:
        """A joined-source span as (line, column, end line, end column) in the .ipynb file.

        GitHub annotations and SARIF results point into the file on disk; for a notebook that
        is the JSON, where each source line is one string of the cell's `source` list.
        """
        if self._rows is None:
            self._rows = _rows_in_file(self.text, self.display)
        start = self._position(row, column)
        end = self._position(end_row, end_column)
        return (*start, *end)

    def _position(self, row: int, column: int) -> Tuple[int, int]:
        if not self._rows or not 1 <= row <= len(self._rows):
            return (1, 1)
        return self._rows[row - 1].position(column)


def is_notebook(path: str) -> bool:
    return path.lower().endswith(".ipynb")


def parse_notebook(text: str, path: str) -> Union[Notebook, FileError, None]:
    """The notebook's Python, a FileError if it is not a readable notebook, None if not Python."""
    try:
        document = json.loads(text)
    except json.JSONDecodeError as error:
        return FileError(path, f"invalid notebook: not valid JSON (line {error.lineno}, column {error.colno}: {error.msg})")
    except RecursionError:
        return FileError(path, "invalid notebook: JSON nested too deeply")
    except ValueError as error:
        # What the decoder raises past the grammar: a number of more than 4,300 digits
        # ("Exceeds the limit (4300 digits) for integer string conversion: ...").
        return FileError(path, f"invalid notebook: not valid JSON ({str(error).split(':')[0]})")
    problem = _nbformat_problem(document)
    if problem:
        return FileError(path, f"invalid notebook: {problem}")
    if not _is_python_notebook(document.get("metadata")):
        return None
    python: List[str] = []
    display: List[str] = []
    spans: List[CellSpan] = []
    for number, _, lines, kept in _python_cells(document):
        surrogate = _LONE_SURROGATE.search("".join(lines))
        if surrogate:
            # JSON can escape half of a UTF-16 pair (`"\ud800"`); that is no character,
            # and no kernel could run the cell.
            return FileError(
                path, f"invalid notebook: cell {number} contains a lone surrogate (\\u{ord(surrogate.group()):04x}), which is not text"
            )
        first = len(python) + 1
        kept, indent = _dedent(kept)
        python.extend(kept)
        display.extend(lines)
        spans.append(CellSpan(number, first, len(python), indent))
    return Notebook("".join(python), "".join(display), CellMap(tuple(spans)), text)


def _python_cells(document: dict) -> Iterator[Tuple[int, dict, List[str], List[str]]]:
    """(number, cell, lines as written, lines as parsed) of each code cell that is Python."""
    for number, cell in enumerate(document["cells"], start=1):
        if cell.get("cell_type") != "code" or not _is_python_cell(cell):
            continue
        lines = _LINE_BREAK.findall(_source_text(cell["source"]))
        if not lines:
            continue
        kept = _neutralise(lines)
        if kept is None:  # a %%bash, %%writefile, ... cell
            continue
        if not lines[-1].endswith(("\n", "\r")):
            # The cells are joined as separate lines, as the kernel runs them.
            lines[-1] += "\n"
            kept[-1] += "\n"
        yield number, cell, lines, kept


def _nbformat_problem(document: Any) -> Optional[str]:
    if not isinstance(document, dict) or "cells" not in document:
        if isinstance(document, dict) and "worksheets" in document:
            return f"nbformat {document.get('nbformat', 3)} is not supported (save it as nbformat 4)"
        return "not a Jupyter notebook (no `cells` list)"
    version = document.get("nbformat")
    if version != 4:
        return f"nbformat {version!r} is not supported (expected 4)"
    cells = document["cells"]
    if not isinstance(cells, list):
        return "`cells` is not a list"
    for number, cell in enumerate(cells, start=1):
        if not isinstance(cell, dict) or not isinstance(cell.get("cell_type"), str):
            return f"cell {number} is not a cell (no `cell_type`)"
        source = cell.get("source")
        if not (isinstance(source, str) or (isinstance(source, list) and all(isinstance(s, str) for s in source))):
            return f"cell {number} has no `source` string or list of strings"
    return None


def _is_python_notebook(metadata: Any) -> bool:
    # A notebook with an R or Julia kernel is not ours to lint; no language at all is Python.
    if not isinstance(metadata, dict):
        return True
    for owner, key in (("language_info", "name"), ("kernelspec", "language")):
        value = metadata.get(owner, {}).get(key) if isinstance(metadata.get(owner), dict) else None
        if isinstance(value, str):
            return value.lower() == "python"
    return True


def _is_python_cell(cell: dict) -> bool:
    metadata = cell.get("metadata")
    vscode = metadata.get("vscode") if isinstance(metadata, dict) else None
    language = vscode.get("languageId") if isinstance(vscode, dict) else None
    return not isinstance(language, str) or language == "python"


def _dedent(lines: List[str]) -> Tuple[List[str], int]:
    """IPython's leading_indent transform: a cell whose first code line is indented, as when
    pasted from inside a function, is dedented by that indent."""
    first = next((line for line in lines if line.strip()), "")
    prefix = first[: len(first) - len(first.lstrip(" \t"))]
    if not prefix:
        return lines, 0
    # As IPython does: lines without the prefix (a comment or docstring text at column 0)
    # stay as they are.
    return [line[len(prefix) :] if line.startswith(prefix) else line for line in lines], len(prefix)


def _source_text(source: Union[str, List[str]]) -> str:
    return source if isinstance(source, str) else "".join(source)


def _neutralise(lines: Sequence[str]) -> Optional[List[str]]:
    """The cell's lines with IPython syntax made into no-ops, or None if the cell is not Python."""
    kept = list(lines)
    first = next((i for i, line in enumerate(lines) if line.strip()), None)
    if first is not None:
        magic = _CELL_MAGIC.match(lines[first].lstrip())
        if magic:
            if magic.group("name") not in PYTHON_CELL_MAGICS:
                return None
            # `%%timeit -n 10 setup()`: the rest of the line is options, not the linted code.
            kept[first] = _ending(lines[first])
    continues = _Continuation()
    in_escape = False  # a magic line ending in `\` takes the next line with it
    for index in range(len(kept)):
        line = kept[index]
        if in_escape:
            in_escape = line.rstrip("\r\n").endswith("\\")
            kept[index] = _ending(line)
            continue
        if not continues.pending and _is_escape(line):
            kept[index] = _replacement(line)
            in_escape = line.rstrip("\r\n").endswith("\\")
            continue
        continues.feed(line)
    return kept


def _is_escape(line: str) -> bool:
    stripped = line.strip()
    if not stripped:
        return False
    if stripped.startswith(_ESCAPE):
        return True
    if stripped.endswith("?") and not stripped.startswith("#") and _HELP_SUFFIX.match(stripped):
        return True
    return bool(_ASSIGNED_ESCAPE.match(stripped))


def _replacement(line: str) -> str:
    indent = line[: len(line) - len(line.lstrip())]
    assigned = _ASSIGNED_ESCAPE.match(line.strip())
    statement = f"{assigned.group('targets')} = None" if assigned else "pass"
    return indent + statement + _ending(line)


def _ending(line: str) -> str:
    return line[len(line.rstrip("\r\n")) :]


class _Continuation:
    """Whether the next line continues the current statement (open bracket, string or `\\`).

    Only a line that starts a statement can be IPython syntax: `!` or `%` inside a
    triple-quoted string or a bracketed call is the user's text. A small scanner rather than
    `tokenize`, whose errors for unfinished input differ between Python versions.
    """

    def __init__(self) -> None:
        self.depth = 0
        self.quote: Optional[str] = None
        self.backslash = False

    @property
    def pending(self) -> bool:
        return self.depth > 0 or self.quote is not None or self.backslash

    def feed(self, line: str) -> None:
        text = line.rstrip("\r\n")
        self.backslash = False
        comment = False
        i = 0
        while i < len(text):
            char = text[i]
            if self.quote is not None:
                if char == "\\":
                    i += 2
                    continue
                if text.startswith(self.quote, i):
                    i += len(self.quote)
                    self.quote = None
                    continue
                i += 1
                continue
            if char == "#":
                comment = True
                break
            if char in "\"'":
                self.quote = char * 3 if text.startswith(char * 3, i) else char
                i += len(self.quote)
                continue
            if char in "([{":
                self.depth += 1
            elif char in ")]}":
                self.depth = max(0, self.depth - 1)
            i += 1
        if self.quote is not None and len(self.quote) == 1:
            # A one-quote string ends with its line unless the line ends in `\`.
            if not text.endswith("\\"):
                self.quote = None
        elif self.quote is None and not comment and text.endswith("\\"):
            self.backslash = True


# --------------------------------------------------------------------------- rewriting cells


def replace_sources(text: str, sources: Dict[int, Union[str, List[str]]]) -> Optional[str]:
    """The notebook's JSON text with the `source` of some cells (index in `cells`) replaced.

    Only those values are written anew; every other byte stays as it was, so `--fix` changes
    only the fixed cells whatever wrote the file: its indentation, separators, key order,
    number spellings and escapes are kept. A new source line is written in the style of the
    list it goes into (the whitespace around and between its items), a line that was there
    before keeps its exact text, and the file's escaping is kept: a file that is all ASCII
    (`ensure_ascii`, `\\u00e9`) stays ASCII. None if a value cannot be located.
    """
    try:
        document = _LocatingDecoder().decode(text)
    except (ValueError, RecursionError):
        return None
    ascii_only = text.isascii()
    edits: List[Tuple[int, int, str]] = []
    for index, new in sources.items():
        cells = document.get("cells") if isinstance(document, dict) else None
        cell = cells[index] if isinstance(cells, list) and 0 <= index < len(cells) else None
        old = cell.get("source") if isinstance(cell, dict) else None
        if isinstance(old, _Located) and isinstance(new, str):
            edits.append((old.start - 1, old.end + 1, json.dumps(new, ensure_ascii=ascii_only)))
        elif isinstance(old, list) and old and all(isinstance(piece, _Located) for piece in old) and isinstance(new, list):
            edits.append(_list_edit(text, old, new, ascii_only))
        else:
            return None
    for start, end, replacement in sorted(edits, reverse=True):
        text = text[:start] + replacement + text[end:]
    return text


def _list_edit(text: str, old: List["_Located"], new: List[str], ascii_only: bool) -> Tuple[int, int, str]:
    """(start, end, text) replacing the JSON list whose strings are `old` by one of `new`."""
    start = text.rindex("[", 0, old[0].start - 1)
    end = text.index("]", old[-1].end + 1) + 1
    opening = text[start + 1 : old[0].start - 1]  # "" or "\n   " (indented)
    closing = text[old[-1].end + 1 : end - 1]
    if len(old) > 1:
        between = text[old[0].end + 1 : old[1].start - 1]
    else:
        between = _item_separator(text) + opening
    raw = {str(piece): text[piece.start - 1 : piece.end + 1] for piece in reversed(old)}
    if not new:
        return start, end, "[]"
    items = [raw.get(line) or json.dumps(line, ensure_ascii=ascii_only) for line in new]
    return start, end, "[" + opening + between.join(items) + closing + "]"


_STRING_OR_COMMA = re.compile(r'"(?:[^"\\]|\\.)*"|(,[ \t]*)')


def _item_separator(text: str) -> str:
    """The comma and the spaces after it (not the line break) that separate the file's items."""
    for match in _STRING_OR_COMMA.finditer(text):
        if match.group(1) is not None:
            return match.group(1)
    return ", "


# --------------------------------------------------------------------------- positions in the .ipynb


class _Located(str):
    """A JSON string value that remembers where its raw text is in the document."""

    start: int  # just after the opening quote
    end: int  # the closing quote


def _located_scanstring(text: str, end: int, strict: bool = True) -> Tuple[str, int]:
    value, after = json.decoder.scanstring(text, end, strict)
    located = _Located(value)
    located.start, located.end = end, after - 1
    return located, after


class _LocatingDecoder(json.JSONDecoder):
    def __init__(self) -> None:
        super().__init__()
        self.parse_string = _located_scanstring
        # The C scanner ignores parse_string; the Python one calls it for every string value.
        self.scan_once = json.scanner.py_make_scanner(self)


def _raw_length(raw: str, characters: int) -> int:
    """How many characters of JSON string text encode the first `characters` decoded ones."""
    index = 0
    for _ in range(characters):
        if index >= len(raw):
            break
        if raw[index] != "\\":
            index += 1
        elif raw[index + 1 : index + 2] == "u":
            # A surrogate pair is one decoded character written as two escapes.
            pair = raw[index + 2 : index + 6].lower().startswith(("d8", "d9", "da", "db"))
            index += 12 if pair and raw[index + 6 : index + 8] == "\\u" else 6
        else:
            index += 2
    return index


@dataclass(frozen=True)
class _RowInFile:
    """Where one row of the joined source is written in the .ipynb: inside a JSON string."""

    raw: str  # the JSON string text from the row's first character to the string's end
    line: int  # 1-based line of the .ipynb where the row starts
    column: int  # 1-based column of the row's first character on that line

    def position(self, column: int) -> Tuple[int, int]:
        # Escapes (`\"`, `\\`, `\u00e9`) make the JSON longer than the source it encodes.
        return self.line, self.column + _raw_length(self.raw, column - 1)


def _rows_in_file(text: str, display: str) -> List[_RowInFile]:
    try:
        document = _LocatingDecoder().decode(text)
    except (ValueError, RecursionError):
        return []
    line_starts = [0] + [match.end() for match in re.finditer("\n", text)]
    rows: List[_RowInFile] = []
    for _, cell, lines, _ in _python_cells(document):
        source = cell["source"]
        pieces = [source] if isinstance(source, str) else source
        # nbformat writes one piece per line, but a row may start anywhere in any piece.
        piece, consumed = 0, 0
        for line in lines:
            while piece < len(pieces) - 1 and consumed >= len(pieces[piece]):
                consumed -= len(pieces[piece])
                piece += 1
            located = pieces[piece]
            raw = text[located.start : located.end]
            start = located.start + _raw_length(raw, consumed)
            line_number = bisect.bisect_right(line_starts, start)
            rows.append(_RowInFile(text[start : located.end], line_number, start - line_starts[line_number - 1] + 1))
            consumed += len(line)
    return rows if len(rows) == len(_LINE_BREAK.findall(display)) else []
