"""`--output-format gitlab`: a GitLab Code Quality report (JSON), as ruff writes it.

    amplint:
      script: amplint --output-format gitlab -o gl-code-quality-report.json .
      artifacts:
        reports:
          codequality: gl-code-quality-report.json

Paths are relative to `CI_PROJECT_DIR` (the checkout) where GitLab sets it, else to the
working directory. Severity: an `error` finding is `major`, a `warning` is `minor`; a file
that could not be linted is `critical`, at its problem's line where it has one; a function
too complex to follow within the analysis limit is `info`, at its `def`. Each fingerprint is
stable across runs (code, path, message and, for repeats, which repeat) so GitLab can tell new
findings from old ones.
A file name that is not UTF-8 is written with its odd bytes as `\\xff` escapes, and its
fingerprint is taken from the name as written.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections import Counter
from typing import Any, Dict, List

from amplint.lint.diagnostics import FileError, RunReport
from amplint.escape import unicode_safe
from amplint.run.notebook import is_notebook
from amplint.output.locations import relative_path

SEVERITY = {"error": "major", "warning": "minor"}


def render(report: RunReport, **_: object) -> str:
    root = os.path.abspath(os.environ.get("CI_PROJECT_DIR") or os.getcwd())
    seen: Counter = Counter()
    issues: List[Dict[str, Any]] = []
    for finding in report.findings:
        path = unicode_safe(relative_path(finding.path, root) or finding.path)
        line, column, end_line, end_column = finding.span_in_file()
        message = unicode_safe(finding.message)
        description = message
        if finding.cell is not None:
            description += f" (cell {finding.cell}, line {finding.cell_row})"
        key = (finding.code, path, message)
        seen[key] += 1
        issues.append(
            {
                "check_name": finding.code,
                "description": f"{finding.code} {description}",
                "content": {"body": finding.help or ""},
                "categories": ["Bug Risk"],
                "fingerprint": _fingerprint(*key, str(seen[key])),
                "severity": SEVERITY.get(finding.severity, "major"),
                "location": {
                    "path": path,
                    "positions": {
                        "begin": {"line": line, "column": column},
                        "end": {"line": max(end_line, line), "column": end_column},
                    },
                },
            }
        )
    for error in sorted(report.errors):
        path = unicode_safe(relative_path(error.path, root) or error.path)
        message = unicode_safe(error.message)
        issues.append(
            {
                "check_name": "amplint/file-not-linted",
                "description": f"amplint could not lint this file: {message}",
                "categories": ["Bug Risk"],
                "fingerprint": _fingerprint("file-not-linted", path, message),
                "severity": "critical",
                "location": {"path": path, "lines": {"begin": _line(error), "end": _line(error)}},
            }
        )
    for skipped in report.skipped_functions:
        path = unicode_safe(relative_path(skipped.path, root) or skipped.path)
        line = skipped.line_in_file()
        issues.append(
            {
                "check_name": "amplint/function-not-analysed",
                "description": f"amplint did not analyse {skipped.message}",
                "categories": ["Bug Risk"],
                "fingerprint": _fingerprint("function-not-analysed", path, skipped.name),
                "severity": "info",
                "location": {"path": path, "lines": {"begin": line, "end": line}},
            }
        )
    return json.dumps(issues, indent=2) + "\n"


def _line(error: FileError) -> int:
    """The problem's line in the file: a notebook's rows count its joined cells, not the .ipynb's lines."""
    return error.row if error.row is not None and not is_notebook(error.path) else 1


def _fingerprint(*parts: str) -> str:
    return hashlib.sha256("\0".join(parts).encode("utf-8")).hexdigest()[:32]
