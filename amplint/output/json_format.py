"""`--output-format json` (a list) and `json-lines` (one object per line): ruff's JSON shape.

Rows and columns are 1-based. `message` is the finding's short title and `help` says why it
matters and what to write instead; `severity` is `error` or `warning`; `fix` is null, or the
finding's fix: applicability, message, edits.

For a notebook, `location` and `end_location` are in the joined code cells (what `noqa_row`
and the rows of other findings count in), `cell` is the cell as Jupyter numbers it (every
cell, 1-based) and `cell_location` the row and column within that cell; both are null for a
`.py` file.

A file that could not be linted (a syntax error, undecodable, unreadable) is an item too,
as ruff reports syntax errors: `code` is null, `message` says why, and the location is where
the problem is (a syntax error's line and column), else the file's start.

A function too complex to follow within the analysis limit is an item with `code` null,
`name` `function-not-analysed`, `severity` `info`, at the function's name; `help` says how to
raise the limit.

A finding explained by places elsewhere (a hazard in model code that runs under an autocast
region another file opens) has `related`: the region, then each call on the way in, each with
`filename`, `location` and `message`. Other findings have no `related` key.
"""

from __future__ import annotations

import json
import os
from typing import Any, Dict, List, Optional

from amplint.lint.diagnostics import FileError, Finding, NotAnalysed, RunReport


def items(report: RunReport) -> List[Dict[str, Any]]:
    found = [_finding(finding) for finding in report.findings]
    return found + [_not_linted(error) for error in sorted(report.errors)] + [_not_analysed(s) for s in report.skipped_functions]


def render(report: RunReport, **_: object) -> str:
    return json.dumps(items(report), indent=2) + "\n"


def render_lines(report: RunReport, **_: object) -> str:
    return "".join(json.dumps(item) + "\n" for item in items(report))


def _filename(path: str) -> str:
    return os.path.abspath(path) if path != "-" else path


def _finding(finding: Finding) -> Dict[str, Any]:
    found = {
        "cell": finding.cell,
        "cell_location": ({"column": finding.column, "row": finding.cell_row} if finding.cell is not None else None),
        "code": finding.code,
        "end_location": {"column": finding.end_column, "row": finding.end_row},
        "filename": _filename(finding.path),
        "fix": fix_object(finding),
        "help": finding.help,
        "location": {"column": finding.column, "row": finding.row},
        "message": finding.message,
        "name": finding.name,
        "noqa_row": finding.row,
        "severity": finding.severity,
        "url": finding.url,
    }
    if finding.related:
        # What explains it elsewhere (a hazard in model code: the autocast region it runs
        # under, in another file, and each call on the way), only where there is something.
        found["related"] = [
            {"filename": _filename(r.path), "location": {"column": r.column, "row": r.row}, "message": r.message} for r in finding.related
        ]
    return found


def fix_object(finding: Finding) -> Optional[Dict[str, Any]]:
    """ruff's shape: applicability, message, and edits (1-based rows and columns of the linted
    file, end exclusive; a notebook's fix lists no edits, its rows being the joined cells')."""
    if finding.fix is None:
        return None
    edits = [] if finding.cell is not None else [
        {"content": content, "end_location": {"column": end_column, "row": end_row}, "location": {"column": column, "row": row}}
        for row, column, end_row, end_column, content in finding.fix.edits
    ]
    return {"applicability": finding.fix.applicability, "edits": edits, "message": finding.fix.title}


def _not_analysed(skipped: NotAnalysed) -> Dict[str, Any]:
    start = {"column": skipped.column, "row": skipped.row}
    title, _, advice = skipped.message.partition(" (")
    return {
        "cell": skipped.cell,
        "cell_location": ({"column": skipped.column, "row": skipped.cell_row} if skipped.cell is not None else None),
        "code": None,
        "end_location": start,
        "filename": _filename(skipped.path),
        "fix": None,
        "help": advice.rstrip(")").capitalize() + ": a factor on the analysis' work limits.",
        "location": start,
        "message": title,
        "name": "function-not-analysed",
        "noqa_row": None,
        "severity": "info",
        "url": None,
    }


def _not_linted(error: FileError) -> Dict[str, Any]:
    start = {"column": error.column or 1, "row": error.row or 1}
    return {
        "cell": error.cell,
        "cell_location": ({"column": error.column or 1, "row": error.cell_row} if error.cell is not None else None),
        "code": None,
        "end_location": start,
        "filename": _filename(error.path),
        "fix": None,
        "help": None,
        "location": start,
        "message": error.message,
        "name": None,
        "noqa_row": None,
        "severity": "error",
        "url": None,
    }
