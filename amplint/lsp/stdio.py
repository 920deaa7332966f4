"""The server's stdio loop: the editor's stream in, through `Frames`, answered at once for
`initialize` (`amplint.lsp.handshake`), then pygls and the server (`amplint.lsp.server`).
Nothing heavier than the standard library is imported before that answer is written."""

from __future__ import annotations

import os
import sys
from typing import Any, BinaryIO, Tuple

from amplint.lsp import handshake
from amplint.lsp.framing import Frames


def serve() -> None:
    """Talk LSP on standard input and output, through descriptors of the protocol's own."""
    protocol_in, protocol_out = _protocol_streams()
    frames = Frames(protocol_in)
    out: Any = protocol_out
    first = handshake.message(frames.peek())
    if first is not None and first.get("method") == "initialize" and "id" in first:
        answer = handshake.result(first.get("params"))
        protocol_out.write(handshake.frame({"id": first["id"], "jsonrpc": "2.0", "result": answer}))
        protocol_out.flush()
        out = handshake.Answered(protocol_out, first["id"], answer)
    from amplint.lsp.server import build

    build().start_io(stdin=frames, stdout=out)  # type: ignore[arg-type]


def _protocol_streams() -> Tuple[BinaryIO, BinaryIO]:
    """Standard input and output, duplicated for the protocol alone. Standard input becomes
    /dev/null and standard output standard error: nothing else, a worker process included,
    can write into the protocol's stream, and a worker, which closes its standard input as it
    starts, never waits for the lock of the stream the server's reader thread is blocked on."""
    protocol_in = os.fdopen(os.dup(sys.stdin.fileno()), "rb")
    protocol_out = os.fdopen(os.dup(sys.stdout.fileno()), "wb")
    if hasattr(os, "register_at_fork"):
        # A worker does not hold the protocol's pipes open (the editor sees the server end
        # when it ends). The descriptors, not the files: the reader thread holds their lock.
        descriptors = (protocol_in.fileno(), protocol_out.fileno())
        os.register_at_fork(after_in_child=lambda: [os.close(fd) for fd in descriptors])
    sys.stdout.flush()
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, sys.stdin.fileno())
    os.close(devnull)
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())
    sys.stdin = open(os.devnull, encoding="utf-8")
    sys.stdout = sys.stderr
    return protocol_in, protocol_out
