"""`--output-format full` (the default) and `concise`: findings for a person to read.

`full` is ruff's layout: the code and a short title, the location, a code frame, and a
`help:` line saying why it matters and what to write instead:

    AMP003 `torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)` clips gradients that still carry the loss scale
     --> train.py:8:5
      |
    7 |     scaler.scale(loss).backward()
    8 |     torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
      |     ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^
    9 |     scaler.step(optimizer)
      |
    help: The loss scale is 65536 at start, so ...

`concise` is one line per finding, `path:row:col: CODE title`. `text` is the old name of
`full`, kept so that existing scripts go on working.

A function amplint could not follow within the analysis limit is listed after the findings as
a `note` (with `-q` too), and the summary line counts it, and the files that could not be
linted: never "All checks passed!" when something was left out.
"""

from __future__ import annotations

import re
import unicodedata
from collections import Counter
from typing import List, Optional, Tuple

from amplint.lint.diagnostics import Finding, NotAnalysed, RunReport
from amplint.run.notebook import CellMap
from amplint.escape import visible

# Python's own line breaks; str.splitlines() also splits on form feeds and \u2028, which
# would put the frame on the wrong line.
_LINE_BREAK = re.compile(r"\r\n|\r|\n")


class Style:
    def __init__(self, color: bool) -> None:
        self.color = color

    def _wrap(self, code: str, text: str) -> str:
        return f"\033[{code}m{text}\033[0m" if self.color else text

    def bold(self, text: str) -> str:
        return self._wrap("1", text)

    def red(self, text: str) -> str:
        return self._wrap("1;31", text)

    def yellow(self, text: str) -> str:
        return self._wrap("1;33", text)

    def blue(self, text: str) -> str:
        return self._wrap("1;34", text)

    def cyan(self, text: str) -> str:
        return self._wrap("1;36", text)

    def severity(self, finding: Finding, text: str) -> str:
        return self.yellow(text) if finding.severity == "warning" else self.red(text)


def location(finding: Finding) -> str:
    if finding.cell is not None:
        return f"{finding.path}:cell {finding.cell}:{finding.cell_row}:{finding.column}"
    return f"{finding.path}:{finding.row}:{finding.column}"


def render(report: RunReport, concise: bool = False, color: bool = False, summary: bool = True, **_: object) -> str:
    style = Style(color)
    out: List[str] = []
    for finding in report.findings:
        if concise:
            out.append(f"{style.bold(visible(location(finding)))}: {style.severity(finding, finding.code)} {_marker(finding, report, style)}{visible(finding.message)}")
        else:
            out.extend(_full(finding, report, style))
    for skipped in report.skipped_functions:
        out.extend(_not_analysed(skipped, style, concise))
    if summary:
        out.extend(_summary(report))
    return "\n".join(out) + "\n" if out else ""


def render_concise(report: RunReport, **options: object) -> str:
    return render(report, **{**options, "concise": True})


def render_full(report: RunReport, **options: object) -> str:
    return render(report, **{**options, "concise": False})


def _full(finding: Finding, report: RunReport, style: Style) -> List[str]:
    width, frame = _frame(finding, report.sources.get(finding.path), style, report.notebooks.get(finding.path))
    lines = [
        f"{style.severity(finding, finding.code)} {_marker(finding, report, style)}{style.bold(visible(finding.message))}",
        # The arrow lines up with the frame's gutter, as in ruff.
        f"{' ' * width}{style.blue('-->')} {visible(location(finding))}",
        *frame,
    ]
    if finding.help:
        lines.append(f"{style.cyan('help')}: {visible(finding.help)}")
    if finding.fix is not None:
        lines.append(f"{style.cyan('fix')}: {visible(finding.fix.title)}" + ("" if finding.fix.applicability == "safe" else " (unsafe)"))
    lines.append("")
    return lines


def _not_analysed(skipped: NotAnalysed, style: Style, concise: bool) -> List[str]:
    where = _where(skipped.path, skipped.row, skipped.column, skipped.cell, skipped.cell_row)
    if concise:
        return [f"{style.bold(where)}: {style.cyan('note')} {skipped.message}"]
    title = skipped.message.partition(" (")[0]
    return [
        f"{style.cyan('note')}: {style.bold(title)}",
        f" {style.blue('-->')} {where}",
        f"{style.cyan('help')}: raise the limit with `--analysis-limit FACTOR` (config: `analysis-limit`); it counts steps, the same on every machine",
        "",
    ]


def _where(path: str, row: int, column: int, cell: Optional[int], cell_row: Optional[int]) -> str:
    path = visible(path)
    return f"{path}:cell {cell}:{cell_row}:{column}" if cell is not None else f"{path}:{row}:{column}"


def _marker(finding: Finding, report: RunReport, style: Style) -> str:
    """ruff's `[*]`: `--fix` would fix this one."""
    return style.cyan("[*]") + " " if report.applicable(finding) else ""


def count_words(errors: int, warnings: int) -> str:
    """`2 errors`, `1 warning`, `2 errors and 1 warning`: findings by severity."""
    if not warnings:
        return _plural(errors, "error")
    if not errors:
        return _plural(warnings, "warning")
    return f"{_plural(errors, 'error')} and {_plural(warnings, 'warning')}"


