"""`--output-format sarif`: SARIF 2.1.0, for GitHub code scanning and other SARIF viewers.

Every rule is described in `tool.driver.rules` (id, name, descriptions, help, helpUri), so a
result's `ruleIndex` is stable across runs. Paths are URIs relative to `%SRCROOT%`, the
repository root (see amplint.output.locations). Files that could not be linted are
`toolExecutionNotifications` of the invocation (level `error`), which is then not
`executionSuccessful`; functions too complex to follow within the analysis limit are
notifications too, of level `note`, at the function's name.
"""

from __future__ import annotations

import json
import os
import pathlib
from typing import Any, Dict
from urllib.parse import quote

from amplint import __version__
from amplint.lint.diagnostics import Finding, NotAnalysed, RunReport
from amplint.output.locations import relative_path, workspace_root

SCHEMA = "https://json.schemastore.org/sarif-2.1.0.json"
INFORMATION_URI = "https://github.com/amplint/amplint"
ROOT = "%SRCROOT%"


def render(report: RunReport, **_: object) -> str:
    from amplint.rules import ALL_RULES  # the rules' documentation: only for this format

    root = workspace_root()
    index = {rule.code: position for position, rule in enumerate(ALL_RULES)}
    run: Dict[str, Any] = {
        "tool": {
            "driver": {
                "name": "amplint",
                "version": __version__,
                "semanticVersion": __version__,
                "informationUri": INFORMATION_URI,
                "rules": [_rule(rule) for rule in ALL_RULES],
            }
        },
        "originalUriBaseIds": {ROOT: {"uri": pathlib.Path(root).as_uri().rstrip("/") + "/"}},
        "invocations": [
            {
                "executionSuccessful": not report.errors,
                "toolExecutionNotifications": [
                    {
                        "level": "error",
                        "message": {"text": error.message},
                        "locations": [{"physicalLocation": {"artifactLocation": _artifact(error.path, root)}}],
                    }
                    for error in sorted(report.errors)
                ]
                + [_not_analysed(skipped, root) for skipped in report.skipped_functions],
            }
        ],
        "results": [_result(finding, index, root) for finding in report.findings],
        # LibCST counts columns in characters, not UTF-16 code units (SARIF's default).
        "columnKind": "unicodeCodePoints",
    }
    document = {"$schema": SCHEMA, "version": "2.1.0", "runs": [run]}
    return json.dumps(document, indent=2) + "\n"


def _not_analysed(skipped: NotAnalysed, root: str) -> Dict[str, Any]:
    line = skipped.line_in_file()
    column = skipped.column if skipped.file_row is None else 1
    return {
        "level": "note",
        "descriptor": {"id": "function-not-analysed"},
        "message": {"text": skipped.message},
        "locations": [
            {
                "physicalLocation": {
                    "artifactLocation": _artifact(skipped.path, root),
                    "region": {"startLine": line, "startColumn": column},
                }
            }
        ],
    }


def _rule(rule: Any) -> Dict[str, Any]:
    page = rule.page()
    return {
        "id": rule.code,
        "name": rule.name,
        "shortDescription": {"text": rule.summary()},
        "fullDescription": {"text": _unwrap(rule.section("What it does") or rule.summary())},
        "help": {"text": page, "markdown": page},
        "helpUri": rule.url(),
        "defaultConfiguration": {"level": _level(rule.severity)},
        "properties": {"tags": ["pytorch", "mixed-precision", "correctness"]},
    }


def _unwrap(text: str) -> str:
    """Docstring paragraphs are hard-wrapped; viewers wrap descriptions themselves."""
    return "\n\n".join(" ".join(paragraph.split()) for paragraph in text.split("\n\n"))


def _result(finding: Finding, index: Dict[str, int], root: str) -> Dict[str, Any]:
    line, column, end_line, end_column = finding.span_in_file()
    message = finding.text
    result: Dict[str, Any] = {"ruleId": finding.code}
    if finding.code in index:
        result["ruleIndex"] = index[finding.code]
    if finding.cell is not None:
        # The region is in the .ipynb's JSON; the cell is where the user reads the code.
        message += f" (cell {finding.cell}, line {finding.cell_row})"
    result.update(
        {
            "level": _level(finding.severity),
            "message": {"text": message},
            "locations": [
                {
                    "physicalLocation": {
                        "artifactLocation": _artifact(finding.path, root),
                        "region": {
                            "startLine": line,
                            "startColumn": column,
                            "endLine": max(end_line, line),
                            "endColumn": end_column if end_line > line else max(end_column, column),
                        },
                    }
                }
            ],
        }
    )
    if finding.related:
        # The autocast region in another file and the calls on the way in: related locations
        # for viewers that list them, and one code flow for those that step through it.
        places = [
            {
                "id": number,
                "physicalLocation": {"artifactLocation": _artifact(r.path, root), "region": {"startLine": r.row, "startColumn": r.column}},
                "message": {"text": r.message},
            }
            for number, r in enumerate(finding.related)
        ]
        result["relatedLocations"] = places
        result["codeFlows"] = [
            {"threadFlows": [{"locations": [{"location": {key: value for key, value in place.items() if key != "id"}} for place in places]}]}
        ]
    if finding.cell is not None:
        result["properties"] = {"cell": finding.cell, "cellLine": finding.cell_row, "cellColumn": finding.column}
    elif finding.fix is not None and finding.fix.edits:
        result["fixes"] = [
            {
                "description": {"text": finding.fix.title + ("" if finding.fix.applicability == "safe" else " (unsafe)")},
                "artifactChanges": [
                    {
                        "artifactLocation": _artifact(finding.path, root),
                        "replacements": [
                            {
                                "deletedRegion": {"startLine": row, "startColumn": column, "endLine": end_row, "endColumn": end_column},
                                "insertedContent": {"text": content},
                            }
                            for row, column, end_row, end_column, content in finding.fix.edits
                        ],
                    }
                ],
            }
        ]
    return result


def _level(severity: str) -> str:
    return "warning" if severity == "warning" else "error"


def _artifact(path: str, root: str) -> Dict[str, str]:
    relative = relative_path(path, root)
    if relative is None:
        return {"uri": pathlib.Path(path).resolve().as_uri()}
    # The file name's own bytes, percent-encoded: a name that is not UTF-8 (decoded with
    # surrogate escapes) still gets a URI that points at it.
    return {"uri": quote(os.fsencode(relative)), "uriBaseId": ROOT}
