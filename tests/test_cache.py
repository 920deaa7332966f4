"""The cache: a re-run over unchanged files lints nothing and reports the same; anything a
result depends on (content, rules, settings, imported summaries, the amplint build) changes
its key; concurrent runs and broken cache files cost speed, never correctness."""

import json
import os
import subprocess
import sys
import time

import pytest

from amplint import cache as cache_module
from amplint.cache import Cache, content_digest, result_key
from amplint.driver import Job, Runner
from amplint.rules import ALL_RULES

from conftest import BUGGY

CODES = tuple(rule.code for rule in ALL_RULES)
NOTEBOOK = json.dumps(
    {
        "nbformat": 4,
        "nbformat_minor": 5,
        "metadata": {"kernelspec": {"name": "python3", "language": "python"}},
        "cells": [
            {"cell_type": "markdown", "metadata": {}, "source": ["# training"]},
            {"cell_type": "code", "metadata": {}, "execution_count": None, "outputs": [], "source": BUGGY.splitlines(True)},
        ],
    }
)


def _old(path, seconds=10):
    """Back-date a file, as if written long before the run (a fresh file's stat is not trusted)."""
    past = time.time() - seconds
    os.utime(path, (past, past))


@pytest.fixture
def project(tmp_path):
    files = {"train.py": BUGGY, "clean.py": "x = 1\n", "broken.py": "import torch  # autocast\ndef (:\n", "nb.ipynb": NOTEBOOK}
    for name, text in files.items():
        (tmp_path / name).write_text(text)
        _old(tmp_path / name)
    return tmp_path


def lint(project, cache_dir, codes=CODES, fingerprint="test-build", names=("train.py", "clean.py", "broken.py", "nb.ipynb")):
    cache = Cache(str(cache_dir), fingerprint=fingerprint)
    with Runner(workers=1, cache=cache) as runner:
        results = runner.lint([Job(str(project / name), codes) for name in names])
    return results, runner


def test_a_warm_run_lints_nothing_and_reports_the_same(project, tmp_path):
    cold, runner = lint(project, tmp_path / "cache")
    assert runner.linted == 4
    warm, runner = lint(project, tmp_path / "cache")
    assert runner.linted == 0
    assert [(r.path, r.findings, r.error, r.skipped, r.summary, r.imports) for r in warm] == [
        (r.path, r.findings, r.error, r.skipped, r.summary, r.imports) for r in cold
    ]
    # Code frames: the text, and for the notebook its cells, as linting kept them.
    assert [(r.source, r.cells is not None) for r in warm] == [(r.source, r.cells is not None) for r in cold]
    assert warm[3].findings[0].cell == 2 and warm[3].findings[0].file_span is not None
    assert warm[2].error.message.startswith("syntax error")


def test_a_changed_file_is_linted_again_and_only_it(project, tmp_path):
    lint(project, tmp_path / "cache")
    (project / "clean.py").write_text(BUGGY)
    results, runner = lint(project, tmp_path / "cache")
    assert runner.linted == 1
    assert [f.code for f in results[1].findings] == ["AMP003"]


def test_an_edit_that_keeps_size_and_mtime_is_still_seen(project, tmp_path):
    lint(project, tmp_path / "cache")
    path = project / "train.py"
    before = os.stat(path)
    path.write_text(BUGGY.replace("clip_grad_norm_", "clip_grad_value"))  # same length
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))  # and the same mtime
    results, runner = lint(project, tmp_path / "cache")
    assert runner.linted == 1 and results[0].findings == []


def test_a_file_written_just_before_the_run_is_hashed_again(project, tmp_path):
    (project / "train.py").write_text(BUGGY)  # mtime: now
    lint(project, tmp_path / "cache")
    cache = Cache(str(tmp_path / "cache"), fingerprint="test-build")
    st = os.stat(project / "train.py")
    assert cache.trusted_digest(str(project / "train.py"), st) is None  # racily clean
    assert cache.trusted_digest(str(project / "clean.py"), os.stat(project / "clean.py")) is not None
    _, runner = lint(project, tmp_path / "cache")
    assert runner.linted == 0  # hashed, found unchanged: not linted


def test_other_rules_or_another_build_miss(project, tmp_path):
    lint(project, tmp_path / "cache")
    _, runner = lint(project, tmp_path / "cache", codes=("AMP003",))
    assert runner.linted == 4
    _, runner = lint(project, tmp_path / "cache", fingerprint="another-build")
    assert runner.linted == 4
    _, runner = lint(project, tmp_path / "cache")
    assert runner.linted == 0


def test_the_key_names_everything_a_result_depends_on():
    base = result_key("d", "a.py", ("AMP001",), {}, None)
    assert base == result_key("d", "a.py", ["AMP001"], {}, None)
    variants = [
        result_key("e", "a.py", ("AMP001",)),
        result_key("d", "b.py", ("AMP001",)),
        result_key("d", "a.py", ("AMP002",)),
        result_key("d", "a.py", ("AMP001",), {"setting": 1}),
        result_key("d", "a.py", ("AMP001",), {}, {"utils.py": {"functions": {}}}),
    ]
    assert len({base, *variants}) == 6


