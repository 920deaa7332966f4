"""The `amplint` command end to end, through a subprocess: exit codes, selection, config, noqa, bad files."""

import json
import os
import textwrap
from pathlib import Path

import pytest

from amplint.rules import ALL_RULES

from conftest import BUGGY, run_amplint

CLEAN = BUGGY.replace(
    "    torch.nn.utils.clip_grad_norm_", "    scaler.unscale_(optimizer)\n    torch.nn.utils.clip_grad_norm_"
)
assert CLEAN != BUGGY
# Two findings in one file: AMP004 and AMP006.
LOOP_IN_AUTOCAST = textwrap.dedent(
    """\
    import torch

    with torch.autocast("cuda", dtype=torch.bfloat16):
        for x in loader:
            loss = model(x).sum()
            loss.backward()
            optimizer.step()
    """
)


def test_exit_codes_and_text_output(project):
    # Through a real `python -m amplint` process: exit codes and output as a shell sees them.
    amplint = run_amplint
    root = project({"buggy.py": BUGGY, "clean.py": CLEAN})
    result = amplint("buggy.py", "clean.py", cwd=root)
    assert result.returncode == 1, result.stderr
    # ruff's layout: code and short title, location, code frame, help.
    lines = result.stdout.splitlines()
    assert lines[0] == "AMP003 [*] `torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)` clips gradients that still carry the loss scale"
    assert lines[1:8] == [
        " --> buggy.py:8:5",
        "  |",
        "7 |     scaler.scale(loss).backward()",
        "8 |     torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)",
        "  |     " + "^" * 55,
        "9 |     scaler.step(optimizer)",
        "  |",
    ]
    assert lines[8].startswith("help: The loss scale is 65536 at start")
    assert lines[8].endswith("Call `scaler.unscale_(optimizer)` before clipping.")  # the fix, in the user's own names
    assert lines[9] == "fix: Unscale before clipping: `scaler.unscale_(optimizer)`"
    assert lines[10:] == ["", "Found 1 error.", "[*] 1 fixable with the `--fix` option."]
    assert max(len(line) for line in lines if not line.startswith("help:")) < 120
    clean = amplint("clean.py", cwd=root)
    assert clean.returncode == 0 and "All checks passed!" in clean.stdout


def test_check_subcommand_and_directory_default(amplint, project):
    root = project({"pkg/train.py": BUGGY})
    assert amplint("check", cwd=root).returncode == 1
    assert amplint(cwd=root).returncode == 1
    result = amplint("--concise", cwd=root)
    assert result.stdout.splitlines()[0].startswith(os.path.join("pkg", "train.py") + ":8:5: AMP003")
    assert " | " not in result.stdout


def test_exit_zero(amplint, project):
    root = project({"buggy.py": BUGGY})
    assert amplint("--exit-zero", "buggy.py", cwd=root).returncode == 0


def test_json_output_has_ruff_shape(amplint, project):
    root = project({"loop.py": LOOP_IN_AUTOCAST})
    result = amplint("--output-format", "json", "loop.py", cwd=root)
    assert result.returncode == 1
    items = json.loads(result.stdout)
    assert [(i["code"], i["location"]["row"], i["location"]["column"]) for i in items] == [("AMP006", 6, 9), ("AMP004", 7, 9)]
    first = items[0]
    assert first["filename"] == str(root / "loop.py")
    assert first["end_location"] == {"row": 6, "column": 24}
    # The region spans the loop: no fix moves a backward out of that.
    assert first["fix"] is None
    assert first["name"] == "backward-inside-autocast"
    assert first["url"].endswith("#amp006")


def test_statistics(amplint, project):
    root = project({"a.py": LOOP_IN_AUTOCAST, "b.py": LOOP_IN_AUTOCAST})
    result = amplint("--statistics", ".", cwd=root)
    assert result.returncode == 1
    assert result.stdout.split("\n")[:2] == ["2\tAMP004\tstep-inside-autocast", "2\tAMP006\tbackward-inside-autocast"]


@pytest.mark.parametrize(
    "args, codes",
    [
        ([], {"AMP004", "AMP006"}),
        (["--select", "AMP004"], {"AMP004"}),
        (["--select", "AMP00"], {"AMP004", "AMP006"}),
        (["--select", "ALL", "--ignore", "AMP006"], {"AMP004"}),
        (["--ignore", "AMP"], set()),
        (["--select", "AMP006", "--ignore", "AMP"], {"AMP006"}),  # the more specific selector wins
        (["--select", "AMP001", "--extend-select", "AMP004"], {"AMP004"}),
        (["--select", "amp004,AMP006"], {"AMP004", "AMP006"}),
    ],
)
def test_select_and_ignore(amplint, project, args, codes):
    root = project({"loop.py": LOOP_IN_AUTOCAST})
    result = amplint("--output-format", "json", *args, "loop.py", cwd=root)
    assert {item["code"] for item in json.loads(result.stdout)} == codes


