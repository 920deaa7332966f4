"""Read a file as Python source text, or say clearly why it cannot be read."""

from __future__ import annotations

import io
import os
import tokenize
from typing import Union

from amplint.diagnostics import FileError

# Generated files of this size are never hand-written training code, and LibCST would take
# minutes on them; they get a per-file error instead of stalling the run.
MAX_FILE_BYTES = 8 * 1024 * 1024


def read_python(path: str) -> Union[str, FileError]:
    try:
        size = os.path.getsize(path)
        if size > MAX_FILE_BYTES:
            return FileError(path, f"file too large to lint ({size / 2**20:.1f} MiB > {MAX_FILE_BYTES // 2**20} MiB)")
        with open(path, "rb") as handle:
            data = handle.read()
    except OSError as error:
        return FileError(path, f"cannot read file: {error.strerror or error}")
    return decode_python(data, path)


def decode_python(data: bytes, path: str) -> Union[str, FileError]:
    """Decode as Python does: a BOM or PEP 263 coding line, else UTF-8."""
    if b"\x00" in data:
        return FileError(path, "binary file (contains NUL bytes), not Python source")
    try:
        encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
        text = data.decode(encoding)
    except (SyntaxError, LookupError) as error:
        return FileError(path, f"cannot decode: {error}")
    except UnicodeDecodeError as error:
        return FileError(path, f"cannot decode as {error.encoding}: invalid byte at offset {error.start}")
    if text.startswith("\ufeff"):
        text = text[1:]
    return text
