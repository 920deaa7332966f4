"""Lint one source text: cheap pre-check, one parse, one pass of facts, every selected rule.

Nothing here imports torch or runs the linted code. A file that fails (syntax error, a bug in
a rule) becomes a per-file error; the caller carries on with the next file.
"""

from __future__ import annotations

import ast
from typing import Dict, Iterable, List, Optional, Sequence, Tuple, Type

import libcst as cst
from libcst.metadata import MetadataWrapper, PositionProvider

from amplint.diagnostics import FileError, FileResult, Finding
from amplint.noqa import parse_suppressions
from amplint.rule import Rule
from amplint.semantics import analyze

# Every rule needs an autocast region or a GradScaler (or something used like one): a file
# with none of these words cannot match, and is not parsed at all.
_AMP_VOCABULARY = ("autocast", "scale")


def might_use_amp(source: str) -> bool:
    return any(word in source for word in _AMP_VOCABULARY)


def lint_source(source: str, path: str, rules: Sequence[Type[Rule]]) -> FileResult:
    result = FileResult(path)
    if not rules or not might_use_amp(source):
        # Not worth a LibCST parse, but a broken file is still reported: CPython's own parser
        # checks it for a fraction of the cost.
        result.skipped = True
        result.error = _syntax_error(source, path)
        return result
    try:
        module = cst.parse_module(source)
    except cst.ParserSyntaxError as error:
        # CPython's message is the one users know; LibCST's is the fallback for the rare
        # file only one of the two parsers rejects.
        result.error = _syntax_error(source, path) or FileError(
            path, f"syntax error at {error.raw_line}:{error.raw_column + 1}: {error.message}"
        )
        return result
    except RecursionError:
        result.error = FileError(path, "could not parse: nesting too deep")
        return result
    try:
        reports = _run_rules(module, rules)
        result.findings = _locate(module, reports, path, source)
        if result.findings:
            result.source = source
    except RecursionError:
        result.error = FileError(path, "could not analyse: nesting too deep")
    return result


def _syntax_error(source: str, path: str) -> Optional[FileError]:
    try:
        ast.parse(source, filename=path)
    except SyntaxError as error:
        return FileError(path, f"syntax error at {error.lineno}:{error.offset}: {error.msg}")
    except (ValueError, RecursionError, MemoryError) as error:
        return FileError(path, f"could not parse: {error}")
    return None


def _run_rules(module: cst.Module, rules: Sequence[Type[Rule]]) -> List[Tuple[Type[Rule], cst.CSTNode, str]]:
    facts = analyze(module)
    seen: Dict[Tuple[str, int], bool] = {}
    reports = []
    for rule in rules:
        for report in rule().check(facts):
            key = (rule.code, id(report.node))
            if key not in seen:  # one node reached by many paths is one finding
                seen[key] = True
                reports.append((rule, report.node, report.message))
    return reports


def _locate(
    module: cst.Module, reports: Iterable[Tuple[Type[Rule], cst.CSTNode, str]], path: str, source: str
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