def test_unknown_selector_is_a_usage_error(amplint, project):
    root = project({"loop.py": LOOP_IN_AUTOCAST})
    result = amplint("--select", "E501", "loop.py", cwd=root)
    assert result.returncode == 2
    assert "unknown rule selector `E501`" in result.stderr


def test_pyproject_configuration(amplint, project):
    root = project(
        {
            "pyproject.toml": textwrap.dedent(
                """\
                [tool.amplint]
                ignore = ["AMP006"]
                extend-exclude = ["generated"]
                per-file-ignores = { "scripts/*.py" = ["AMP004"] }
                """
            ),
            "train.py": LOOP_IN_AUTOCAST,
            "generated/train.py": LOOP_IN_AUTOCAST,
            "scripts/bench.py": LOOP_IN_AUTOCAST,
        }
    )
    result = amplint("--output-format", "json", cwd=root)
    found = sorted((Path(i["filename"]).relative_to(root).as_posix(), i["code"]) for i in json.loads(result.stdout))
    assert found == [("train.py", "AMP004")]
    # The config is found from a subdirectory too, and the command line wins.
    result = amplint("--output-format", "json", "--select", "AMP006", "scripts", cwd=root)
    assert [i["code"] for i in json.loads(result.stdout)] == ["AMP006"]
    # --isolated ignores it.
    result = amplint("--output-format", "json", "--isolated", "train.py", cwd=root)
    assert sorted(i["code"] for i in json.loads(result.stdout)) == ["AMP004", "AMP006"]


def test_bad_configuration_is_a_clear_error(amplint, project):
    root = project({"pyproject.toml": "[tool.amplint]\nselct = ['AMP001']\n", "train.py": CLEAN})
    result = amplint(cwd=root)
    assert result.returncode == 2
    assert "unknown key(s) in [tool.amplint]: selct" in result.stderr
    root = project({"pyproject.toml": "[tool.amplint]\nselect = 'AMP001'\n"})
    assert "must be a list of strings" in amplint(cwd=root).stderr


def test_noqa(amplint, project):
    source = LOOP_IN_AUTOCAST.replace("loss.backward()", "loss.backward()  # noqa: AMP006").replace(
        "optimizer.step()", "optimizer.step()  # noqa: E501"
    )
    root = project({"a.py": source, "b.py": LOOP_IN_AUTOCAST.replace("optimizer.step()", "optimizer.step()  # noqa")})
    codes = lambda name: [i["code"] for i in json.loads(amplint("--output-format", "json", name, cwd=root).stdout)]
    assert codes("a.py") == ["AMP004"]  # another tool's code suppresses nothing of ours
    assert codes("b.py") == ["AMP006"]
    root = project({"c.py": "# amplint: noqa: AMP004\n" + LOOP_IN_AUTOCAST, "d.py": "# amplint: noqa\n" + LOOP_IN_AUTOCAST})
    assert codes("c.py") == ["AMP006"]
    assert codes("d.py") == []
    # A "# noqa" inside a string is not a comment.
    root = project({"e.py": LOOP_IN_AUTOCAST.replace("loss.backward()", "loss.backward(); s = '# noqa'")})
    assert codes("e.py") == ["AMP006", "AMP004"]


