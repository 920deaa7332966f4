"""`# noqa` suppression, read from real comments (tokenize), never from string contents.

- `# noqa` on the reported line suppresses every amplint finding there;
- `# noqa: AMP001, AMP003` suppresses those codes (other tools' codes are ignored);
- `# amplint: noqa` on a line of its own exempts the whole file, `# amplint: noqa: AMP002`
  exempts the file from those codes (after code on a line, it covers that line only);
- as in ruff, a line that cannot end in a comment (it ends inside a string that goes on, or
  with a backslash) takes its directive where the string or the statement ends.

Each directive remembers which codes it suppressed, so that `unused_directives` can say,
as ruff's RUF100 does, which `AMPxxx` codes in a comment suppressed nothing and which are
no amplint rule at all. Codes of other tools (`E501`) and a plain `# noqa` (which flake8,
ruff and pylint read too) are never reported: only amplint's own prefix is ours to judge.
"""

from __future__ import annotations

import io
import os
import re
import tokenize
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Collection, Dict, Iterator, List, Mapping, Optional, Sequence, Set, Tuple

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
    # Rows whose `# noqa` goes on a later row: the lines of a string that goes on, and a line
    # continued with a backslash, take their directive where the string or statement ends.
    noqa_rows: Dict[int, int] = field(default_factory=dict)

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
        rows = {row, self.noqa_rows.get(row, row)}
        yield from (d for d in self.directives if not d.file_level and d.row in rows)
        yield from (d for d in self.directives if d.file_level)


# `--ignore-noqa`: every directive is ignored, so every finding is shown (and none is
# reported unused). An environment variable, so that the run's worker processes, forked or
# spawned, see it as the command does.
ENV_IGNORE_NOQA = "AMPLINT_IGNORE_NOQA"


def ignoring_directives() -> bool:
    return os.environ.get(ENV_IGNORE_NOQA) == "1"


@contextmanager
def directives_ignored(ignore: bool) -> Iterator[None]:
    """For the duration of a run: `# noqa` comments suppress nothing when `ignore`."""
    before = os.environ.get(ENV_IGNORE_NOQA)
    if ignore:
        os.environ[ENV_IGNORE_NOQA] = "1"
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(ENV_IGNORE_NOQA, None)
        else:
            os.environ[ENV_IGNORE_NOQA] = before


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
    if not might_have_directives(source) or ignoring_directives():
        return found
    try:
        tokens = list(tokenize.generate_tokens(io.StringIO(source).readline))
    except (tokenize.TokenError, IndentationError, SyntaxError):
        return found
    found.noqa_rows = noqa_rows(tokens, source.split("\n"))
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


# f-strings (3.12+) and t-strings (3.14+) come as several tokens: their start and end.
_FSTRING_START = {getattr(tokenize, name, -1) for name in ("FSTRING_START", "TSTRING_START")}
_FSTRING_END = {getattr(tokenize, name, -1) for name in ("FSTRING_END", "TSTRING_END")}


def noqa_rows(tokens: Sequence[tokenize.TokenInfo], lines: Sequence[str]) -> Dict[int, int]:
    """Where the `# noqa` of a row goes when no comment can end the row itself (ruff's rule):
    a row inside a string that goes on (a triple-quoted string, an f-string's braces), to the
    row where the string ends; a row continued by a backslash, to where the statement ends."""
    target: Dict[int, int] = {}
    comments: Set[int] = set()
    fstrings: List[int] = []  # rows where the f-strings still open began
    for token in tokens:
        if token.type == tokenize.COMMENT:
            comments.add(token.start[0])
        elif token.start[0] < token.end[0] and token.type not in (tokenize.NEWLINE, tokenize.NL):
            target.update((row, token.end[0]) for row in range(token.start[0], token.end[0]))
        elif token.type in _FSTRING_START:
            fstrings.append(token.start[0])
        elif token.type in _FSTRING_END and fstrings:
            # A comment inside an f-string's braces is an error before Python 3.12.
            target.update((row, token.end[0]) for row in range(fstrings.pop(), token.end[0]))
    for row, line in enumerate(lines, 1):
        if row not in target and row not in comments and line.rstrip("\r").endswith("\\"):
            target[row] = row + 1
    final = {}
    for row in target:
        end = row
        while end in target and target[end] > end:
            end = target[end]
        final[row] = end
    return final


