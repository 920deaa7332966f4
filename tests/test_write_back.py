"""`--fix` writes the user's file and nothing else: links, hard links, permissions and owner.

The command-level tests run `amplint --fix` on the shapes of the reliability report's D4 and D5;
the others call `write_back` directly, with the system calls that only another user (or a full
disk, or Ctrl-C) would provoke stood in by monkeypatching.
"""

import os
import signal
import stat
import sys

import pytest

from amplint.run import write_back as wb
from amplint.run.write_back import write_back
from conftest import BUGGY

FIXED_LINE = "    scaler.unscale_(optimizer)\n"
FIXED = BUGGY.replace(
    "    scaler.scale(loss).backward()\n", "    scaler.scale(loss).backward()\n" + FIXED_LINE
)

needs_symlinks = pytest.mark.skipif(not hasattr(os, "symlink") or os.name == "nt", reason="POSIX links")


def test_fixed_is_what_the_fix_writes(amplint, project):
    root = project({"train.py": BUGGY})
    assert amplint("--fix", "train.py", cwd=root).returncode == 0
    assert (root / "train.py").read_text() == FIXED


# --------------------------------------------------------------------------- symbolic links (D4)


@needs_symlinks
def test_a_link_to_a_file_outside_the_tree_is_not_fixed_and_stays_a_link(amplint, project):
    root = project({"outside/real.py": BUGGY, "tree/clean.py": "x = 1\n"})
    os.symlink("../outside/real.py", root / "tree" / "link.py")
    result = amplint("--fix", "--concise", "tree", cwd=root)
    assert result.returncode == 2
    real = os.path.realpath(root / "outside" / "real.py")
    assert f"tree/link.py: not fixed: a symbolic link to {real}, outside the linted tree" in result.stderr
    assert "tree/link.py:8:5: AMP003" in result.stdout  # what remains is reported
    assert "Fixed" not in result.stdout + result.stderr
    assert (root / "tree" / "link.py").is_symlink() and (root / "outside" / "real.py").read_text() == BUGGY
    # Named on its own (as a CI job names the files a pull request changed): the same.
    result = amplint("--fix", "tree/link.py", cwd=root)
    assert result.returncode == 2 and "outside the linted tree" in result.stderr
    assert (root / "tree" / "link.py").is_symlink() and (root / "outside" / "real.py").read_text() == BUGGY


@needs_symlinks
def test_a_link_to_a_file_inside_the_tree_is_written_through(amplint, project):
    # The target is in the tree but not linted itself (not a .py name): only the link's fix writes it.
    root = project({"tree/shared/real_py.txt": BUGGY})
    os.symlink("shared/real_py.txt", root / "tree" / "link.py")
    result = amplint("--fix", "--show-fixes", "tree", cwd=root)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Fixed 1 error" in result.stdout
    assert (root / "tree" / "link.py").is_symlink()
    assert os.readlink(root / "tree" / "link.py") == "shared/real_py.txt"
    assert (root / "tree" / "shared" / "real_py.txt").read_text() == FIXED


@needs_symlinks
def test_a_link_and_its_target_both_linted_are_fixed_once(amplint, project):
    root = project({"tree/real.py": BUGGY})
    os.symlink("real.py", root / "tree" / "link.py")
    result = amplint("--fix", "tree", cwd=root)
    assert result.returncode == 0, result.stdout + result.stderr  # no "changed while amplint ran"
    assert (root / "tree" / "link.py").is_symlink() and (root / "tree" / "real.py").read_text() == FIXED


@needs_symlinks
def test_a_named_directory_that_is_a_link_is_the_tree(amplint, project):
    root = project({"elsewhere/pkg/real.py": BUGGY})
    os.symlink("elsewhere/pkg", root / "pkg")
    os.symlink("real.py", root / "elsewhere" / "pkg" / "link.py")
    assert amplint("--fix", "pkg/link.py", cwd=root).returncode == 0
    assert (root / "elsewhere" / "pkg" / "real.py").read_text() == FIXED


# --------------------------------------------------------------------------- hard links (D4)


@pytest.mark.skipif(not hasattr(os, "link"), reason="hard links")
def test_a_hard_linked_file_stays_linked_and_every_name_sees_the_fix(amplint, project):
    root = project({"a.py": BUGGY})
    os.link(root / "a.py", root / "other_name")
    inode = os.stat(root / "a.py").st_ino
    result = amplint("--fix", "a.py", cwd=root)
    assert result.returncode == 0, result.stdout + result.stderr
    assert os.stat(root / "a.py").st_nlink == 2 and os.stat(root / "a.py").st_ino == inode
    assert (root / "other_name").read_text() == FIXED == (root / "a.py").read_text()


