"""`amplint --add-noqa`: a `# noqa: CODE` on every line with a finding, as ruff's `--add-noqa`.

How a team adopts a linter on code that already has findings: the existing ones are marked,
new ones fail the gate. A line's own `# noqa: ...` gets the missing codes; a blanket `# noqa`
needs nothing. A line that cannot end in a comment (it ends inside a string that goes on, or
with a backslash) gets it where the string or statement ends, which is where amplint (and
ruff) look for it. A notebook is left alone and named in a note (its cells are JSON strings;
mark those in the editor, or with `# amplint: noqa` in a cell). Each file is written only
if it still parses as it did, and written back as --fix writes (`amplint.run.write_back`).
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from typing import Dict, List, Sequence

from amplint.lint.diagnostics import FileError, FileResult
from amplint.lint.noqa import UNUSED_NOQA, apply_line_edits, edits_adding_codes


@dataclass
class Added:
    directives: int = 0  # lines given a new directive or new codes
    files: int = 0
    notes: List[str] = field(default_factory=list)  # `path:row: why` for what was left alone
    errors: List[FileError] = field(default_factory=list)


def add_noqa(results: Sequence[FileResult], roots: Sequence[str] = (".",)) -> Added:
    """`roots`: the paths the user named (a symbolic link is written through only into them,
    as --fix does)."""
    from amplint.lint.fix_loop import FileFix, FixOutcome, write_fixed
    from amplint.run.notebook import is_notebook
    from amplint.run.source import decode_python, encode_like, read_file

    added = Added()
    for result in results:
        # An unused directive is not silenced by another one: it is for the user to remove.
        rows: Dict[int, List[str]] = {}
        for finding in result.findings:
            if finding.code != UNUSED_NOQA:
                rows.setdefault(finding.row, []).append(finding.code)
        if result.error is not None or not rows:
            continue
        if is_notebook(result.path):
            added.notes.append(f"{result.path}: no `# noqa` added: notebooks are not edited by --add-noqa")
            continue
        data = read_file(result.path)  # only a regular file, never past the size limit
        if isinstance(data, FileError):
            added.errors.append(FileError(result.path, f"no `# noqa` added: {data.message}"))
            continue
        source = decode_python(data, result.path)
        if isinstance(source, FileError):
            added.errors.append(FileError(result.path, f"no `# noqa` added: {source.message}"))
            continue
        if result.source is not None and source != result.source:
            # The rows are the lint's: on other text they would mark other lines.
            added.errors.append(FileError(result.path, "no `# noqa` added: the file changed while amplint ran"))
            continue
        edits, impossible = edits_adding_codes(source, rows)
        for row in impossible:
            added.notes.append(f"{result.path}:{row}: no `# noqa` added: the file cannot be tokenized line by line (a lone carriage return?)")
        if not edits:
            continue
        text = apply_line_edits(source, edits)
        if _parses(source) and not _parses(text):  # a safety net: never break a file
            added.notes.append(f"{result.path}: no `# noqa` added: the file would no longer parse")
            continue
        try:
            fixed = encode_like(text, data)
        except (UnicodeEncodeError, LookupError, SyntaxError) as error:
            added.errors.append(FileError(result.path, f"no `# noqa` added: cannot encode the result ({error})"))
            continue
        problem = write_fixed(FileFix(result.path, data, fixed, FixOutcome(text)), roots)
        if problem is not None:
            added.errors.append(FileError(result.path, problem.replace("not fixed", "no `# noqa` added", 1)))
            continue
        added.directives += len(edits)
        added.files += 1
    return added


def _parses(source: str) -> bool:
    try:
        ast.parse(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return False
    return True
