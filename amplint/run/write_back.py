"""Writing a fixed file back (`--fix`): the user's file changes, and nothing else about it.

What is written is the file the path names, as an editor would save it:

- A symbolic link is written through when the file it resolves to is inside the linted tree
  (under a directory the user named, or in the directory of a file the user named, resolved);
  the link stays a link. A link to a file outside the tree is not fixed: a linter run on one
  tree does not edit another (a repository's link to `~/.bashrc` or to another checkout).
- A read-only file (no write permission for us, or no write bit at all, which root would
  otherwise ignore) is not fixed.
- The file is replaced atomically (a temporary file in its directory, renamed over it), with
  its mode, owner and group. When a rename cannot keep the file what it was, it is rewritten
  in place instead: a file with other hard links (they keep sharing it, as with ruff, Black
  and vim), a file whose owner or group the new file could not be given (a group-writable
  file of another user), a writable file in a directory we cannot write, a file mounted on
  its own (a container's bind mount).
- Before anything is written the file is read again: if it is no longer what was fixed, it
  is not fixed ("changed while amplint ran"); if it already holds the fix (the same file
  reached by another name), there is nothing to write.

An in-place rewrite is not atomic, but it is guarded: Ctrl-C is held off until it is done,
the space is reserved before the first byte is written, and a failed write puts the original
back. Every refusal is a sentence starting "not fixed:"; the caller reports it for that file.
"""

from __future__ import annotations

import contextlib
import errno
import os
import signal
import stat
import tempfile
import threading
from typing import Iterator, List, Optional, Sequence

_O_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_O_BINARY = getattr(os, "O_BINARY", 0)
_O_CLOEXEC = getattr(os, "O_CLOEXEC", 0)


def write_back(path: str, original: bytes, fixed: bytes, roots: Sequence[str]) -> Optional[str]:
    """Replace the contents of `path` (`original` when it was fixed) by `fixed`; why not, or None.

    `roots` are the files and directories the user named: a symbolic link is written through
    only to a file under one of them."""
    try:
        target = path
        if os.path.islink(path):
            target = os.path.realpath(path)
            if not _inside(target, roots):
                return f"not fixed: a symbolic link to {target}, outside the linted tree"
        descriptor = os.open(target, os.O_RDONLY | _O_NOFOLLOW | _O_BINARY | _O_CLOEXEC | getattr(os, "O_NONBLOCK", 0))
        try:
            status = os.fstat(descriptor)
            if not stat.S_ISREG(status.st_mode):
                return "not fixed: not a regular file"
            if read_only(target, status):
                return "not fixed: the file is read-only"
            current = _read_all(descriptor)
        finally:
            os.close(descriptor)
        if current == fixed:
            return None  # written already, through another name of the same file
        if current != original:
            return "not fixed: the file changed while amplint ran"
        if status.st_nlink > 1 or not _can_write_directory(target):
            return _rewrite_in_place(target, original, fixed)
        return _replace(target, status, original, fixed)
    except OSError as error:
        return f"not fixed: cannot write it ({error.strerror or error})"


def read_only(path: str, status: os.stat_result) -> bool:
    """Whether the user has made the file read-only: no permission to write it, or no write
    bit for anyone (which the superuser's permission would not stop)."""
    effective = os.access in os.supports_effective_ids
    return not os.access(path, os.W_OK, effective_ids=effective) or not status.st_mode & 0o222


def _inside(target: str, roots: Sequence[str]) -> bool:
    """Whether `target` (resolved) is in the tree of a named directory, or in the directory of
    a named file: a link the user names is not its own tree, or naming it (as a CI job does
    with the files a pull request changed) would let it point anywhere."""
    for root in roots:
        tree = os.path.realpath(root if os.path.isdir(root) else os.path.dirname(os.path.abspath(root)))
        with contextlib.suppress(ValueError):  # on another drive
            if os.path.commonpath([target, tree]) == tree:
                return True
    return False


def _can_write_directory(path: str) -> bool:
    directory = os.path.dirname(path) or "."
    effective = os.access in os.supports_effective_ids
    return os.access(directory, os.W_OK | os.X_OK, effective_ids=effective)


