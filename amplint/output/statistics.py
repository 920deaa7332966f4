"""`--statistics`: the number of findings per rule, as a table or, with a JSON format, as JSON.

    $ amplint --statistics --output-format json .
    [{"code": "AMP003", "name": "clip-before-unscale", "count": 2, "fixable": false}]
"""

from __future__ import annotations

import json
from collections import Counter
from typing import Any, Dict, List

from amplint.lint.diagnostics import RunReport
from amplint.output.text import render_statistics

JSON_FORMATS = ("json", "json-lines")


def items(report: RunReport) -> List[Dict[str, Any]]:
    counts = Counter(finding.code for finding in report.findings)
    names = {finding.code: finding.name for finding in report.findings}
    fixable = {finding.code for finding in report.findings if report.applicable(finding)}
    found: List[Dict[str, Any]] = [
        {"code": code, "name": names[code], "count": count, "fixable": code in fixable} for code, count in sorted(counts.items())
    ]
    if report.errors:
        found.append({"code": None, "name": "files-not-linted", "count": len(report.errors), "fixable": False})
    if report.skipped_functions:
        found.append(
            {"code": None, "name": "function-not-analysed", "count": len(report.skipped_functions), "fixable": False}
        )
    return found


def render(report: RunReport, output_format: str) -> str:
    if output_format == "json":
        return json.dumps(items(report), indent=2) + "\n"
    if output_format == "json-lines":
        return "".join(json.dumps(item) + "\n" for item in items(report))
    return render_statistics(report)