# --------------------------------------------------------------------------- permissions and owner (D5)


def test_a_read_only_file_is_not_rewritten(amplint, project):
    root = project({"ro/a.py": BUGGY, "ro/b.py": BUGGY})
    os.chmod(root / "ro" / "a.py", 0o444)  # in a writable directory: a rename would succeed
    result = amplint("--fix", "--concise", "ro", cwd=root)
    assert result.returncode == 2
    assert "ro/a.py: not fixed: the file is read-only" in result.stderr
    assert "ro/a.py:8:5: AMP003" in result.stdout and "ro/b.py" not in result.stdout
    assert (root / "ro" / "a.py").read_text() == BUGGY and (root / "ro" / "b.py").read_text() == FIXED
    assert stat.S_IMODE(os.stat(root / "ro" / "a.py").st_mode) == 0o444


def test_without_write_permission_the_file_is_read_only(tmp_path, monkeypatch):
    # What another user sees on root's 0644 file (os.access is what the kernel would decide).
    path = tmp_path / "a.py"
    path.write_text(BUGGY)
    monkeypatch.setattr(wb.os, "access", lambda *args, **kwargs: False)
    assert write_back(str(path), BUGGY.encode(), FIXED.encode(), [str(tmp_path)]) == "not fixed: the file is read-only"
    assert path.read_text() == BUGGY


def test_the_mode_is_kept(tmp_path):
    path = tmp_path / "a.py"
    path.write_text(BUGGY)
    os.chmod(path, 0o751)
    assert write_back(str(path), BUGGY.encode(), FIXED.encode(), [str(tmp_path)]) is None
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o751 and path.read_text() == FIXED


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0, reason="only root can give a file away")
def test_another_users_file_keeps_its_owner_and_group(tmp_path):
    path = tmp_path / "a.py"
    path.write_text(BUGGY)
    os.chown(path, 65534, 65534)
    os.chmod(path, 0o664)
    inode = os.stat(path).st_ino
    assert write_back(str(path), BUGGY.encode(), FIXED.encode(), [str(tmp_path)]) is None
    status = os.stat(path)
    assert (status.st_uid, status.st_gid) == (65534, 65534) and path.read_text() == FIXED
    assert status.st_ino != inode  # replaced atomically, the owner given back


def test_when_the_owner_cannot_be_given_back_the_file_is_written_in_place(tmp_path, monkeypatch):
    # A group-writable file of another user, fixed by a user who may write it but not chown.
    path = tmp_path / "a.py"
    path.write_text(BUGGY)
    status = os.stat(path)
    real_stat = os.stat

    def owned_by_someone_else(name, *args, **kwargs):
        result = real_stat(name, *args, **kwargs)
        if os.path.basename(str(name)).startswith(".amplint-fix-"):
            return os.stat_result((result.st_mode, 1, 0, 1, status.st_uid + 1, status.st_gid) + tuple(result)[6:])
        return result

    def refused(*args):
        raise PermissionError(1, "Operation not permitted")

    monkeypatch.setattr(wb.os, "stat", owned_by_someone_else)
    monkeypatch.setattr(wb.os, "chown", refused)
    assert write_back(str(path), BUGGY.encode(), FIXED.encode(), [str(tmp_path)]) is None
    monkeypatch.undo()
    assert os.stat(path).st_ino == status.st_ino and path.read_text() == FIXED
    assert [name for name in os.listdir(tmp_path) if name.startswith(".amplint-fix-")] == []


def test_a_writable_file_in_a_directory_we_cannot_write_is_written_in_place(tmp_path, monkeypatch):
    path = tmp_path / "a.py"
    path.write_text(BUGGY)
    inode = os.stat(path).st_ino
    monkeypatch.setattr(wb, "_can_write_directory", lambda target: False)
    assert write_back(str(path), BUGGY.encode(), FIXED.encode(), [str(tmp_path)]) is None
    assert os.stat(path).st_ino == inode and path.read_text() == FIXED


def test_a_file_mounted_on_its_own_is_written_in_place(tmp_path, monkeypatch):
    # `docker run -v ./train.py:/app/train.py`: renaming over a mount point is EBUSY.
    path = tmp_path / "a.py"
    path.write_text(BUGGY)
    inode = os.stat(path).st_ino

    def busy(*args):
        raise OSError(16, "Device or resource busy")

    monkeypatch.setattr(wb.os, "replace", busy)
    assert write_back(str(path), BUGGY.encode(), FIXED.encode(), [str(tmp_path)]) is None
    assert os.stat(path).st_ino == inode and path.read_text() == FIXED
    assert os.listdir(tmp_path) == ["a.py"]


