"""The server's answer to `initialize`, written before pygls is imported.

An editor waits for that answer before it sends anything else, and importing pygls (its
`lsprotocol` types alone take most of a second of CPU) and then amplint's engine (LibCST, the
rules) took 2 to 5 s. So the stdio loop (`amplint.lsp.stdio`) reads the first message itself,
answers `initialize` with `result` at once, and only then starts pygls, which handles the
same `initialize` (its workspace, the client's capabilities, the position encoding) and whose
own answer is dropped, after it is checked to say the same (`Answered`).

What the answer says is what `amplint.lsp.server.build` registers, as pygls's capability
builder writes it for those features: a test compares the two for the clients amplint is used
with.
"""

from __future__ import annotations

import json
import logging
from typing import Any, Dict, Optional

from amplint import __version__

logger = logging.getLogger(__name__)

NAME = "amplint"
FIX_ALL = "source.fixAll.amplint"
CODE_ACTION_KINDS = ["quickfix", "source.fixAll", FIX_ALL]
INCREMENTAL = 2  # TextDocumentSyncKind.Incremental
NOTEBOOK_SELECTOR = [{"cells": [{"language": "python"}], "notebook": "jupyter-notebook"}]
# The position encodings pygls can use, in the client's order of preference; UTF-16 otherwise.
_ENCODINGS = ("utf-8", "utf-16", "utf-32")


def result(params: Any) -> Dict[str, Any]:
    """The `InitializeResult` for `initialize`'s params (JSON), as pygls answers it."""
    capabilities = _get(params, "capabilities") or {}
    encodings = _get(capabilities, "general", "positionEncodings")
    encoding = next((e for e in encodings if e in _ENCODINGS), "utf-16") if isinstance(encodings, list) else "utf-16"
    sync: Dict[str, Any] = {"openClose": True, "change": INCREMENTAL}
    # pygls writes `willSave: false` where the client says anything about it (amplint has no
    # handler), and nothing where it does not.
    for key in ("willSave", "willSaveWaitUntil"):
        if _get(capabilities, "textDocument", "synchronization", key) is not None:
            sync[key] = False
    sync["save"] = True
    server: Dict[str, Any] = {"positionEncoding": encoding, "textDocumentSync": sync}
    if _get(capabilities, "notebookDocument") is not None:
        server["notebookDocumentSync"] = {"notebookSelector": NOTEBOOK_SELECTOR, "save": True}
    server["codeActionProvider"] = {"codeActionKinds": CODE_ACTION_KINDS}
    server["executeCommandProvider"] = {"commands": []}
    server["workspace"] = {"workspaceFolders": {"supported": True, "changeNotifications": True}, "fileOperations": {}}
    return {"capabilities": server, "serverInfo": {"name": NAME, "version": __version__}}


def _get(value: Any, *keys: str) -> Any:
    for key in keys:
        if not isinstance(value, dict):
            return None
        value = value.get(key)
    return value


def message(frame_body: bytes) -> Optional[Dict[str, Any]]:
    """The JSON object of a frame's body; None when it is not one."""
    try:
        parsed = json.loads(frame_body)
    except (ValueError, RecursionError):
        return None
    return parsed if isinstance(parsed, dict) else None


def frame(payload: Dict[str, Any]) -> bytes:
    """A message as pygls writes it."""
    body = json.dumps(payload)
    return f"Content-Length: {len(body)}\r\nContent-Type: application/vscode-jsonrpc; charset=utf-8\r\n\r\n{body}".encode("utf-8")


class Answered:
    """Standard output for pygls once `initialize` (`ident`) has been answered with `sent`:
    pygls's own answer to it is dropped (and compared: a difference is logged, for the test
    that keeps them equal to catch first); everything else is written as it comes."""

    def __init__(self, out: Any, ident: Any, sent: Dict[str, Any]) -> None:
        self.out = out
        self.ident = ident
        self.sent = sent
        self.pending = True

    def write(self, data: bytes) -> Any:
        if self.pending:
            _, _, body = data.partition(b"\r\n\r\n")
            answer = message(body)
            if answer is not None and answer.get("id") == self.ident and "method" not in answer:
                self.pending = False
                if answer.get("result") != self.sent:
                    logger.warning("amplint: pygls answers initialize otherwise than amplint did: %s", answer)
                return None
        return self.out.write(data)

    def flush(self) -> None:
        self.out.flush()

    def close(self) -> None:
        self.out.close()
