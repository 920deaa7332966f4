"""The LSP's base protocol, read so that no frame can end or derail the server.

A message is a header block (`Content-Length: N`, other headers, a blank line) and N bytes of
JSON. pygls's reader takes the header on trust: a `Content-Length` of 99999999999999 had it
allocate that much (MemoryError, the server exits), a 27-digit one overflowed, and a frame
without one, or with a length that is not a number, put the stream out of step for good (the
next request was never answered). `Frames` sits between the editor's stream and pygls: it
reads each frame itself and hands pygls only well-formed ones, written canonically. A frame
it cannot take is logged and skipped, and the stream is found again at the next
`Content-Length:` header, wherever the skipped frame's body left it.
"""

from __future__ import annotations

import logging
import re
from typing import BinaryIO

logger = logging.getLogger(__name__)

# A body larger than any document the server lints, as JSON: a notebook's joined code may be
# 64 MiB (`amplint.run.source.MAX_NOTEBOOK_BYTES`), a Python file 8 MiB, and escaping can
# double what JSON carries.
MAX_BODY = 128 * 1024 * 1024
# A header line is a few dozen bytes; a longer one is read in pieces of this size, never whole.
MAX_HEADER_LINE = 64 * 1024
_LENGTH = re.compile(rb"content-length[ \t]*:[ \t]*(\S*)[ \t]*\r?\n?$", re.IGNORECASE)


class Frames:
    """A binary stream of well-formed frames read from `raw`, for pygls's reader (which calls
    `readline` for the header lines, then `read` for the body). EOF of `raw` is EOF here."""

    def __init__(self, raw: BinaryIO) -> None:
        self.raw = raw
        self.pending = b""

    def readline(self, size: int = -1) -> bytes:
        if not self.pending:
            self.pending = self._next_frame()
        end = self.pending.find(b"\n") + 1 or len(self.pending)
        line, self.pending = self.pending[:end], self.pending[end:]
        return line

    def read(self, size: int = -1) -> bytes:
        if not self.pending:
            self.pending = self._next_frame()
        size = len(self.pending) if size is None or size < 0 else size
        data, self.pending = self.pending[:size], self.pending[size:]
        return data

    def peek(self) -> bytes:
        """The body of the next frame, left to be read (the answer to `initialize` is written
        before pygls reads it)."""
        if not self.pending:
            self.pending = self._next_frame()
        return self.pending.partition(b"\r\n\r\n")[2]

    def _next_frame(self) -> bytes:
        """The next frame that can be taken, as `Content-Length: N\\r\\n\\r\\n` and its body; b""
        at the end of the stream."""
        while True:
            length, problem, headers = None, None, False
            while True:
                line = self._header_line()
                if line is None:
                    return b""
                if not line.strip():
                    if headers:
                        break
                    continue  # a stray blank line between frames
                headers = True
                # The header may follow the rest of a frame skipped before (`{}Content-Length: 2`).
                start = line.lower().rfind(b"content-length")
                match = _LENGTH.match(line, start) if start >= 0 else None
                if match is not None:
                    value = match.group(1)
                    length = int(value) if value.isdigit() and len(value) <= 12 else None
                    if length is None or length > MAX_BODY:
                        problem = f"Content-Length {value[:40]!r} is not a length up to {MAX_BODY} bytes"
                        length = None
                    else:
                        problem = None
            if length is None:
                logger.error("amplint: a message skipped: %s", problem or "its header has no Content-Length")
                continue
            body = self.raw.read(length)
            if len(body) < length:
                return b""
            return b"Content-Length: %d\r\n\r\n" % length + body

    def _header_line(self) -> "bytes | None":
        """The next header line, or the end of an overlong one (None at the end of the stream)."""
        line = self.raw.readline(MAX_HEADER_LINE)
        if not line:
            return None
        while not line.endswith(b"\n") and len(line) >= MAX_HEADER_LINE:
            more = self.raw.readline(MAX_HEADER_LINE)
            if not more:
                return None
            line = line[-64:] + more  # a header split between two pieces is still found
        return line
