"""Read a file's bytes and decode them, or say clearly why they cannot be linted."""

from __future__ import annotations

import errno
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
# A configuration, a requirements file or a setup.py is a few kilobytes; one of megabytes is
# no declaration anyone wrote by hand.
MAX_DECLARED_BYTES = 1024 * 1024

_O_NONBLOCK = getattr(os, "O_NONBLOCK", 0)
_O_BINARY = getattr(os, "O_BINARY", 0)
_O_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_O_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)


def read_file(path: str) -> Union[bytes, FileError]:
    """The bytes of a file to lint (`read_regular`, under the limit of its kind)."""
    return read_regular(path, MAX_NOTEBOOK_BYTES if is_notebook(path) else MAX_FILE_BYTES)


def read_declared(path: str) -> Union[bytes, FileError]:
    """The bytes of a file the repository names for amplint to read besides its code: its
    configuration, the requirement files (and their `-r` includes), setup.cfg and setup.py
    its torch is declared in. `read_regular` with their smaller limit, and text only."""
    data = read_regular(path, MAX_DECLARED_BYTES, too_large="too large to read")
    if isinstance(data, bytes) and b"\x00" in data:
        return FileError(path, "binary file (contains NUL bytes), not text")
    return data


def read_regular(path: str, limit: int, follow_symlinks: bool = True, too_large: str = "file too large to lint") -> Union[bytes, FileError]:
    """The bytes of the regular file at `path`, at most `limit`: the one way amplint opens a
    file the linted repository names, or chose (its code, notebooks, configuration, declared
    requirements, git's ignore and config files), with why not as a `FileError`.

    Every such name is the repository's to choose, and it can change between a check and the
    read: opening without blocking and checking what was opened means a FIFO or `/dev/stdin`
    cannot hang the run, `/dev/zero` cannot fill the memory, and a NUL in a name (which no
    file can have) is an answer, not an exception. `follow_symlinks=False`: a symbolic link
    is refused (git reads no `.gitignore` through one).
    """
    flags = os.O_RDONLY | _O_NONBLOCK | _O_BINARY | _O_CLOEXEC | (0 if follow_symlinks else _O_NOFOLLOW)
    try:
        descriptor = os.open(path, flags)
    except ValueError:  # an embedded NUL
        return FileError(path, "cannot read file: the name contains a NUL byte")
    except OSError as error:
        if not follow_symlinks and error.errno == errno.ELOOP:
            return FileError(path, "not a regular file (a symbolic link)")
        return FileError(path, f"cannot read file: {error.strerror or error}")
    try:
        # Before the file object, which refuses a directory with an exception of its own.
        status = os.fstat(descriptor)
        if not stat.S_ISREG(status.st_mode):
            return FileError(path, f"not a regular file ({file_kind(status.st_mode)})")
        if status.st_size > limit:
            return _too_large(path, status.st_size, limit, too_large)
        with os.fdopen(descriptor, "rb", closefd=False) as handle:
            data = handle.read(limit + 1)
    except OSError as error:
        return FileError(path, f"cannot read file: {error.strerror or error}")
    finally:
        os.close(descriptor)
    # A file that grew after it was measured.
    return _too_large(path, len(data), limit, too_large) if len(data) > limit else data


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
    return _too_large(path, size, limit, f"{what} too large to lint") if size > limit else None


def _too_large(path: str, size: int, limit: int, what: str) -> FileError:
    return FileError(path, f"{what} ({size / 2**20:.1f} MiB > {limit / 2**20:g} MiB)")


def source_encoding(data: bytes) -> str:
    """The encoding Python reads `data` in: its BOM or PEP 263 coding line, else UTF-8
    (SyntaxError for a coding line that names none)."""
    encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
    return encoding


def decode_python(data: bytes, path: str) -> Union[str, FileError]:
    """Decode as Python does: a BOM or PEP 263 coding line, else UTF-8."""
    if b"\x00" in data:
        return FileError(path, "binary file (contains NUL bytes), not Python source")
    try:
        text = data.decode(source_encoding(data))
    except (SyntaxError, LookupError) as error:
        return FileError(path, f"cannot decode: {error}")
    except UnicodeDecodeError as error:
        return FileError(path, f"cannot decode as {error.encoding}: invalid byte at offset {error.start}")
    if text.startswith("\ufeff"):
        text = text[1:]
    return text


def encode_like(text: str, original: bytes) -> bytes:
    """`text` encoded as `original` was: its PEP 263 encoding, and its BOM if it had one."""
    encoding = source_encoding(original)
    if encoding == "utf-8-sig" or original.startswith(b"\xef\xbb\xbf"):
        return b"\xef\xbb\xbf" + text.encode("utf-8")
    return text.encode(encoding)


def decode_notebook(data: bytes, path: str) -> Union[str, FileError]:
    """A notebook is JSON, which nbformat always writes as UTF-8."""
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as error:
        return FileError(path, f"invalid notebook: not UTF-8 (invalid byte at offset {error.start})")
