"""How a finding's title quotes code: on one line, and elided when long, as ruff does.

A title names the code it is about (`` `torch.optim.AdamW(params, lr=…)` ``); the code frame
and the location show the rest. A quoted span longer than `LIMIT` characters is shortened:
a call to its callee and `(...)` (`` `optimizer_class(...)` ``), anything else to its first
characters and `...`. Shorter spans are kept as written.
"""

from __future__ import annotations

import re
from typing import Optional

LIMIT = 60
_SPAN = re.compile(r"`([^`\n]*)`")
_LINE_BREAKS = re.compile(r"\s*[\r\n]+\s*")


def bounded(title: str) -> str:
    """`title` on one line, each quoted code span at most `LIMIT` characters."""
    title = _LINE_BREAKS.sub(" ", title).strip()
    return _SPAN.sub(lambda match: f"`{elide(match.group(1))}`", title)


def elide(code: str) -> str:
    if len(code) <= LIMIT:
        return code
    opening = _final_call(code)
    if opening is not None and opening + len("(...)") <= LIMIT:
        return code[:opening] + "(...)"
    return code[: LIMIT - len("...")].rstrip() + "..."


def _final_call(code: str) -> Optional[int]:
    """Where the parenthesis that the closing `)` at the end of `code` matches opens, if the
    code ends with a call's arguments and has a callee before them."""
    if not code.endswith(")"):
        return None
    stack = []
    quote = ""
    index = 0
    while index < len(code):
        character = code[index]
        if quote:
            if character == "\\":
                index += 1
            elif code.startswith(quote, index):
                index += len(quote) - 1
                quote = ""
        elif character in "'\"":
            quote = character * 3 if code.startswith(character * 3, index) else character
            index += len(quote) - 1
        elif character in "([{":
            stack.append(index)
        elif character in ")]}":
            if not stack:
                return None
            opening = stack.pop()
            if index == len(code) - 1:
                return opening if opening > 0 and not stack else None
        index += 1
    return None
