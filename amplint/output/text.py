"""`--output-format text`: `path:row:col: CODE message`, with a code frame unless --concise."""

from __future__ import annotations

import re
import unicodedata
from collections import Counter
from typing import List, Optional

from amplint.diagnostics import Finding, RunReport
from amplint.notebook import CellMap

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

    def blue(self, text: str) -> str:
        return self._wrap("1;34", text)


def location(finding: Finding) -> str:
    if finding.cell is not None:
        return f"{finding.path}:cell {finding.cell}:{finding.cell_row}:{finding.column}"
    return f"{finding.path}:{finding.row}:{finding.column}"


def render(report: RunReport, concise: bool = False, color: bool = False, summary: bool = True, **_: object) -> str:
    style = Style(color)
    out: List[str] = []
    for finding in report.findings:
        out.append(f"{style.bold(location(finding))}: {style.red(finding.code)} {finding.message}")
        if not concise:
            out.extend(_frame(finding, report.sources.get(finding.path), style, report.notebooks.get(finding.path)))
    count = len(report.findings)
    if summary and count:
        out.append(f"Found {count} error{'s' if count != 1 else ''}.")
    elif summary and not report.errors:
        out.append("All checks passed!")
    return "\n".join(out) + "\n" if out else ""


def _frame(finding: Finding, source: Optional[str], style: Style, cells: Optional[CellMap] = None) -> List[str]:
    if source is None:
        return []
    lines = _LINE_BREAK.split(source)
    if not 1 <= finding.row <= len(lines):
        return []
    # A notebook's frame stays inside the finding's cell and counts rows as the cell does.
    cell = cells.cell_at(finding.row) if cells is not None else None
    top, bottom, offset = (cell.first_row, cell.last_row, cell.first_row - 1) if cell else (1, len(lines), 0)
    first = max(top, finding.row - 1)
    last = min(bottom, finding.row + 1)
    width = len(str(last - offset))
    gutter = style.blue(" " * width + " |")
    frame = [gutter]
    for number in range(first, last + 1):
        frame.append(f"{style.blue(str(number - offset).rjust(width) + ' |')} {lines[number - 1]}")
        if number == finding.row:
            line = lines[number - 1]
            end = finding.end_column if finding.end_row == finding.row else len(line) + 1
            # Keep the line's tabs, and count wide (CJK, emoji) characters twice, so the
            # carets sit under the code.
            pad = "".join(c if c == "\t" else " " * _width(c) for c in line[: finding.column - 1])
            carets = "^" * max(1, sum(_width(c) for c in line[finding.column - 1 : end - 1]))
            frame.append(f"{gutter} {pad}{style.red(carets + ' ' + finding.code)}")
    frame.append(gutter)
    frame.append("")
    return frame


def _width(character: str) -> int:
    return 2 if unicodedata.east_asian_width(character) in ("W", "F") else 1


def render_statistics(report: RunReport, **_: object) -> str:
    counts = Counter(finding.code for finding in report.findings)
    names = {finding.code: finding.name for finding in report.findings}
    width = max((len(str(n)) for n in counts.values()), default=1)
    lines = [f"{str(n).rjust(width)}\t{code}\t{names[code]}" for code, n in sorted(counts.items())]
    if report.skipped_functions:
        lines.append(f"{str(len(report.skipped_functions)).rjust(width)}\t-\tfunctions too complex to analyse (skipped)")
    return "\n".join(lines) + "\n" if lines else ""

