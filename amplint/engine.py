"""Lint one file's contents: cheap pre-check, one parse, one semantic model, every selected rule.

A notebook's code cells are joined into one source first (amplint.notebook), and its findings
are mapped back to cells.

Nothing here imports torch or runs the linted code. A file that fails (syntax error, a bug in
a rule) becomes a per-file error; the caller carries on with the next file.
"""

from __future__ import annotations

import ast
import functools
import re
import sys
from dataclasses import replace
from typing import Dict, FrozenSet, Iterable, List, Optional, Sequence, Tuple, Type

import libcst as cst
from libcst.metadata import MetadataWrapper, PositionProvider

from amplint.diagnostics import FileError, FileResult, Finding
from amplint.noqa import parse_suppressions
from amplint.notebook import CellMap, is_notebook, parse_notebook
from amplint.parse_guard import parse_hazard
from amplint.rule import Rule
from amplint.semantic import SemanticModel, analyze
from amplint.semantic.exports import ExternalModules, export_summary, imports_of
from amplint.source import decode_notebook, decode_python, size_error


_RECURSION_LIMIT = 10_000


def might_use_amp(source: str, rules: Optional[Sequence[Type[Rule]]] = None) -> bool:
    """Whether a file can match any of `rules` (default: all), by a text search far cheaper
    than a parse: each rule names the words its findings need (`Rule.triggers`); a file
    with none of them is not parsed at all."""
    if rules is None:
        from amplint.rules import ALL_RULES

        rules = ALL_RULES
    return any(word in source for word in _triggers(tuple(rules)))


@functools.lru_cache(maxsize=64)
def _triggers(rules: Tuple[Type[Rule], ...]) -> FrozenSet[str]:
    return frozenset(word for rule in rules for word in rule.triggers)


def lint_bytes(
    data: bytes, path: str, rules: Sequence[Type[Rule]], external: Optional[ExternalModules] = None
) -> FileResult:
    """Lint a file's contents, read from disk or standard input: a notebook, or Python source.
    `external`: summaries of the other linted modules it may import (see `amplint.project`)."""
    if is_notebook(path):
        return _lint_notebook(data, path, rules, external)
    source = decode_python(data, path)
    if isinstance(source, FileError):
        return FileResult(path, error=source)
    return lint_source(source, path, rules, external=external)


def _lint_notebook(data: bytes, path: str, rules: Sequence[Type[Rule]], external: Optional[ExternalModules]) -> FileResult:
    text = decode_notebook(data, path)
    notebook = parse_notebook(text, path) if isinstance(text, str) else text
    if isinstance(notebook, FileError):
        return FileResult(path, error=notebook)
    if notebook is None:  # an R or Julia notebook
        return FileResult(path, skipped=True)
    too_large = size_error(path, len(notebook.python.encode("utf-8")), what="code in notebook")
    if too_large:
        return FileResult(path, error=too_large)
    result = lint_source(notebook.python, path, rules, notebook.cells, external)
    if result.findings:
        # Frames show the cells as written (`%time`, not the `pass` that was parsed).
        result.source = notebook.display
        result.cells = notebook.cells
        result.findings = [_in_cell_columns(f, notebook.cells) for f in result.findings]
        result.findings = [
            replace(f, file_span=notebook.file_span(f.row, f.column, f.end_row, f.end_column))
            for f in result.findings
        ]
    return result


def _in_cell_columns(finding: Finding, cells: CellMap) -> Finding:
    """Columns as the cell is written, where it was parsed dedented."""
    cell = cells.cell_at(finding.row)
    if cell is None or not cell.indent:
        return finding
    end_shift = cell.indent if finding.end_row <= cell.last_row else 0
    return replace(finding, column=finding.column + cell.indent, end_column=finding.end_column + end_shift)


def lint_source(
    source: str,
    path: str,
    rules: Sequence[Type[Rule]],
    cells: Optional[CellMap] = None,
    external: Optional[ExternalModules] = None,
) -> FileResult:
    """Lint Python source; `cells` when it is a notebook's joined code cells."""
    # LibCST's tree walks recurse once per nesting level: a 400-term string concatenation
    # is valid Python and must not become "nesting too deep".
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, _RECURSION_LIMIT))
    try:
        return _lint_source(source, path, rules, cells, external)
    finally:
        sys.setrecursionlimit(limit)


