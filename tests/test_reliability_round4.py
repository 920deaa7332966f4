"""The reproducers of the fourth reliability round (shared/reports/reliability-2026-12-06.md),
each kept as it was reported, with what it must do now: no repository, editor or
configuration hangs, stalls or flips a run (issue 42)."""

import os
import resource
import subprocess
import sys

import pytest

from amplint.config.torch_target import declared_torch

from conftest import BUGGY, run_amplint

AMPLINT = [sys.executable, "-m", "amplint"]
WAIT = 120  # seconds: far beyond a run on a loaded machine; a hang is what runs past it


def project(root, requirements):
    root.mkdir(exist_ok=True)
    (root / "train.py").write_text(BUGGY)
    (root / "requirements.txt").write_bytes(requirements)
    return root


def run(root, *args, stdin=subprocess.DEVNULL, memory=None):
    """`amplint ARGS` in `root` as its own process; with `memory`, under that address-space
    limit (what the report's `ulimit -v` did)."""

    def limit():
        if memory is not None:
            resource.setrlimit(resource.RLIMIT_AS, (memory, memory))

    process = subprocess.Popen([*AMPLINT, *args], cwd=root, stdin=stdin, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=limit)
    try:
        stdout, stderr = process.communicate(timeout=WAIT)
    finally:
        process.kill()
    return process.returncode, stdout, stderr


# --------------------------------------------------------------------------- N1


def test_n1_an_include_of_standard_input_does_not_block(tmp_path):
    root = project(tmp_path / "p", b"torch>=1.13\n-r /dev/stdin\n")
    reader, writer = os.pipe()  # `sleep 60 | amplint check .`: input that never comes
    try:
        code, stdout, stderr = run(root, "check", ".", "--no-cache", stdin=reader)
    finally:
        os.close(reader)
        os.close(writer)
    assert code == 1 and "AMP003" in stdout, stderr
    assert "amplint: note: not reading '/dev/stdin' (an include) for the project's torch requirement: not a regular file (a FIFO)" in stderr


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs here")
def test_n1_an_included_fifo_does_not_block(tmp_path):
    root = project(tmp_path / "p", b"-r fifo.txt\n")
    os.mkfifo(root / "fifo.txt")
    code, stdout, stderr = run(root, "check", ".", "--no-cache")
    assert code == 1 and "AMP003" in stdout, stderr
    assert "not reading 'fifo.txt' (an include) for the project's torch requirement: not a regular file (a FIFO)" in stderr


@pytest.mark.skipif(not os.path.exists("/dev/zero"), reason="no /dev/zero")
def test_n1_an_include_of_dev_zero_is_not_read(tmp_path):
    root = project(tmp_path / "p", b"torch>=1.13\n-r /dev/zero\n")
    code, stdout, stderr = run(root, "check", ".", "--no-cache", "-j1", memory=1536 * 2**20)
    assert code == 1 and "AMP003" in stdout, stderr
    assert "not reading '/dev/zero' (an include) for the project's torch requirement: not a regular file (a character device)" in stderr


@pytest.mark.skipif(not os.path.exists("/dev/zero"), reason="no /dev/zero")
def test_n1_a_setup_py_linked_to_dev_zero_is_not_read(tmp_path):
    root = tmp_path / "p"
    root.mkdir()
    (root / "train.py").write_text(BUGGY)
    (root / "pyproject.toml").write_text('[project]\nname="x"\ndependencies=["torch>=2.0,<2.5"]\n')
    os.symlink("/dev/zero", root / "setup.py")
    code, stdout, stderr = run(root, "check", "train.py", "--no-cache", "-j1", memory=1536 * 2**20)
    assert code == 1 and "AMP003" in stdout, stderr
    assert "not reading setup.py for the project's torch requirement: not a regular file (a character device)" in stderr


def test_n1_a_nul_in_an_include_is_a_note_not_an_internal_error(tmp_path):
    root = project(tmp_path / "p", b"torch>=1.13\n-r a\0b\n")
    result = run_amplint("check", ".", "--no-cache", cwd=root)
    assert result.returncode == 1 and "internal error" not in result.stderr, result.stderr
    assert "not reading requirements.txt for the project's torch requirement: binary file (contains NUL bytes), not text" in result.stderr


