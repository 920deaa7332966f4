"""`--output-format junit`: JUnit XML, for CI systems that show test reports (GitLab, Jenkins,
Azure Pipelines), in ruff's shape.

One `<testsuite>` per file with findings, one `<testcase name="amplint.AMP003">` per finding.
A finding that fails the run (at `--fail-level`: errors by default, warnings too with
`--fail-level warning`) has a `<failure>` whose `type` is its severity; one that does not (a
warning, by default) is a passing testcase that says what it found in `<system-out>`, so
that the report agrees with the exit code: a run that exits 0 shows no failed test
(`--exit-zero` aside, which changes the exit code only). A file
that could not be linted is a testcase with an `<error>`, and a function too complex to follow
within the analysis limit a testcase marked `<skipped>`. A clean run is one passing testcase,
so that the report is never empty.

File names and messages are written as `amplint.escape.visible` shows them: a control
character, a newline or a non-UTF-8 byte in a name or in quoted code is an escape such as
`\\x1b`, so the report is always well-formed XML (which cannot hold most control characters
even as character references).
"""

from __future__ import annotations

import os
import xml.etree.ElementTree as ET
from typing import Dict, List, Tuple

from amplint.lint.diagnostics import FileError, Finding, NotAnalysed, RunReport
from amplint.escape import visible
from amplint.output.text import location


def render(report: RunReport, **_: object) -> str:
    by_file: Dict[str, Tuple[List[Finding], List[FileError], List[NotAnalysed]]] = {}
    for finding in report.findings:
        by_file.setdefault(finding.path, ([], [], []))[0].append(finding)
    for error in sorted(report.errors):
        by_file.setdefault(error.path, ([], [], []))[1].append(error)
    for skipped_function in report.skipped_functions:
        by_file.setdefault(skipped_function.path, ([], [], []))[2].append(skipped_function)

    failures = sum(map(report.fails, report.findings))
    tests, errors, skipped = len(report.findings), len(report.errors), len(report.skipped_functions)
    root = ET.Element(
        "testsuites", name="amplint", tests=str(max(1, tests + errors + skipped)), failures=str(failures), errors=str(errors), skipped=str(skipped)
    )
    if not by_file:
        suite = ET.SubElement(root, "testsuite", name="amplint", tests="1", disabled="0", errors="0", failures="0", package="amplint")
        ET.SubElement(suite, "testcase", name="No errors found", classname="amplint")
    for path, (findings, not_linted, not_analysed) in by_file.items():
        suite = ET.SubElement(
            root,
            "testsuite",
            name=visible(path),
            tests=str(len(findings) + len(not_linted) + len(not_analysed)),
            disabled="0",
            errors=str(len(not_linted)),
            failures=str(sum(map(report.fails, findings))),
            skipped=str(len(not_analysed)),
            package="amplint",
        )
        classname = visible(os.path.splitext(path)[0])
        for finding in findings:
            line, column = (finding.cell_row, finding.column) if finding.cell is not None else (finding.row, finding.column)
            case = ET.SubElement(
                suite, "testcase", name=f"amplint.{finding.code}", classname=classname, line=str(line), column=str(column)
            )
            text = f"{visible(location(finding))}: {finding.code} {visible(finding.text)}"
            if report.fails(finding):
                ET.SubElement(case, "failure", message=visible(finding.message), type=finding.severity).text = text
            else:
                ET.SubElement(case, "system-out").text = f"{finding.severity} (does not fail at --fail-level {report.fail_level}): {text}"
        for error in not_linted:
            case = ET.SubElement(suite, "testcase", name="amplint.file-not-linted", classname=classname)
            ET.SubElement(case, "error", message=visible(error.message), type="error").text = f"{visible(path)}: {visible(error.message)}"
        for function in not_analysed:
            row = function.cell_row if function.cell is not None else function.row
            case = ET.SubElement(suite, "testcase", name="amplint.function-not-analysed", classname=classname, line=str(row), column=str(function.column))
            ET.SubElement(case, "skipped", message=function.message)
    ET.indent(root, space="    ")
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"