# --------------------------------------------------------------------------- what holds whatever the path


def test_a_file_changed_since_it_was_fixed_is_left_alone(tmp_path):
    path = tmp_path / "a.py"
    path.write_text(BUGGY + "# edited\n")
    problem = write_back(str(path), BUGGY.encode(), FIXED.encode(), [str(tmp_path)])
    assert problem == "not fixed: the file changed while amplint ran"
    assert path.read_text() == BUGGY + "# edited\n"


@pytest.mark.parametrize("in_place", [False, True], ids=["replaced", "in-place"])
def test_ctrl_c_while_writing_waits_until_the_file_is_whole(tmp_path, monkeypatch, request, in_place):
    # Python's own Ctrl-C handler, also where the tests run with SIGINT ignored (a background
    # job of a non-interactive shell): what is tested is how write_back holds it back.
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    request.addfinalizer(lambda: signal.signal(signal.SIGINT, previous))
    path = tmp_path / "a.py"
    path.write_text(BUGGY)
    if in_place:
        os.link(path, tmp_path / "other")
    real_replace, real_write = os.replace, os.write

    def interrupted(real):
        def call(*args):
            signal.raise_signal(signal.SIGINT)  # Ctrl-C, just before the file is written (to this thread)
            return real(*args)

        return call

    monkeypatch.setattr(wb.os, "replace", interrupted(real_replace))
    monkeypatch.setattr(wb.os, "write", interrupted(real_write))
    with pytest.raises(KeyboardInterrupt):
        write_back(str(path), BUGGY.encode(), FIXED.encode(), [str(tmp_path)])
    assert path.read_text() == FIXED
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    assert [name for name in os.listdir(tmp_path) if name.startswith(".amplint-fix-")] == []


def test_a_failed_in_place_write_puts_the_original_back(tmp_path, monkeypatch):
    path = tmp_path / "a.py"
    path.write_text(BUGGY)
    os.link(path, tmp_path / "other")
    real_write = os.write
    calls = []

    def disk_full_once(descriptor, data):
        calls.append(len(data))
        if len(calls) == 1:
            real_write(descriptor, bytes(data[:10]))
            raise OSError(28, "No space left on device")
        return real_write(descriptor, data)

    monkeypatch.setattr(wb.os, "write", disk_full_once)
    problem = write_back(str(path), BUGGY.encode(), FIXED.encode(), [str(tmp_path)])
    assert problem == "not fixed: cannot write it (No space left on device)"
    assert path.read_text() == BUGGY == (tmp_path / "other").read_text()


def test_a_failed_replace_leaves_no_temporary_file(tmp_path, monkeypatch):
    path = tmp_path / "a.py"
    path.write_text(BUGGY)

    def refused(*args):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(wb.os, "replace", refused)
    problem = write_back(str(path), BUGGY.encode(), FIXED.encode(), [str(tmp_path)])
    assert problem == "not fixed: cannot write it (Permission denied)"
    assert os.listdir(tmp_path) == ["a.py"] and path.read_text() == BUGGY


def test_a_fifo_in_place_of_the_file_is_not_written(tmp_path):
    if not hasattr(os, "mkfifo"):
        pytest.skip("FIFOs")
    path = tmp_path / "a.py"
    os.mkfifo(path)
    assert write_back(str(path), BUGGY.encode(), FIXED.encode(), [str(tmp_path)]) == "not fixed: not a regular file"


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="FIFOs")
def test_a_file_that_became_a_fifo_after_linting_is_not_read_for_the_fix(amplint, project, monkeypatch):
    # --fix reads the file again with the careful read (amplint.run.source.read_file): no hang.
    from amplint.run import source

    root = project({"train.py": BUGGY})
    real_read_file = source.read_file

    def swapped(path):
        if sys._getframe(1).f_code.co_name == "fix_results":  # not the lint's read, if it is the same
            os.unlink(path)
            os.mkfifo(path)
        return real_read_file(path)

    monkeypatch.setattr(source, "read_file", swapped)
    result = amplint("--fix", "--no-cache", "train.py", cwd=root)
    assert "train.py: not fixed: not a regular file (a FIFO)" in result.stderr
    assert result.returncode == 1  # a note: the findings stand, as linted