def test_n1_what_can_be_read_still_declares_the_target(tmp_path):
    root = project(tmp_path / "p", b"torch>=1.13\n-r gone.txt\n-r more.txt\n")
    (root / "more.txt").write_bytes(b"-r " + str(root).encode() + b"/\0x\n")
    notes = []
    declared = declared_torch(str(root), notes)
    assert (declared.version, declared.where) == ((1, 13), "requirements.txt: torch>=1.13")
    assert notes == [
        "not reading 'gone.txt' (an include) for the project's torch requirement: cannot read file: No such file or directory",
        "not reading 'more.txt' (an include) for the project's torch requirement: binary file (contains NUL bytes), not text",
    ]


# --------------------------------------------------------------------------- N5 and O1, O5


def test_n5_a_nul_in_cache_dir_is_a_usage_error(amplint, tmp_path):
    (tmp_path / "train.py").write_text(BUGGY)
    (tmp_path / "pyproject.toml").write_text('[tool.amplint]\ncache-dir = "a\\u0000b"\n')
    result = amplint("check", ".", cwd=tmp_path)
    assert (result.returncode, result.stderr) == (2, f"amplint: error: {tmp_path}/pyproject.toml: `cache-dir` contains a NUL character\n")
    (tmp_path / "pyproject.toml").unlink()
    result = amplint("check", ".", "--config", 'cache-dir = "x\\u0000"', cwd=tmp_path)
    assert result.returncode == 2 and result.stderr.endswith(": `cache-dir` contains a NUL character\n"), result.stderr


@pytest.mark.parametrize("key, value", [("extend-exclude", '["a\\u0000"]'), ("per-file-ignores", '{"a\\u0000" = ["AMP003"]}'), ("output-format", '"full\\u0000"')])
def test_n5_a_nul_in_any_value_is_a_usage_error(amplint, tmp_path, key, value):
    (tmp_path / "train.py").write_text(BUGGY)
    result = amplint("check", ".", "--config", f"{key} = {value}", cwd=tmp_path)
    assert result.returncode == 2 and result.stderr.endswith(f": `{key}` contains a NUL character\n"), result.stderr


def test_n5_an_analysis_limit_too_large_for_a_count_is_a_usage_error(amplint, tmp_path):
    (tmp_path / "train.py").write_text(BUGGY)
    result = amplint("check", ".", "--analysis-limit", "1e308", cwd=tmp_path)
    assert result.returncode == 2 and "argument --analysis-limit: not a positive factor of at most 1000: '1e308'" in result.stderr
    result = amplint("check", ".", "--config", "analysis-limit = 1e308", cwd=tmp_path)
    assert result.returncode == 2 and "analysis-limit must be a positive number (a factor on the default limits) of at most 1000, not 1e+308" in result.stderr
    assert amplint("check", ".", "-q", "--no-cache", "--analysis-limit", "1000", cwd=tmp_path).returncode == 1


def test_o1_the_configured_jobs_are_at_most_one_per_cpu(amplint, tmp_path):
    (tmp_path / "train.py").write_text(BUGGY)
    (tmp_path / "pyproject.toml").write_text("[tool.amplint]\njobs = 5000\n")
    shown = amplint("--show-settings", ".", cwd=tmp_path).stdout
    assert f"jobs = {os.cpu_count()}\n" in shown
    # The command line is the user's own: as many as asked for.
    assert "jobs = 40\n" in amplint("--show-settings", "-j", "40", ".", cwd=tmp_path).stdout
    result = amplint("-j", "-1", ".", cwd=tmp_path)
    assert result.returncode == 2 and "argument -j/--jobs: not a whole number: '-1'" in result.stderr


def test_o5_an_empty_selection_on_the_command_line_names_no_file(amplint, tmp_path):
    (tmp_path / "train.py").write_text(BUGGY)
    result = amplint("--config", "select = []", ".", cwd=tmp_path)
    assert result.returncode == 2 and "None" not in result.stderr and "--config: `select` names no rule" in result.stderr, result.stderr