def _replace(target: str, status: os.stat_result, original: bytes, fixed: bytes) -> Optional[str]:
    """Write a temporary file beside `target` with its contents, mode, owner and group, and
    rename it over `target`; in place instead when the owner or group cannot be given."""
    descriptor, temporary = tempfile.mkstemp(prefix=".amplint-fix-", dir=os.path.dirname(target) or ".")
    try:
        with _interrupts_held():
            try:
                with os.fdopen(descriptor, "wb") as handle:
                    handle.write(fixed)
                    handle.flush()
                    os.fsync(handle.fileno())  # on disk before it replaces the original
                made = os.stat(temporary)
                if (made.st_uid, made.st_gid) != (status.st_uid, status.st_gid):
                    try:
                        os.chown(temporary, status.st_uid, status.st_gid)
                    except OSError:
                        # Only the superuser gives a file away (EPERM; EINVAL for an owner this
                        # user namespace cannot name): the original keeps its owner if it is
                        # written in place, which we may (`read_only` said so).
                        return _rewrite_in_place(target, original, fixed)
                # After the chown, which clears the set-user-ID and set-group-ID bits.
                os.chmod(temporary, stat.S_IMODE(status.st_mode))
                _check_unchanged(target, status, original)
                try:
                    os.replace(temporary, target)
                except OSError as error:
                    if error.errno != errno.EBUSY:
                        raise
                    # A file mounted on its own (a container's bind mount) cannot be renamed over.
                    return _rewrite_in_place(target, original, fixed)
                temporary = ""
            except _Changed:
                return "not fixed: the file changed while amplint ran"
    finally:
        if temporary:
            with contextlib.suppress(OSError):
                os.unlink(temporary)
    return None


def _rewrite_in_place(target: str, original: bytes, fixed: bytes) -> Optional[str]:
    """Overwrite the file's contents in place: the same inode, links, owner and mode."""
    descriptor = os.open(target, os.O_RDWR | _O_NOFOLLOW | _O_BINARY | _O_CLOEXEC)
    try:
        with _interrupts_held():
            if _read_all(descriptor) != original:
                return "not fixed: the file changed while amplint ran"
            if len(fixed) > len(original) and hasattr(os, "posix_fallocate"):
                try:  # no half-written file for want of space
                    os.posix_fallocate(descriptor, 0, len(fixed))
                except OSError as error:
                    if error.errno not in _UNSUPPORTED:
                        raise
            try:
                _overwrite(descriptor, fixed)
            except OSError:
                with contextlib.suppress(OSError):
                    _overwrite(descriptor, original)
                raise
    finally:
        os.close(descriptor)
    return None


def _overwrite(descriptor: int, data: bytes) -> None:
    os.lseek(descriptor, 0, os.SEEK_SET)
    view = memoryview(data)
    while view:
        view = view[os.write(descriptor, view) :]
    os.ftruncate(descriptor, len(data))
    os.fsync(descriptor)


class _Changed(Exception):
    pass


def _check_unchanged(target: str, status: os.stat_result, original: bytes) -> None:
    """The file at `target` is still the one that was read (same inode, same contents)."""
    try:
        descriptor = os.open(target, os.O_RDONLY | _O_NOFOLLOW | _O_BINARY | _O_CLOEXEC | getattr(os, "O_NONBLOCK", 0))
    except OSError:
        raise _Changed() from None
    try:
        now = os.fstat(descriptor)
        if (now.st_dev, now.st_ino) != (status.st_dev, status.st_ino) or _read_all(descriptor) != original:
            raise _Changed()
    finally:
        os.close(descriptor)


def _read_all(descriptor: int) -> bytes:
    os.lseek(descriptor, 0, os.SEEK_SET)
    chunks: List[bytes] = []
    while True:
        chunk = os.read(descriptor, 1 << 20)
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)


_UNSUPPORTED = {getattr(errno, name, -1) for name in ("EOPNOTSUPP", "ENOTSUP", "EINVAL", "ENOSYS")}


@contextlib.contextmanager
def _interrupts_held() -> Iterator[None]:
    """Ctrl-C waits until the block is done: a file is never left half-written or replaced
    without its mode. Only the main thread receives it (and may set a handler)."""
    if threading.current_thread() is not threading.main_thread() or signal.getsignal(signal.SIGINT) is None:
        yield  # None: a handler not set from Python, which could not be put back
        return
    received: List[int] = []
    previous = signal.signal(signal.SIGINT, lambda number, frame: received.append(number))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
        if received:
            if callable(previous):
                previous(signal.SIGINT, None)
            elif previous == signal.SIG_DFL:
                os.kill(os.getpid(), signal.SIGINT)
