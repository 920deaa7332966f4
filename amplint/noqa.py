"""`# noqa` suppression, read from real comments (tokenize), never from string contents.

- `# noqa` on the reported line suppresses every amplint finding there;
- `# noqa: AMP001, AMP003` suppresses those codes (other tools' codes are ignored);
- `# amplint: noqa` on a line of its own exempts the whole file, `# amplint: noqa: AMP002`
  exempts the file from those codes (after code on a line, it covers that line only).

Each directive remembers which codes it suppressed, so that `unused_directives` can say,
as ruff's RUF100 does, which `AMPxxx` codes in a comment suppressed nothing and which are
no amplint rule at all. Codes of other tools (`E501`) and a plain `# noqa` (which flake8,
ruff and pylint read too) are never reported: only amplint's own prefix is ours to judge.
"""

from __future__ import annotations

import io
import re
import tokenize
from dataclasses import dataclass, field
from typing import Collection, Iterator, List, Optional, Set, Tuple

_CODES = r"(?::\s*(?P<codes>[A-Z]+[0-9]+(?:[\s,]+[A-Z]+[0-9]+)*))?"
_LINE = re.compile(r"#\s*noqa" + _CODES, re.IGNORECASE)
_FILE = re.compile(r"#\s*amplint:\s*noqa" + _CODES, re.IGNORECASE)
# What looks like one of amplint's codes: the only ones an unknown code is reported for.
_AMPLINT_CODE = re.compile(r"AMP[0-9]+")
# The unused-noqa check's own code: suppressed only where a directive names it.
UNUSED_NOQA = "AMP100"


@dataclass
class Directive:
    """One `# noqa` or `# amplint: noqa` comment."""

    row: int  # 1-based
    column: int  # 1-based, where `#` starts
    end_column: int  # exclusive
    codes: Tuple[str, ...]  # upper-cased, as written; empty: every code
    file_level: bool  # `# amplint: noqa` on a line of its own
    amplint_only: bool  # spelled `# amplint: noqa` (a plain `# noqa` belongs to every linter)
    used: Set[str] = field(default_factory=set)

    @property
    def blanket(self) -> bool:
        return not self.codes

    def covers(self, code: str) -> bool:
        # Only a directive that names AMP100 silences it (`# noqa: AMP003, AMP100`): a blanket
        # one would otherwise hide the report that it is itself stale.
        if code == UNUSED_NOQA:
            return code in self.codes
        return self.blanket or code in self.codes

    @property
    def spelled(self) -> str:
        prefix = "amplint: noqa" if self.amplint_only else "noqa"
        return f"# {prefix}: {', '.join(self.codes)}" if self.codes else f"# {prefix}"


@dataclass
class Suppressions:
    directives: List[Directive] = field(default_factory=list)

    def suppresses(self, row: int, code: str) -> bool:
        """Whether a finding of `code` on `row` is suppressed; the directive that does it is
        marked as used."""
        for directive in self._covering(row):
            if directive.covers(code):
                directive.used.add(code)
                return True
        return False

    def _covering(self, row: int) -> Iterator[Directive]:
        # The line's own directive first: a file-wide one it duplicates is then the unused one.
        yield from (d for d in self.directives if not d.file_level and d.row == row)
        yield from (d for d in self.directives if d.file_level)


def might_have_directives(source: str) -> bool:
    return "noqa" in source or "NOQA" in source.upper()


# What the unused-noqa check can report where no rule found anything: a directive naming an
# `AMPxxx` code, or a `# amplint: noqa`. A plain `# noqa` or `# noqa: E501` is never ours.
_REPORTABLE = re.compile(r"noqa:[^\n]*amp|amplint:\s*noqa", re.IGNORECASE)


def might_have_reportable_directives(source: str) -> bool:
    """Whether, in a file with no findings, `unused_directives` may have anything to say:
    most files with a `# noqa` are not tokenized at all."""
    return might_have_directives(source) and _REPORTABLE.search(source) is not None


def parse_suppressions(source: str) -> Suppressions:
    found = Suppressions()
    if not might_have_directives(source):
        return found
    try:
        tokens = list(tokenize.generate_tokens(io.StringIO(source).readline))
    except (tokenize.TokenError, IndentationError, SyntaxError):
        return found
    for token in tokens:
        if token.type != tokenize.COMMENT:
            continue
        file_match = _FILE.search(token.string)
        # After code, `# amplint: noqa` means what `# noqa` means there: this line only.
        match = file_match or _LINE.search(token.string)
        if not match:
            continue
        row, column = token.start
        codes = tuple(dict.fromkeys(c.upper() for c in re.split(r"[\s,]+", match.group("codes") or "") if c))
        found.directives.append(
            Directive(
                row=row,
                column=column + match.start() + 1,
                end_column=column + match.end() + 1,
                codes=codes,
                file_level=bool(file_match) and token.line.strip().startswith("#"),
                amplint_only=bool(file_match),
            )
        )
    return found


