"""amplint's subcommands, and "did you mean" for a mistyped one.

`amplint chek` would otherwise be read as a path that does not exist, and fail with "no
such file or directory"; a word close to a subcommand that names no file gets a suggestion.
"""

from __future__ import annotations

import os
from typing import Optional

SUBCOMMANDS = ("check", "rule", "verify", "server")


def mistyped(word: str) -> Optional[str]:
    """The subcommand `word` was probably meant to be, or None."""
    if word in SUBCOMMANDS or word.startswith("-") or os.path.lexists(word):
        return None
    if os.sep in word or "/" in word or word.endswith((".py", ".ipynb")):
        return None
    aliases = {"rules": "rule", "lint": "check", "serve": "server", "lsp": "server"}
    if word.lower() in aliases:
        return aliases[word.lower()]
    import difflib  # only for a word that is no path and no subcommand

    close = difflib.get_close_matches(word.lower(), SUBCOMMANDS, n=1, cutoff=0.6)
    return close[0] if close else None
