"""`amplint.run.source.read_file`: the careful read every linted and fixed file goes through."""

import os

import pytest

from amplint.run import source
from amplint.run.source import read_file


def test_a_regular_file_is_read_whole(tmp_path):
    path = tmp_path / "a.py"
    path.write_bytes(b"x = 1\r\n" * 1000)
    assert read_file(str(path)) == b"x = 1\r\n" * 1000


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs here")
def test_a_fifo_is_not_read_and_does_not_block(tmp_path):
    os.mkfifo(tmp_path / "a.py")
    assert read_file(str(tmp_path / "a.py")).message == "not a regular file (a FIFO)"


@pytest.mark.skipif(not os.path.exists("/dev/zero"), reason="no /dev/zero")
def test_a_device_is_not_read():
    assert read_file("/dev/zero").message == "not a regular file (a character device)"


def test_a_missing_file_and_a_directory_are_errors(tmp_path):
    assert read_file(str(tmp_path / "gone.py")).message == "cannot read file: No such file or directory"
    error = read_file(str(tmp_path))
    assert error.message in ("not a regular file (a directory)", "cannot read file: Is a directory")


def test_the_size_limit_is_per_kind(tmp_path, monkeypatch):
    monkeypatch.setattr(source, "MAX_FILE_BYTES", 2 * 2**20)
    monkeypatch.setattr(source, "MAX_NOTEBOOK_BYTES", 4 * 2**20)
    (tmp_path / "big.py").write_bytes(b"#" * (3 * 2**20))
    (tmp_path / "big.ipynb").write_bytes(b" " * (3 * 2**20))
    assert read_file(str(tmp_path / "big.py")).message == "file too large to lint (3.0 MiB > 2 MiB)"
    assert len(read_file(str(tmp_path / "big.ipynb"))) == 3 * 2**20


def test_a_nul_in_a_name_is_an_answer(tmp_path):
    assert read_file(f"{tmp_path}/a\0b.py").message == "cannot read file: the name contains a NUL byte"


def test_a_declared_file_is_small_text(tmp_path, monkeypatch):
    monkeypatch.setattr(source, "MAX_DECLARED_BYTES", 2**20)
    (tmp_path / "requirements.txt").write_bytes(b"torch\n" * 200_000)
    (tmp_path / "setup.cfg").write_bytes(b"[options]\n\0")
    assert source.read_declared(str(tmp_path / "requirements.txt")).message == "too large to read (1.1 MiB > 1 MiB)"
    assert source.read_declared(str(tmp_path / "setup.cfg")).message == "binary file (contains NUL bytes), not text"


def test_a_link_is_refused_when_asked(tmp_path):
    (tmp_path / "target").write_text("x\n")
    os.symlink(tmp_path / "target", tmp_path / "link")
    assert source.read_regular(str(tmp_path / "link"), 100) == b"x\n"
    assert source.read_regular(str(tmp_path / "link"), 100, follow_symlinks=False).message == "not a regular file (a symbolic link)"
