"""Read a file's bytes and decode them, or say clearly why they cannot be linted."""

from __future__ import annotations

import io
import os
import stat
import tokenize
from typing import Optional, Union

from amplint.lint.diagnostics import FileError
from amplint.run.notebook import is_notebook

# Generated files of this size are never hand-written training code, and LibCST would take
# minutes on them; they get a per-file error instead of stalling the run. For a notebook the
# limit applies to its joined code: the file itself also carries outputs (plots, tables),
# which routinely take tens of megabytes and are never parsed as Python.
MAX_FILE_BYTES = 8 * 1024 * 1024
MAX_NOTEBOOK_BYTES = 64 * 1024 * 1024


def read_file(path: str) -> Union[bytes, FileError]:
    """The file's bytes; only a regular file is read, and never past the size limit.

    Discovery already keeps FIFOs and devices out, but a path can change between the walk and
    the read: opening without blocking and checking what was opened means a FIFO cannot hang
    the run and `/dev/zero` cannot fill the memory.
    """
    try:
        descriptor = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0))
    except OSError as error:
        return FileError(path, f"cannot read file: {error.strerror or error}")
    try:
        # Before the file object, which refuses a directory with an exception of its own.
        status = os.fstat(descriptor)
        if not stat.S_ISREG(status.st_mode):
            return FileError(path, f"not a regular file ({file_kind(status.st_mode)})")
        too_large = size_error(path, status.st_size)
        if too_large:
            return too_large
        limit = MAX_NOTEBOOK_BYTES if is_notebook(path) else MAX_FILE_BYTES
        with os.fdopen(descriptor, "rb", closefd=False) as handle:
            data = handle.read(limit + 1)
    except OSError as error:
        return FileError(path, f"cannot read file: {error.strerror or error}")
    finally:
        os.close(descriptor)
    # A file that grew after it was measured.
    return size_error(path, len(data)) or data


def file_kind(mode: int) -> str:
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISCHR(mode):
        return "a character device"
    if stat.S_ISBLK(mode):
        return "a block device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISDIR(mode):
        return "a directory"
    return "not a file"


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


def encode_like(text: str, original: bytes) -> bytes:
    """`text` encoded as `original` was: its PEP 263 encoding, and its BOM if it had one."""
    encoding, _ = tokenize.detect_encoding(io.BytesIO(original).readline)
    if encoding == "utf-8-sig" or original.startswith(b"\xef\xbb\xbf"):
        return b"\xef\xbb\xbf" + text.encode("utf-8")
    return text.encode(encoding)


def decode_notebook(data: bytes, path: str) -> Union[str, FileError]:
    """A notebook is JSON, which nbformat always writes as UTF-8."""
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as error:
        return FileError(path, f"invalid notebook: not UTF-8 (invalid byte at offset {error.start})")