def left_out(report: RunReport) -> List[str]:
    """What the run did not look at or could not do: functions not analysed, files that could
    not be linted (each counted once), files --fix could not write."""
    parts = []
    if report.skipped_functions:
        count = len(report.skipped_functions)
        parts.append(f"{count} function{'s' if count != 1 else ''} not analysed")
    # A file --fix could not write was linted: its findings stand, and it is counted apart.
    unwritten = {error.path for error in report.errors if error.message.startswith("not fixed")}
    unlinted = {error.path for error in report.errors if not error.message.startswith("not fixed")}
    if unlinted:
        parts.append(f"{len(unlinted)} file{'s' if len(unlinted) != 1 else ''} could not be linted")
    unwritten -= unlinted
    if unwritten:
        parts.append(f"{len(unwritten)} file{'s' if len(unwritten) != 1 else ''} not fixed")
    return parts


def _summary(report: RunReport) -> List[str]:
    count = len(report.findings)
    warnings = sum(1 for finding in report.findings if finding.severity == "warning")
    errors = count - warnings
    # `Found` counts what was found before fixing, as ruff does: what remains and what was fixed.
    found_errors = errors + report.fixed - report.fixed_warnings
    found_warnings = warnings + report.fixed_warnings
    missing = left_out(report)
    if not found_errors and not found_warnings:
        return [f"No findings, but {' and '.join(missing)}."] if missing else ["All checks passed!"]
    found = f"Found {count_words(found_errors, found_warnings)}"
    if report.fixed:
        found += f" ({report.fixed} fixed, {count} remaining)"
    lines = ["; ".join([found, *missing]) + "."]
    fixable = sum(1 for finding in report.findings if report.applicable(finding))
    hidden = sum(1 for finding in report.findings if finding.fix is not None and not report.applicable(finding))
    if fixable:
        lines.append(f"[*] {fixable} fixable with the `--fix` option" + (f" ({_plural(hidden, 'hidden fix')} can be enabled with the `--unsafe-fixes` option)." if hidden else "."))
    elif hidden:
        lines.append(f"No fixes available ({_plural(hidden, 'hidden fix')} can be enabled with the `--unsafe-fixes` option).")
    return lines


def _plural(count: int, noun: str) -> str:
    plural = noun + "es" if noun.endswith("fix") else noun + "s"
    return f"{count} {noun if count == 1 else plural}"


def _frame(
    finding: Finding, source: Optional[str], style: Style, cells: Optional[CellMap] = None
) -> Tuple[int, List[str]]:
    """The width of the line numbers, and the frame: the finding's line with one either side."""
    if source is None:
        return 1, []
    lines = _LINE_BREAK.split(source)
    if len(lines) > 1 and lines[-1] == "":
        lines.pop()  # the file's last line break starts no line
    if not 1 <= finding.row <= len(lines):
        return 1, []
    # A notebook's frame stays inside the finding's cell and counts rows as the cell does.
    cell = cells.cell_at(finding.row) if cells is not None else None
    top, bottom, offset = (cell.first_row, cell.last_row, cell.first_row - 1) if cell else (1, len(lines), 0)
    first = max(top, finding.row - 1)
    last = min(bottom, finding.row + 1)
    width = len(str(last - offset))
    gutter = style.blue(" " * width + " |")
    frame = [gutter]
    for number in range(first, last + 1):
        frame.append(f"{style.blue(str(number - offset).rjust(width) + ' |')} {visible(lines[number - 1])}")
        if number == finding.row:
            line = lines[number - 1]
            end = finding.end_column if finding.end_row == finding.row else len(line) + 1
            # Keep the line's tabs, and count wide (CJK, emoji) characters twice and an
            # escaped control character as its escape, so the carets sit under the code.
            pad = "".join(c if c == "\t" else " " * _width(c) for c in line[: finding.column - 1])
            carets = "^" * max(1, sum(_width(c) for c in line[finding.column - 1 : end - 1]))
            frame.append(f"{gutter} {pad}{style.severity(finding, carets)}")
    frame.append(gutter)
    return width, frame


def _width(character: str) -> int:
    shown = visible(character)
    if shown != character:
        return len(shown)
    return 2 if unicodedata.east_asian_width(character) in ("W", "F") else 1


def render_statistics(report: RunReport, **_: object) -> str:
    counts = Counter(finding.code for finding in report.findings)
    names = {finding.code: finding.name for finding in report.findings}
    fixable = {finding.code for finding in report.findings if report.applicable(finding)}
    width = max((len(str(n)) for n in counts.values()), default=1)
    lines = [
        f"{str(n).rjust(width)}\t{code}\t{'[*] ' if code in fixable else ''}{names[code]}" for code, n in sorted(counts.items())
    ]
    if report.skipped_functions:
        lines.append(f"{str(len(report.skipped_functions)).rjust(width)}\t-\tfunctions too complex to analyse (skipped)")
    return "\n".join(lines) + "\n" if lines else ""

