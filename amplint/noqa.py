"""`# noqa` suppression, read from real comments (tokenize), never from string contents.

- `# noqa` on the reported line suppresses every amplint finding there;
- `# noqa: AMP001, AMP003` suppresses those codes (other tools' codes are ignored);
- `# amplint: noqa` on a line of its own exempts the whole file, `# amplint: noqa: AMP002`
  exempts the file from those codes (after code on a line, it covers that line only).
"""

from __future__ import annotations

import io
import re
import tokenize
from dataclasses import dataclass, field
from typing import Dict, FrozenSet, Optional

_LINE = re.compile(r"#\s*noqa(?::\s*(?P<codes>[A-Z]+[0-9]+(?:[\s,]+[A-Z]+[0-9]+)*))?", re.IGNORECASE)
_FILE = re.compile(r"#\s*amplint:\s*noqa(?::\s*(?P<codes>[A-Z]+[0-9]+(?:[\s,]+[A-Z]+[0-9]+)*))?", re.IGNORECASE)
ALL: FrozenSet[str] = frozenset({"*"})


def _codes(text: Optional[str]) -> FrozenSet[str]:
    if not text:
        return ALL
    return frozenset(code.upper() for code in re.split(r"[\s,]+", text.strip()) if code)


@dataclass
class Suppressions:
    lines: Dict[int, FrozenSet[str]] = field(default_factory=dict)
    file: FrozenSet[str] = frozenset()

    def suppresses(self, row: int, code: str) -> bool:
        for codes in (self.file, self.lines.get(row, frozenset())):
            if codes == ALL or code in codes:
                return True
        return False


def parse_suppressions(source: str) -> Suppressions:
    found = Suppressions()
    try:
        tokens = list(tokenize.generate_tokens(io.StringIO(source).readline))
    except (tokenize.TokenError, IndentationError, SyntaxError):
        return found
    for token in tokens:
        if token.type != tokenize.COMMENT:
            continue
        file_match = _FILE.search(token.string)
        if file_match and token.line.strip().startswith("#"):
            codes = _codes(file_match.group("codes"))
            found.file = ALL if ALL in (codes, found.file) else found.file | codes
            continue
        # After code, `# amplint: noqa` means what `# noqa` means there: this line only.
        match = file_match or _LINE.search(token.string)
        if match:
            found.lines[token.start[0]] = _codes(match.group("codes"))
    return found
