"""`amplint server`: the language server (LSP over stdio), for any editor with an LSP client.

It lints what the editor holds, on open, on change and on save, with the same
rules, configuration (`[tool.amplint]` found from the file), per-file ignores, excludes and
`# noqa` as the command line, and offers a code action to add `# noqa: CODE`. Notebooks are
linted through the LSP's notebook document sync where the client supports it.

The server needs pygls, an optional dependency: `pip install 'amplint[lsp]'`. The linter
itself does not.
"""

from __future__ import annotations

import argparse
import sys
from typing import Sequence

INSTALL_HINT = "amplint server needs pygls: pip install 'amplint[lsp]'"


def main(argv: Sequence[str] = ()) -> int:
    parser = argparse.ArgumentParser(
        prog="amplint server",
        description="Run the amplint language server on standard input and output (LSP). "
        "Editors start it; see the README for VS Code, Neovim and Helix settings.",
    )
    parser.add_argument("--stdio", action="store_true", help="talk LSP over standard input and output (the default; accepted because many clients pass it)")
    parser.parse_args(list(argv))
    from amplint.lsp.stdio import serve

    try:
        serve()  # pygls is imported once `initialize` is answered
    except ImportError as error:
        if "pygls" not in str(error) and "lsprotocol" not in str(error):
            raise
        print(f"amplint: error: {INSTALL_HINT} ({error})", file=sys.stderr)
        return 2
    return 0