def test_the_build_fingerprint_follows_amplints_own_source(monkeypatch):
    first = cache_module.engine_fingerprint()
    assert first == cache_module.engine_fingerprint()
    real = cache_module._own_sources
    monkeypatch.setattr(cache_module, "_own_sources", lambda: [*real(), __file__])
    assert cache_module.engine_fingerprint() != first


def test_phase_two_results_are_keyed_by_the_summaries_they_used(project, tmp_path):
    path = str(project / "train.py")
    cache = Cache(str(tmp_path / "cache"), fingerprint="test-build")
    with Runner(cache=cache) as runner:
        runner.lint([Job(path, CODES, {"utils.py": {"version": 1, "functions": {}}})])
        runner.lint([Job(path, CODES, {"utils.py": {"version": 1, "functions": {}}})])
        assert runner.linted == 1
        runner.lint([Job(path, CODES, {"utils.py": {"version": 1, "functions": {"f": {}}}})])
        assert runner.linted == 2


def test_budget_overruns_and_crashes_are_not_cached(project, tmp_path, monkeypatch):
    import amplint.engine

    monkeypatch.setattr(amplint.engine, "lint_bytes", lambda *a, **k: [][1])
    results, _ = lint(project, tmp_path / "cache", names=("train.py",))
    assert results[0].error.message.startswith("internal error while linting")
    monkeypatch.undo()
    results, runner = lint(project, tmp_path / "cache", names=("train.py",))
    assert runner.linted == 1 and [f.code for f in results[0].findings] == ["AMP003"]


def test_a_corrupt_cache_is_a_miss(project, tmp_path):
    lint(project, tmp_path / "cache")
    for shard in (tmp_path / "cache" / "test-build").glob("files-*.json"):
        shard.write_text("{not json")
    results, runner = lint(project, tmp_path / "cache")
    assert runner.linted == 4 and [f.code for f in results[0].findings] == ["AMP003"]
    _, runner = lint(project, tmp_path / "cache")
    assert runner.linted == 0


def test_summaries_are_kept_by_content(tmp_path):
    cache = Cache(str(tmp_path / "cache"), fingerprint="test-build")
    path = tmp_path / "utils.py"
    path.write_text("x = 1\n")
    _old(path)
    digest = content_digest(path.read_bytes())
    cache.note_content(str(path), os.stat(path), digest, time.time_ns())
    cache.put_summary(str(path), digest, {"functions": {"step": {}}})
    cache.save()
    again = Cache(str(tmp_path / "cache"), fingerprint="test-build")
    assert again.summary(str(path), digest) == {"functions": {"step": {}}}
    assert again.summary(str(path), content_digest(b"y = 2\n")) is None


# --------------------------------------------------------------------------- the command


def test_the_command_caches_in_the_project_root_like_ruff(amplint, project):
    first = amplint("train.py", "clean.py", cwd=project)
    assert first.returncode == 1
    cache_dir = project / ".amplint_cache"
    assert (cache_dir / "CACHEDIR.TAG").read_text().startswith("Signature: 8a477f597d28d172789f06886806bc55")
    assert (cache_dir / ".gitignore").read_text().splitlines()[-1] == "*"
    second = amplint("train.py", "clean.py", cwd=project)
    assert (second.returncode, second.stdout, second.stderr) == (first.returncode, first.stdout, first.stderr)
    assert "\n8 |     torch.nn.utils.clip_grad_norm_" in second.stdout  # frames from the cache too


def test_no_cache_cache_dir_and_the_environment(amplint, project, tmp_path):
    assert amplint("--no-cache", "train.py", cwd=project).returncode == 1
    assert not (project / ".amplint_cache").exists()
    assert amplint("--cache-dir", str(tmp_path / "elsewhere"), "train.py", cwd=project).returncode == 1
    assert (tmp_path / "elsewhere" / "CACHEDIR.TAG").exists()
    assert amplint("train.py", cwd=project, env={"AMPLINT_CACHE_DIR": str(tmp_path / "env")}).returncode == 1
    assert (tmp_path / "env" / "CACHEDIR.TAG").exists()
    assert not (project / ".amplint_cache").exists()


def test_concurrent_runs_share_a_cache_safely(project, tmp_path):
    for index in range(30):
        (project / f"copy{index}.py").write_text(BUGGY if index % 2 else "y = 1\n")
    command = [sys.executable, "-m", "amplint", "--concise", "--cache-dir", str(tmp_path / "shared"), "."]
    runs = [subprocess.Popen(command, cwd=project, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(3)]
    outputs = [run.communicate(timeout=300) + (run.returncode,) for run in runs]
    assert len(set(outputs)) == 1, outputs
    again = subprocess.run(command, cwd=project, capture_output=True, text=True, timeout=300)
    assert (again.stdout, again.stderr, again.returncode) == outputs[0]
