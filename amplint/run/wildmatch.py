"""git's `wildmatch` (wildmatch.c), ported to regular expressions over bytes.

`translate` turns one pattern into a regular expression for `fullmatch`, so non-UTF-8 names
match as git matches them. The ignore rules (`amplint.run.gitignore`) and the `includeIf
"gitdir:"` conditions of git's config (`amplint.run.gitconfig`) both match with it.
"""

from __future__ import annotations

import re
from typing import Iterable, List, Optional, Tuple

_CLASSES = {
    b"alnum": lambda c: chr(c).isalnum(),
    b"alpha": lambda c: chr(c).isalpha(),
    b"blank": lambda c: c in (0x20, 0x09),
    b"cntrl": lambda c: c < 0x20 or c == 0x7F,
    b"digit": lambda c: 0x30 <= c <= 0x39,
    b"graph": lambda c: 0x21 <= c <= 0x7E,
    b"lower": lambda c: 0x61 <= c <= 0x7A,
    b"print": lambda c: 0x20 <= c <= 0x7E,
    b"punct": lambda c: 0x21 <= c <= 0x7E and not chr(c).isalnum(),
    b"space": lambda c: c in (0x20, 0x09, 0x0A, 0x0B, 0x0C, 0x0D),
    b"upper": lambda c: 0x41 <= c <= 0x5A,
    b"xdigit": lambda c: chr(c) in "0123456789abcdefABCDEF",
}
_SLASH = ord("/")


class Malformed(Exception):
    """A pattern wildmatch aborts on: it can never match (git), or is a usage error (ours)."""


def lower(c: int) -> int:
    return c + 32 if 0x41 <= c <= 0x5A else c


def _bracket(p: bytes, i: int, casefold: bool) -> Tuple[List[int], int, Optional[str]]:
    """The bytes one `[...]` at p[i] matches, the index after its `]`, and a remark for users.

    A port of wildmatch.c's bracket loop, run once for every possible text byte, so that
    every quirk is kept: `[z-a]` matches `z` (the `z` is read before the range is seen),
    `[]a]` and `[!]a]` contain `]`, `[[:alpha]` is a plain set, an unknown `[:class:]`
    aborts.
    """
    remark: Optional[str] = None
    members: List[int] = []
    end = -1
    for t in range(1, 256):
        t_ch = lower(t) if casefold else t
        j = i + 1
        p_ch = p[j] if j < len(p) else 0
        if p_ch == ord("^"):
            p_ch = ord("!")
        negated = p_ch == ord("!")
        if negated:
            j += 1
            p_ch = p[j] if j < len(p) else 0
        prev_ch = 0
        matched = False
        while True:
            if not p_ch:
                raise Malformed("unclosed `[`")
            if p_ch == ord("\\"):
                j += 1
                p_ch = p[j] if j < len(p) else 0
                if not p_ch:
                    raise Malformed("unclosed `[`")
                if t_ch == p_ch:
                    matched = True
            elif p_ch == ord("-") and prev_ch and j + 1 < len(p) and p[j + 1] != ord("]"):
                j += 1
                p_ch = p[j]
                if p_ch == ord("\\"):
                    j += 1
                    p_ch = p[j] if j < len(p) else 0
                    if not p_ch:
                        raise Malformed("unclosed `[`")
                if prev_ch <= t_ch <= p_ch:
                    matched = True
                elif casefold and 0x61 <= t_ch <= 0x7A and prev_ch <= t_ch - 32 <= p_ch:
                    matched = True
                if prev_ch > p_ch and remark is None:
                    remark = f"character range `{chr(prev_ch)}-{chr(p_ch)}` is reversed"
                p_ch = 0
            elif p_ch == ord("[") and j + 1 < len(p) and p[j + 1] == ord(":"):
                j += 2
                s = j
                while j < len(p) and p[j] != ord("]"):
                    j += 1
                if j >= len(p):
                    raise Malformed("unclosed `[`")
                if j - s - 1 < 0 or p[j - 1] != ord(":"):
                    # No `:]`: an ordinary `[` in the set.
                    j = s - 2
                    p_ch = ord("[")
                    if t_ch == p_ch:
                        matched = True
                    prev_ch = p_ch
                    j += 1
                    p_ch = p[j] if j < len(p) else 0
                    if p_ch == ord("]"):
                        break
                    continue
                name = p[s : j - 1]
                test = _CLASSES.get(name)
                if test is None:
                    raise Malformed(f"unknown character class `[:{name.decode('latin-1')}:]`")
                if (t_ch < 0x80 and test(t_ch)) or (name == b"upper" and casefold and 0x61 <= t_ch <= 0x7A):
                    matched = True
                p_ch = 0
            elif t_ch == p_ch:
                matched = True
            prev_ch = p_ch
            j += 1
            p_ch = p[j] if j < len(p) else 0
            if p_ch == ord("]"):
                break
        if matched != negated:
            members.append(t)
        end = j + 1
    return members, end, remark


def _byte_class(members: Iterable[int]) -> bytes:
    chosen = sorted(set(members))
    if not chosen:
        return rb"(?!)"
    return b"[" + b"".join(b"\\x%02x" % c for c in chosen) + b"]"


def literal(c: int, casefold: bool) -> bytes:
    """The text bytes equal to pattern byte `c`.

    Under core.ignoreCase wildmatch lowers an upper-case text byte and an upper-case pattern
    byte, but not the byte after a backslash: there `\\A` matches nothing at all.
    """
    if not casefold:
        return re.escape(bytes([c]))
    return _byte_class(t for t in range(1, 256) if lower(t) == c)


def translate(pattern: bytes, pathname: bool = True, casefold: bool = False) -> Tuple[bytes, Optional[str]]:
    """A regular expression (for `fullmatch`) equivalent to wildmatch(pattern, text, flags).

    `pathname` is WM_PATHNAME (`*` and `?` stop at `/`, `**` spans directories). Raises
    Malformed for a pattern wildmatch aborts on. The second value is a remark about a
    pattern that is valid for git but surely not what its author meant (a reversed range).
    """
    out: List[bytes] = []
    remark: Optional[str] = None
    i, n = 0, len(pattern)
    while i < n:
        c = pattern[i]
        if c == ord("\\"):
            if i + 1 >= n:
                raise Malformed("ends with a lone `\\`")
            # The escaped byte is compared as written, not lowered (see literal).
            out.append(literal(pattern[i + 1], casefold))
            i += 2
        elif c == ord("?"):
            out.append(rb"[^/]" if pathname else rb".")
            i += 1
        elif c == ord("*"):
            j = i
            while j < n and pattern[j] == ord("*"):
                j += 1
            double = j - i >= 2
            if not pathname:
                out.append(rb".*")
            elif double and (i == 0 or pattern[i - 1] == _SLASH) and (
                j == n or pattern[j] == _SLASH or pattern[j : j + 2] == b"\\/"
            ):
                if j < n and pattern[j] == _SLASH:
                    out.append(rb"(?:.*/)?")  # `**/`: no directory, or any number of them
                    j += 1
                else:
                    out.append(rb".*")
            else:
                out.append(rb"[^/]*")
            i = j
        elif c == ord("["):
            members, i, bracket_remark = _bracket(pattern, i, casefold)
            remark = remark or bracket_remark
            if pathname:
                members = [m for m in members if m != _SLASH]
            out.append(_byte_class(members))
        else:
            out.append(literal(lower(c) if casefold else c, casefold))
            i += 1
    return b"".join(out), remark