def test_bad_files_are_reported_and_the_run_goes_on(amplint, project):
    root = project(
        {
            "good.py": BUGGY,
            "syntax.py": "import torch\nwith torch.autocast('cuda'):\n    x = (\n",
            "syntax_plain.py": "def f(:\n",
            "binary.py": b"\x00\x01\x02scale\xff",
            "latin1.py": "# -*- coding: latin-1 -*-\n# caf\xe9\nimport torch\n".encode("latin-1") + BUGGY.encode(),
            "bad_utf8.py": b"import torch\nx = '\xff\xfe'\nscaler = 1\n",
            "bad_coding.py": b"# -*- coding: klingon -*-\nx = 1\n",
            "huge.py": b"x = 1  # scale\n" * (9 * 1024 * 1024 // 15),
        }
    )
    result = amplint("--concise", ".", "missing.py", cwd=root)
    assert result.returncode == 2
    assert "good.py:8:5: AMP003" in result.stdout
    assert "latin1.py:11:5: AMP003" in result.stdout  # PEP 263 coding lines are honoured
    errors = result.stderr
    assert "syntax.py: syntax error at 3:" in errors and "was never closed" in errors
    # A file with no AMP words is not parsed: its syntax errors are Python's to report (the
    # default, `--syntax-errors analysed`); everything that stops it being read still is.
    assert "syntax_plain.py" not in errors
    assert "binary.py: binary file" in errors
    assert "bad_utf8.py: cannot decode as utf-8" in errors
    assert "bad_coding.py: cannot decode" in errors
    assert "huge.py: file too large to lint" in errors
    assert "missing.py: no such file or directory" in errors
    # Nothing the user wrote is touched.
    assert (root / "good.py").read_text() == BUGGY


@pytest.mark.skipif(os.geteuid() == 0 if hasattr(os, "geteuid") else True, reason="root can read any file")
def test_unreadable_file(amplint, project):
    root = project({"secret.py": BUGGY, "good.py": BUGGY})
    (root / "secret.py").chmod(0)
    result = amplint("--concise", ".", cwd=root)
    assert result.returncode == 2
    assert "secret.py: cannot read file" in result.stderr


def test_discovery_respects_gitignore_and_default_excludes(amplint, project):
    root = project(
        {
            ".gitignore": "ignored/\n*_gen.py\n",
            "train.py": BUGGY,
            "ignored/train.py": BUGGY,
            "model_gen.py": BUGGY,
            ".venv/lib/site.py": BUGGY,
            "build/lib/train.py": BUGGY,
            "sub/__pycache__/x.py": BUGGY,
            "notes.txt": BUGGY,
        }
    )
    (root / ".git").mkdir()
    result = amplint("--concise", "-q", cwd=root)
    assert sorted(line.split(":")[0] for line in result.stdout.splitlines()) == ["train.py"]
    result = amplint("--concise", "-q", "--no-respect-gitignore", cwd=root)
    assert len(result.stdout.splitlines()) == 3
    result = amplint("--concise", "-q", "--extend-exclude", "train.py", cwd=root)
    assert result.stdout == "" and result.returncode == 0
    # An explicitly named file is linted even when excluded, unless --force-exclude.
    assert amplint("ignored/train.py", cwd=root).returncode == 1
    assert amplint("--force-exclude", "ignored/train.py", cwd=root).returncode == 0


def test_parallel_and_serial_agree(amplint, project):
    files = {f"m{i:02d}.py": (BUGGY if i % 3 else LOOP_IN_AUTOCAST) for i in range(24)}
    root = project(files)
    serial = amplint("--output-format", "json", "-j", "1", cwd=root)
    parallel = amplint("--output-format", "json", "-j", "2", cwd=root)
    assert json.loads(serial.stdout) == json.loads(parallel.stdout)
    assert len(json.loads(serial.stdout)) == 24 + 8


def test_rule_command(amplint):
    listing = amplint("rule", "--all")
    assert listing.returncode == 0
    assert [line.split()[0] for line in listing.stdout.splitlines()] == [rule.code for rule in ALL_RULES]
    assert [line.split()[2] for line in listing.stdout.splitlines()] == [rule.severity for rule in ALL_RULES]
    page = amplint("rule", "AMP003")
    assert page.returncode == 0
    assert page.stdout.startswith("# AMP003 clip-before-unscale\n\nSeverity: error · safe fix\n")
    assert "## Why is this bad?" in page.stdout and "scaler.unscale_(optimizer)" in page.stdout
    assert amplint("rule", "clip-before-unscale").stdout == page.stdout
    missing = amplint("rule", "AMP999")
    assert missing.returncode == 2 and "unknown rule" in missing.stderr


def test_version_and_help(amplint):
    assert amplint("--version").stdout.startswith("amplint ")
    help_text = amplint("--help").stdout
    assert "--select" in help_text and "amplint rule" in help_text and "verify" in help_text


def test_console_script_matches_module(project):
    import shutil
    import subprocess

    exe = shutil.which("amplint")
    if exe is None:
        pytest.skip("amplint is not installed as a console script")
    root = project({"loop.py": LOOP_IN_AUTOCAST})
    result = subprocess.run([exe, "--concise", "loop.py"], cwd=root, capture_output=True, text=True)
    assert result.returncode == 1 and "AMP004" in result.stdout


def test_configuration_edge_cases_are_errors_not_crashes(amplint, project):
    # `tool` that is not a table: no [tool.amplint], defaults apply, no traceback.
    root = project({"pyproject.toml": "tool = 1\n", "loop.py": LOOP_IN_AUTOCAST})
    result = amplint("loop.py", cwd=root)
    assert result.returncode == 1 and "Traceback" not in result.stderr
    # A broken file that meant to configure amplint is reported, not skipped in silence.
    root = project({"pyproject.toml": "[tool.amplint\nselect = ['AMP003']\n"})
    result = amplint("loop.py", cwd=root)
    assert result.returncode == 2 and "is not valid TOML" in result.stderr
    # per-file-ignores codes are checked like every other selector.
    root = project({"pyproject.toml": '[tool.amplint]\nper-file-ignores = { "*.py" = ["AMP9"] }\n'})
    result = amplint("loop.py", cwd=root)
    assert result.returncode == 2 and "unknown rule selector `AMP9`" in result.stderr


def test_trailing_file_noqa_covers_its_line_only(amplint, project):
    source = LOOP_IN_AUTOCAST.replace("loss.backward()", "loss.backward()  # amplint: noqa")
    root = project({"a.py": source})
    result = amplint("--output-format", "json", "a.py", cwd=root)
    assert [i["code"] for i in json.loads(result.stdout)] == ["AMP004"]


def test_quiet_drops_only_the_summary(amplint, project):
    root = project({"All checks.py": LOOP_IN_AUTOCAST})
    result = amplint("-q", "--concise", "All checks.py", cwd=root)
    assert [line.split(":")[0] for line in result.stdout.splitlines()] == ["All checks.py", "All checks.py"]


def test_deeply_nested_valid_code_is_linted(amplint, project):
    terms = " + ".join(f"'s{i}'" for i in range(1500))
    root = project({"deep.py": BUGGY.replace("import torch\n", f"import torch\nx = {terms}\n")})
    # ~0.5 s of CPU alone; a generous budget, so that a loaded machine cannot fail it (the
    # budget has tests of its own).
    result = amplint("--concise", "--file-budget", "20", "deep.py", cwd=root)
    assert result.returncode == 1, result.stderr
    assert "deep.py:9:5: AMP003" in result.stdout


def test_an_empty_directory_warns_and_passes(amplint, tmp_path):
    result = amplint(".", cwd=tmp_path)
    assert result.returncode == 0
    assert "no Python files or notebooks found under ." in result.stderr


def test_a_function_too_complex_to_follow_is_named_and_counted(amplint, project):
    # Fourteen flags each tested twice around AMP calls: 2**14 ways that cannot be merged.
    branches = "\n".join(
        f"    if c{i}:\n        scaler.scale(l{i}).backward()\n    else:\n        l{i}.backward()\n"
        f"    if c{i}:\n        scaler.step(o{i})\n    else:\n        o{i}.step()"
        for i in range(14)
    )
    root = project({"hard.py": f"import torch\ndef train(scaler):\n{branches}\n", "good.py": BUGGY})
    result = amplint("--concise", ".", cwd=root)
    assert result.returncode == 1 and "good.py:8:5: AMP003" in result.stdout
    assert "hard.py:2:5: note train: too complex to follow within the analysis limit; not analysed" in result.stdout
    assert "Found 1 error; 1 function not analysed." in result.stdout
    stats = amplint("--statistics", ".", cwd=root)
    assert "1\t-\tfunctions too complex to analyse (skipped)" in stats.stdout


def test_a_pyproject_that_is_not_utf8_is_a_configuration_error(amplint, project):
    root = project({"pyproject.toml": b"[tool.amplint]\n# caf\xe9\nselect = ['AMP003']\n", "good.py": BUGGY})
    result = amplint("good.py", cwd=root)
    assert result.returncode == 2
    assert "pyproject.toml is not valid TOML: not UTF-8 (invalid byte at offset 20)" in result.stderr
    assert "internal error" not in result.stderr


def test_python_m_does_not_import_the_linted_projects_modules(amplint, project):
    # `python -m` puts the current directory first on sys.path; a project's own libcst.py
    # must not replace the real one.
    root = project({"libcst.py": "raise SystemExit('the project libcst.py was imported')\n", "good.py": BUGGY})
    result = amplint("--concise", "good.py", cwd=root)
    assert result.returncode == 1 and "good.py:8:5: AMP003" in result.stdout, result.stderr
