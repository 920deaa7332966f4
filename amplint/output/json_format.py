"""`--output-format json`: a list of findings in ruff's JSON shape (1-based rows and columns)."""

from __future__ import annotations

import json
import os

from amplint.diagnostics import RunReport


def render(report: RunReport, **_: object) -> str:
    items = []
    for finding in report.findings:
        items.append(
            {
                "cell": finding.cell,
                "code": finding.code,
                "end_location": {"column": finding.end_column, "row": finding.end_row},
                "filename": os.path.abspath(finding.path) if finding.path != "-" else finding.path,
                "fix": None,
                "location": {"column": finding.column, "row": finding.row},
                "message": finding.message,
                "name": finding.name,
                "noqa_row": finding.row,
                "url": finding.url,
            }
        )
    return json.dumps(items, indent=2) + "\n"
