"""Read a file's bytes and decode them, or say clearly why they cannot be linted."""

from __future__ import annotations

import io
import os
import tokenize
from typing import Optional, Union

from amplint.diagnostics import FileError
from amplint.notebook import is_notebook

# Generated files of this size are never hand-written training code, and LibCST would take
# minutes on them; they get a per-file error instead of stalling the run. For a notebook the
# limit applies to its joined code: the file itself also carries outputs (plots, tables),
# which routinely take tens of megabytes and are never parsed as Python.
MAX_FILE_BYTES = 8 * 1024 * 1024
MAX_NOTEBOOK_BYTES = 64 * 1024 * 1024


def read_file(path: str) -> Union[bytes, FileError]:
    try:
        too_large = size_error(path, os.path.getsize(path))
        if too_large:
            return too_large
        with open(path, "rb") as handle:
            return handle.read()
    except OSError as error:
        return FileError(path, f"cannot read file: {error.strerror or error}")


def size_error(path: str, size: int, what: str = "file") -> Optional[FileError]:
    limit = MAX_NOTEBOOK_BYTES if is_notebook(path) and what == "file" else MAX_FILE_BYTES
    if size <= limit:
        return None
    return FileError(path, f"{what} too large to lint ({size / 2**20:.1f} MiB > {limit // 2**20} MiB)")


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


def decode_notebook(data: bytes, path: str) -> Union[str, FileError]:
    """A notebook is JSON, which nbformat always writes as UTF-8."""
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as error:
        return FileError(path, f"invalid notebook: not UTF-8 (invalid byte at offset {error.start})")
