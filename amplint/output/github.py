"""`--output-format github`: GitHub Actions workflow commands, one annotation per finding.

`::error file=train.py,line=10,col=5,endLine=10,endColumn=60,title=AMP003 (clip-before-unscale)::…`
The command is the finding's severity (`::error`, or `::warning` for a warning rule); the
message is the location, code and title, then a `help:` line. A file that could not be
linted is an error annotation too, on the problem's line where it has one (a syntax error),
else on the first line.
A function too complex to follow within the analysis limit is a `::notice` on its `def`.
Notebooks are annotated on the line of the .ipynb that holds the offending code, and the
message names the cell.
"""

from __future__ import annotations

from dataclasses import replace
from typing import List, Tuple

from amplint.lint.diagnostics import RunReport
from amplint.run.notebook import is_notebook
from amplint.escape import visible
from amplint.output.locations import relative_path, workspace_root
from amplint.output.text import location


def render(report: RunReport, **_: object) -> str:
    root = workspace_root()
    lines: List[str] = []
    for finding in report.findings:
        line, column, end_line, end_column = finding.span_in_file()
        file = _file(finding.path, root)
        properties: List[Tuple[str, object]] = [("file", file), ("line", line)]
        # GitHub takes columns only for an annotation on one line.
        if end_line == line:
            properties += [("col", column), ("endLine", end_line), ("endColumn", end_column)]
        else:
            properties += [("endLine", end_line)]
        properties.append(("title", f"{finding.code} ({finding.name})" if finding.name else finding.code))
        # The message repeats the location for the log, where a notebook's reads `cell 3:12:5`.
        where = location(replace(finding, path=file))
        message = f"{where}: {finding.code} {visible(finding.message)}"
        if finding.help:
            message += f"\nhelp: {visible(finding.help)}"
        lines.append(_command(properties, message, finding.severity))
    for error in sorted(report.errors):
        file = _file(error.path, root)
        # At the problem where it has a place (a syntax error), else on the first line: an
        # annotation without a line is not shown beside the code. A notebook's row counts its
        # joined code cells, not the lines of the .ipynb.
        if error.row is not None and not is_notebook(error.path):
            where: List[Tuple[str, object]] = [("line", error.row), ("col", error.column or 1)]
        else:
            where = [("line", 1)]
        lines.append(_command([("file", file), *where, ("title", "amplint: file not linted")], f"{file}: {visible(error.message)}"))
    for skipped in report.skipped_functions:
        file = _file(skipped.path, root)
        lines.append(
            _command(
                [("file", file), ("line", skipped.line_in_file()), ("title", "amplint: function not analysed")],
                f"{file}:{skipped.line_in_file()}: {skipped.message}",
                "notice",
            )
        )
    return "".join(line + "\n" for line in lines)


def _file(path: str, root: str) -> str:
    # A name with a control character or a non-UTF-8 byte is written with escapes (the log
    # shows properties in debug mode); any other name is exact, so the annotation lands on it.
    return visible(relative_path(path, root) or path)


def _command(properties: List[Tuple[str, object]], message: str, severity: str = "error") -> str:
    command = severity if severity in ("warning", "notice") else "error"
    rendered = ",".join(f"{key}={_escape_property(str(value))}" for key, value in properties)
    return f"::{command} {rendered}::{_escape_data(message)}"


def _escape_data(text: str) -> str:
    # The runner's own escaping (toolkit/packages/core/src/command.ts).
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def _escape_property(text: str) -> str:
    return _escape_data(text).replace(":", "%3A").replace(",", "%2C")
