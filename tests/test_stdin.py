"""Standard input, as editors use it: `amplint - --stdin-filename train.py`."""

import json
import subprocess
import sys

import pytest

from conftest import BUGGY
from test_notebooks import CLIP, TRAIN


@pytest.mark.parametrize("args", [["-", "--stdin-filename", "train.py"], ["--stdin-filename", "train.py"]])
def test_stdin_is_reported_under_the_given_name(amplint, tmp_path, args):
    result = amplint(*args, cwd=tmp_path, input=BUGGY)
    assert result.returncode == 1, result.stderr
    assert result.stdout.startswith(f"AMP003 [*] `{CLIP}`")
    assert "\n --> train.py:8:5\n" in result.stdout
    assert f"8 |     {CLIP}" in result.stdout  # the frame comes from standard input
    assert not (tmp_path / "train.py").exists()


def test_stdin_without_a_name_is_dash(amplint, tmp_path):
    result = amplint("-", "--output-format", "json", cwd=tmp_path, input=BUGGY)
    assert result.returncode == 1
    (item,) = json.loads(result.stdout)
    assert item["filename"] == "-"
    assert item["location"] == {"row": 8, "column": 5}


def test_clean_stdin(amplint, tmp_path):
    result = amplint("-", "--stdin-filename", "train.py", cwd=tmp_path, input="import torch\n")
    assert (result.returncode, result.stdout) == (0, "All checks passed!\n")


def test_notebook_on_stdin(amplint, tmp_path):
    result = amplint("-", "--stdin-filename", "nbs/train.ipynb", "--concise", cwd=tmp_path, input=TRAIN)
    assert result.returncode == 1, result.stderr
    assert result.stdout.startswith("nbs/train.ipynb:cell 4:7:5: AMP003")
    sarif = json.loads(amplint("--stdin-filename", "nbs/train.ipynb", "--output-format", "sarif", cwd=tmp_path, input=TRAIN).stdout)
    region = sarif["runs"][0]["results"][0]["locations"][0]["physicalLocation"]["region"]
    line = TRAIN.splitlines()[region["startLine"] - 1]
    assert line[region["startColumn"] - 1 : region["endColumn"] - 1] == CLIP


def test_broken_input_is_an_error(amplint, tmp_path):
    result = amplint("--stdin-filename", "n.ipynb", cwd=tmp_path, input='{"cells": [')
    assert result.returncode == 2
    assert "n.ipynb: invalid notebook: not valid JSON" in result.stderr
    syntax = amplint("--stdin-filename", "t.py", cwd=tmp_path, input="with torch.autocast('cuda'):\n  x = (\n")
    assert syntax.returncode == 2 and "t.py: syntax error at 2:7" in syntax.stderr


def test_stdin_is_decoded_like_a_file(tmp_path):
    # Bytes, not text: a PEP 263 coding line is honoured, NUL bytes are refused.
    source = ("# -*- coding: latin-1 -*-\n# caf\xe9\n" + BUGGY).encode("latin-1")

    def run(data):
        command = [sys.executable, "-m", "amplint", "--concise", "--stdin-filename", "t.py"]
        return subprocess.run(command, input=data, capture_output=True, cwd=tmp_path, timeout=60)

    result = run(source)
    assert result.returncode == 1, result.stderr
    assert result.stdout.decode().startswith("t.py:10:5: AMP003")
    binary = run(b"\x00\x01" + source)
    assert binary.returncode == 2 and b"t.py: binary file" in binary.stderr


def test_stdin_uses_the_named_files_configuration(amplint, tmp_path):
    (tmp_path / "proj" / "scripts").mkdir(parents=True)
    (tmp_path / "proj" / "pyproject.toml").write_text(
        '[tool.amplint]\nper-file-ignores = { "scripts/*" = ["AMP003"] }\nextend-exclude = ["generated"]\n'
    )
    ignored = amplint("--stdin-filename", "proj/scripts/train.py", cwd=tmp_path, input=BUGGY)
    assert ignored.returncode == 0, ignored.stdout + ignored.stderr
    linted = amplint("--stdin-filename", "proj/train.py", cwd=tmp_path, input=BUGGY)
    assert linted.returncode == 1
    # An editor sends every file; --force-exclude keeps the excluded ones quiet.
    excluded = amplint("--force-exclude", "--stdin-filename", "proj/generated/train.py", cwd=tmp_path, input=BUGGY)
    assert excluded.returncode == 0 and "AMP003" not in excluded.stdout
    forced = amplint("--stdin-filename", "proj/generated/train.py", cwd=tmp_path, input=BUGGY)
    assert forced.returncode == 1


@pytest.mark.parametrize(
    "args, message",
    [
        (["-", "other.py"], "`-` (standard input) cannot be combined with other paths"),
        (["--stdin-filename", "t.py", "other.py"], "--stdin-filename names standard input"),
    ],
)
def test_usage_errors(amplint, tmp_path, args, message):
    result = amplint(*args, cwd=tmp_path, input=BUGGY)
    assert result.returncode == 2
    assert message in result.stderr
