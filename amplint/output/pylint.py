"""`--output-format pylint`: `path:row: [CODE] message`, ruff's pylint-style lines, for tools
that parse pylint's parseable output (Jenkins, older editor plugins).

Rows are rows of the file on disk: for a notebook, the line of the .ipynb that holds the
code, and the message names the cell. The format has no severity field (neither has ruff's);
where severity matters, use `json`, `sarif`, `gitlab` or `github`.
"""

from __future__ import annotations

from typing import List

from amplint.lint.diagnostics import RunReport
from amplint.escape import visible
from amplint.run.notebook import is_notebook


def render(report: RunReport, **_: object) -> str:
    lines: List[str] = []
    for finding in report.findings:
        line = finding.span_in_file()[0]
        message = finding.message
        if finding.cell is not None:
            message += f" (cell {finding.cell}, line {finding.cell_row})"
        lines.append(f"{visible(finding.path)}:{line}: [{finding.code}] {visible(message)}")
    for error in sorted(report.errors):
        line = error.row if error.row is not None and not is_notebook(error.path) else 1  # a notebook's row: its joined cells
        lines.append(f"{visible(error.path)}:{line}: [amplint] could not lint this file: {visible(error.message)}")
    for skipped in report.skipped_functions:
        lines.append(f"{visible(skipped.path)}:{skipped.line_in_file()}: [amplint] {skipped.message}")
    return "".join(line + "\n" for line in lines)