@dataclass(frozen=True)
class UnusedDirective:
    """A directive that suppressed nothing, or names codes no amplint rule has."""

    directive: Directive
    unused: Tuple[str, ...]
    unknown: Tuple[str, ...]
    title: str
    help: str


def unused_directives(
    suppressions: Suppressions, ran: Collection[str], known: Collection[str]
) -> List[UnusedDirective]:
    """Directives with codes that suppressed nothing, and with `AMPxxx` codes no rule has.

    `ran`: the codes whose rules ran on this file; a code that did not run (deselected, or
    per-file ignored) cannot be judged and is left alone. `known`: every rule code.
    """
    every_rule_ran = all(code in ran for code in known if code != UNUSED_NOQA)
    reports = []
    for directive in suppressions.directives:
        unknown = tuple(c for c in directive.codes if _AMPLINT_CODE.fullmatch(c) and c not in known)
        unused = tuple(
            c
            for c in directive.codes
            if c in known and c in ran and c != UNUSED_NOQA and c not in directive.used
        )
        # A blanket `# amplint: noqa` is ours alone, and judged only when every rule ran.
        unused_blanket = (
            directive.blanket and directive.amplint_only and every_rule_ran and not directive.used
        )
        if unknown or unused or unused_blanket:
            title, help = _describe(directive, unused, unknown)
            reports.append(UnusedDirective(directive, unused, unknown, title, help))
    return reports


def _describe(directive: Directive, unused: Tuple[str, ...], unknown: Tuple[str, ...]) -> Tuple[str, str]:
    where = "in this file" if directive.file_level else "on this line"
    if directive.blanket:
        return (
            f"Unused blanket `{directive.spelled}` directive",
            f"No amplint finding {where} is suppressed by it: remove the comment.",
        )
    parts = []
    if unused:
        parts.append("unused: " + ", ".join(f"`{c}`" for c in unused))
    if unknown:
        parts.append("unknown: " + ", ".join(f"`{c}`" for c in unknown))
    title = f"Unused `noqa` directive ({'; '.join(parts)})"
    advice = []
    if unused:
        advice.append(f"amplint reports no {_codes(unused)} finding {where}")
    if unknown:
        advice.append(f"{_codes(unknown)} {'is' if len(unknown) == 1 else 'are'} no amplint rule (see `amplint rule --all`)")
    remaining = [c for c in directive.codes if c not in unused and c not in unknown]
    fix = f"remove {_codes(unused + unknown)} from the comment" if remaining else "remove the comment"
    return title, "; ".join(advice) + f": {fix}."


def _codes(codes: Tuple[str, ...]) -> str:
    return ", ".join(f"`{c}`" for c in codes)


@dataclass(frozen=True)
class LineEdit:
    """Replace columns `start`..`end` (0-based, in characters) of line `row` (1-based)."""

    row: int
    start: int
    end: int
    text: str


def edit_adding_code(source: str, row: int, code: str) -> Optional[LineEdit]:
    """The edit that makes `row` suppress `code`: a `  # noqa: CODE` at the end of the line,
    or `, CODE` added to the line's `# noqa: ...` directive. None when the line already
    suppresses it, or when no comment can end that line (it ends inside a string that goes
    on, or after a backslash continuation)."""
    lines = source.splitlines(keepends=False)
    if not 1 <= row <= len(lines):
        return None
    line = lines[row - 1]
    try:
        tokens = list(tokenize.generate_tokens(io.StringIO(source).readline))
    except (tokenize.TokenError, IndentationError, SyntaxError):
        return None
    for token in tokens:
        if token.start[0] <= row < token.end[0]:
            return None  # a string (or f-string) that goes on past this line
    if line.rstrip().endswith("\\"):
        return None
    for token in tokens:
        if token.type != tokenize.COMMENT or token.start[0] != row:
            continue
        file_match = _FILE.search(token.string)
        match = file_match or _LINE.search(token.string)
        if match is None:
            continue
        if match.group("codes") is None:
            return None  # a blanket `# noqa` already covers every code
        codes = {c.upper() for c in re.split(r"[\s,]+", match.group("codes")) if c}
        if code in codes:
            return None
        at = token.start[1] + match.end("codes")
        return LineEdit(row, at, at, f", {code}")
    content = line.rstrip()
    return LineEdit(row, len(content), len(line), f"  # noqa: {code}")
