"""Text from the linted tree (file names, quoted code) made safe to write where people read it.

A repository controls its file names and the code that messages quote. Written as they are,
an ESC or BEL clears the screen or retitles the terminal, a carriage return or a newline starts
a line the repository wrote (in a GitHub Actions log, `::error …::` or `::add-mask::` at the
start of a line is a workflow command), a bidi override reorders what is read, and a file name
that is not UTF-8 (decoded with surrogate escapes) cannot be encoded at all.

`visible` writes every such character as an escape, the way git and ruff quote odd paths:
`\\n`, `\\r`, `\\x1b`, `\\x7f`, `\\x85`, `\\u202e`, and a byte of a non-UTF-8 name as `\\xff`.
Tab stays (it only moves right, and code frames keep it so carets line up). Backslashes are
not doubled, so quoted code reads as written: the escape is for safety, not a reversible
encoding. What `visible` returns is also valid XML 1.0 character data.

`unicode_safe` replaces only what cannot be encoded as UTF-8 (lone surrogates), for JSON
reports whose paths must otherwise stay exact (GitLab).

Machine formats that carry the real path (json, json-lines, sarif) use neither.
"""

from __future__ import annotations

import re

# C0 controls but tab, DEL and C1 controls (NEL, CSI, …), the bidirectional formatting
# characters (Trojan Source), the Unicode line and paragraph separators, lone surrogates,
# and the noncharacters U+FFFE/U+FFFF (not allowed in XML).
_UNSAFE = re.compile(
    "[\x00-\x08\x0a-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028-\u202e\u2066-\u2069\ud800-\udfff\ufffe\uffff]"
)
_SURROGATE = re.compile("[\ud800-\udfff]")
_NAMED = {"\n": "\\n", "\r": "\\r"}


def _escape(match: "re.Match[str]") -> str:
    character = match.group()
    if character in _NAMED:
        return _NAMED[character]
    point = ord(character)
    if 0xDC80 <= point <= 0xDCFF:  # a byte of a name that is not UTF-8 (surrogateescape)
        return f"\\x{point - 0xDC00:02x}"
    if point <= 0xFF:
        return f"\\x{point:02x}"
    return f"\\u{point:04x}"


def visible(text: str) -> str:
    """`text` with every character that could act on a terminal or a log written as an escape."""
    return _UNSAFE.sub(_escape, text)


def unicode_safe(text: str) -> str:
    """`text` with lone surrogates (a non-UTF-8 name's bytes) written as escapes: encodable as UTF-8."""
    return _SURROGATE.sub(_escape, text)
