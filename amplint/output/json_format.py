"""`--output-format json`: a list of findings in ruff's JSON shape (1-based rows and columns).

For a notebook, `location` and `end_location` are in the joined code cells (what `noqa_row`
and the rows of other findings count in), `cell` is the cell as Jupyter numbers it (every
cell, 1-based) and `cell_location` the row and column within that cell; both are null for a
`.py` file.
"""

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
                "cell_location": (
                    {"column": finding.column, "row": finding.cell_row} if finding.cell is not None else None
                ),
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