@dataclass(frozen=True)
class UnusedDirective:
    """A directive that suppressed nothing, or names codes no amplint rule has."""

    directive: Directive
    unused: Tuple[str, ...]
    unknown: Tuple[str, ...]
    title: str
    help: str

    @property
    def fix_title(self) -> str:
        remaining = [c for c in self.directive.codes if c not in self.unused + self.unknown]
        if remaining:
            return f"Remove {_codes(self.unused + self.unknown)} from the directive"
        return f"Remove the unused `{self.directive.spelled}` directive"

    def fixed_line(self, line: str) -> Optional[str]:
        """The directive's line (without its line ending) as ruff's RUF100 fix leaves it: the
        unused and unknown codes taken out of the comment, or the whole directive when it names
        nothing else (other tools' codes stay); None when the line held only the directive and
        goes. Any other text of the comment is kept, as a comment."""
        directive = self.directive
        start, end = directive.column - 1, directive.end_column - 1
        drop = set(self.unused + self.unknown)
        match = (_FILE if directive.amplint_only else _LINE).match(line, start, end)
        if match is None:  # not the line the directive was read from
            return line
        if match.group("codes") is not None:
            kept = [c for c in re.split(r"[\s,]+", match.group("codes")) if c and c.upper() not in drop]
            if kept:
                return line[: match.start("codes")] + ", ".join(kept) + line[end:]
        before, after = line[:start], line[end:].lstrip()
        if after:  # more comment text: it stays a comment
            return before + (after if after.startswith("#") else "# " + after)
        return before.rstrip() or None


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


def unused_edit(source: str, unused: UnusedDirective) -> Optional[Tuple[int, int, int, int, str]]:
    """The fix of `unused` as a text edit of `source` (row, column, end row, end column, new
    text; 1-based, the end exclusive): its whole line rewritten, as other fixes' edits are."""
    if "\r" in source.replace("\r\n", ""):
        return None
    lines = source.split("\n")
    row = unused.directive.row
    if not 1 <= row <= len(lines):
        return None
    body = lines[row - 1].rstrip("\r")
    fixed = unused.fixed_line(body)
    if row < len(lines):
        return (row, 1, row + 1, 1, "" if fixed is None else fixed + lines[row - 1][len(body) :] + "\n")
    return (row, 1, row, len(body) + 1, fixed or "")


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
    """The edit that makes `row` suppress `code` (`edits_adding_codes`); None when the line
    already suppresses it, or when the source cannot take one."""
    edits, _ = edits_adding_codes(source, {row: [code]})
    return edits[0] if edits else None


def edits_adding_codes(source: str, codes_by_row: Mapping[int, Sequence[str]]) -> Tuple[List[LineEdit], List[int]]:
    """The edits that make each row suppress its codes (`--add-noqa`, the editor's "disable
    for this line"), tokenizing the source once: a new `  # noqa: A, B` at the end of the
    line, or the missing codes added to the line's own `# noqa: ...` directive (other text in
    the comment is kept). Rows a blanket `# noqa` already covers need no edit. A row that
    cannot end in a comment (inside a string that goes on, or continued by a backslash) gets
    its directive where the string or statement ends, as in ruff (`noqa_rows`).

    Also the rows that cannot be given one: the source does not tokenize, or has a lone
    carriage return (a line break for the parser that reported the rows, not for the
    tokenizer, so the rows could be off)."""
    wanted = {row: [code.upper() for code in codes] for row, codes in codes_by_row.items() if codes}
    lines = source.split("\n")
    if "\r" in source.replace("\r\n", ""):
        return [], sorted(wanted)
    try:
        tokens = list(tokenize.generate_tokens(io.StringIO(source).readline))
    except (tokenize.TokenError, IndentationError, SyntaxError):
        return [], sorted(wanted)
    moved = noqa_rows(tokens, lines)
    by_row: Dict[int, List[str]] = {}
    impossible = []
    for row, codes in sorted(wanted.items()):
        if not 1 <= row <= len(lines):
            impossible.append(row)
            continue
        by_row.setdefault(moved.get(row, row), []).extend(codes)
    comments = {token.start[0]: token for token in tokens if token.type == tokenize.COMMENT}
    edits = []
    for row, codes in sorted(by_row.items()):
        codes = list(dict.fromkeys(codes))
        line = lines[row - 1].rstrip("\r")
        comment = comments.get(row)
        match = None
        if comment is not None:
            match = _FILE.search(comment.string) or _LINE.search(comment.string)
        if match is not None:
            if match.group("codes") is None:
                continue  # a blanket `# noqa` already covers every code
            present = {c.upper() for c in re.split(r"[\s,]+", match.group("codes")) if c}
            missing = [code for code in codes if code not in present]
            if missing:
                at = comment.start[1] + match.end("codes")
                edits.append(LineEdit(row, at, at, "".join(f", {code}" for code in missing)))
            continue
        content = line.rstrip()
        edits.append(LineEdit(row, len(content), len(line), f"  # noqa: {', '.join(codes)}"))
    return edits, impossible


def apply_line_edits(source: str, edits: Sequence[LineEdit]) -> str:
    """`source` with `edits` (at most one per row) applied; line endings are kept."""
    lines = source.split("\n")
    for edit in edits:
        line = lines[edit.row - 1]
        ending = "\r" if line.endswith("\r") else ""
        body = line[: len(line) - len(ending)]
        lines[edit.row - 1] = body[: edit.start] + edit.text + body[edit.end :] + ending
    return "\n".join(lines)