def _lint_source(
    source: str, path: str, rules: Sequence[Type[Rule]], cells: Optional[CellMap], external: Optional[ExternalModules] = None
) -> FileResult:
    result = FileResult(path)
    if not rules or not might_use_amp(source, rules):
        # Not worth a LibCST parse, but a broken file is still reported: CPython's own parser
        # checks it for a fraction of the cost.
        result.skipped = True
        result.error = _syntax_error(source, path, cells)
        return result
    hazard = parse_hazard(source)
    if hazard is not None:  # LibCST would take minutes or crash on it
        syntax = _syntax_error(source, path, cells) if hazard.syntax else None
        result.error = syntax or FileError(path, hazard.message(_where(hazard.row, hazard.column, cells)))
        return result
    try:
        module = cst.parse_module(source)
    except cst.ParserSyntaxError as error:
        # CPython's message is the one users know; LibCST's is the fallback for the rare
        # file only one of the two parsers rejects.
        result.error = _syntax_error(source, path, cells) or FileError(
            path, f"syntax error at {_where(error.raw_line, error.raw_column + 1, cells)}: {error.message}"
        )
        return result
    except RecursionError:
        result.error = FileError(path, "could not parse: nesting too deep")
        return result
    try:
        model = analyze(module, external)
        reports = _run_rules(model, rules)
        result.findings = _locate(module, reports, path, source, cells)
        result.summary = export_summary(model, path)
        result.imports = imports_of(model.index)
        result.skipped_functions = [unit.name for unit in model.skipped_units]
        if result.findings:
            result.source = source
    except RecursionError:
        result.error = FileError(path, "could not analyse: nesting too deep")
    return result


def _syntax_error(source: str, path: str, cells: Optional[CellMap] = None) -> Optional[FileError]:
    try:
        ast.parse(source, filename=path)
    except SyntaxError as error:
        message = error.msg
        if cells is not None:
            # CPython's "... on line 7" counts rows of the joined cells; say where that is.
            message = re.sub(r"on line (\d+)", lambda m: _cell_line(int(m.group(1)), cells), message)
        return FileError(path, f"syntax error at {_where(error.lineno or 1, error.offset or 1, cells)}: {message}")
    except (ValueError, RecursionError, MemoryError) as error:
        return FileError(path, f"could not parse: {error}")
    return None


def _cell_line(row: int, cells: CellMap) -> str:
    number, cell_row = cells.locate(row)
    return f"in cell {number} on line {cell_row}" if number is not None else f"on line {row}"


def _where(row: int, column: int, cells: Optional[CellMap]) -> str:
    return cells.describe(row, column) if cells is not None else f"{row}:{column}"


def _run_rules(model: SemanticModel, rules: Sequence[Type[Rule]]) -> List[Tuple[Type[Rule], cst.CSTNode, str]]:
    seen: Dict[Tuple[str, int], bool] = {}
    reports = []
    for rule in rules:
        for report in rule().check(model):
            key = (rule.code, id(report.node))
            if key not in seen:  # one node reached by many paths is one finding
                seen[key] = True
                reports.append((rule, report.node, report.message))
    return reports


def _locate(
    module: cst.Module,
    reports: Iterable[Tuple[Type[Rule], cst.CSTNode, str]],
    path: str,
    source: str,
    cells: Optional[CellMap] = None,
) -> List[Finding]:
    reports = list(reports)
    if not reports:
        return []
    # Positions are resolved only for files with findings; the copy is skipped so that the
    # nodes the rules hold are the nodes the wrapper knows.
    positions = MetadataWrapper(module, unsafe_skip_copy=True).resolve(PositionProvider)
    suppressions = parse_suppressions(source)
    findings = []
    for rule, node, message in reports:
        span = positions[node]
        row, column = span.start.line, span.start.column + 1
        if suppressions.suppresses(row, rule.code):
            continue
        cell, cell_row = cells.locate(row) if cells is not None else (None, None)
        findings.append(
            Finding(
                path=path,
                row=row,
                column=column,
                code=rule.code,
                message=message,
                end_row=span.end.line,
                end_column=span.end.column + 1,
                name=rule.name,
                url=rule.url(),
                cell=cell,
                cell_row=cell_row,
            )
        )
    return sorted(findings)


def lint_text(source: str, rules: Optional[Sequence[Type[Rule]]] = None, path: str = "<string>") -> List[Finding]:
    """Convenience for tests and the API: findings for a snippet, errors raised."""
    from amplint.rules import ALL_RULES

    result = lint_source(source, path, rules if rules is not None else ALL_RULES)
    if result.error is not None:
        raise ValueError(result.error.message)
    return result.findings
