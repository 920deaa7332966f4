"""The cache: a re-run over unchanged files lints nothing and reports the same; anything a
result depends on (content, rules, settings, imported summaries, the amplint build) changes
its key; concurrent runs and broken cache files cost speed, never correctness. It touches
nothing it did not make, and believes nothing this user did not write (docs/cache.md)."""

import json
import os
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from amplint.run import cache as cache_module
from amplint.run.cache import Cache, result_key
from amplint.run.driver import Job, Runner
from amplint.rules import ALL_RULES

from conftest import BUGGY, REPO

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


@pytest.fixture(autouse=True)
def user_cache_home(tmp_path_factory, monkeypatch):
    """This user's cache key lives in the test's own $XDG_CACHE_HOME (outside the project)."""
    home = tmp_path_factory.mktemp("xdg")
    monkeypatch.delenv(cache_module.ENV_KEY_FILE, raising=False)
    monkeypatch.delenv(cache_module.ENV_CACHE_DIR, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(home))
    return home


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


def test_a_warm_run_of_a_project_reads_no_facts(project, tmp_path, monkeypatch):
    """The summaries, imports and ambient facts (most of the cache's bytes) are for linting
    other files; a run over the same files only reports, and never reads their shards. A
    lint of one file reads them with its result."""
    names = ("train.py", "clean.py", "broken.py", "nb.ipynb")

    def run(paths=names):
        with Runner(workers=1, cache=Cache(str(tmp_path / "cache"), fingerprint="test-build")) as runner:
            return runner.lint_project([Job(str(project / name), CODES) for name in paths], facts=False), runner

    cold, _ = run()
    assert list((tmp_path / "cache" / "test-build").glob("facts-*.json"))
    read = []
    parse = Cache._parse_shard
    monkeypatch.setattr(Cache, "_parse_shard", lambda self, data, name: read.append(name) or parse(self, data, name))
    warm, runner = run()
    assert runner.linted == 0 and read and not [name for name in read if name.startswith("facts-")]
    assert [(r.path, r.findings, r.error, r.skipped) for r in warm] == [(r.path, r.findings, r.error, r.skipped) for r in cold]
    (one,), _ = run(("train.py",))  # another set of files: its result comes with its facts
    assert one.imports == cold[0].imports and one.imports
    assert [name for name in read if name.startswith("facts-")]


def test_a_warm_fix_follows_another_modules_functions_as_the_lint_did(amplint, tmp_path):
    """A run that fixes takes its remembered results with their facts: the step fixed after a
    helper of another module scaled the backward, warm as cold."""
    root = tmp_path / "project"
    root.mkdir()
    (root / "helpers.py").write_text("import torch\n\n\ndef scaled_backward(scaler, loss):\n    scaler.scale(loss).backward()\n")
    (root / "train.py").write_text(
        "import torch\n\nfrom helpers import scaled_backward\n\n\ndef train(model, optimizer, loader):\n"
        '    scaler = torch.amp.GradScaler("cuda")\n    for x in loader:\n        with torch.autocast("cuda"):\n'
        "            loss = model(x)\n        scaled_backward(scaler, loss)\n        optimizer.step()\n        scaler.update()\n"
    )
    cache = str(tmp_path / "cache")
    cold = amplint("--no-cache", "--diff", ".", cwd=root).stdout
    assert "+        scaler.step(optimizer)" in cold
    assert "AMP005" in amplint("--cache-dir", cache, "--concise", ".", cwd=root).stdout  # remembers the run
    assert amplint("--cache-dir", cache, "--diff", ".", cwd=root).stdout == cold


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
    # Summaries by what they say, not which object holds it (each one's digest is kept a run).
    summary = {"version": 1, "functions": {"f": {"params": ["scaler"]}}}
    key = result_key("d", "a.py", ("AMP001",), {}, {"utils.py": summary})
    assert key == result_key("d", "a.py", ("AMP001",), {}, {"utils.py": json.loads(json.dumps(summary))})
    assert key != result_key("d", "a.py", ("AMP001",), {}, {"optim.py": summary})
    assert key != result_key("d", "a.py", ("AMP001",), {}, {"utils.py": {**summary, "functions": {}}})
    assert key != result_key("d", "a.py", ("AMP001",), {}, {"utils.py": summary, "optim.py": summary})


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
    import amplint.lint.engine

    monkeypatch.setattr(amplint.lint.engine, "lint_bytes", lambda *a, **k: [][1])
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


# --------------------------------------------------------------------------- the cache owns only what it made


def _aged(path, days):
    past = time.time() - days * 24 * 3600
    os.utime(path, (past, past), follow_symlinks=False)


def test_cache_dir_dot_keeps_the_projects_gitignore(amplint, project):
    """D1: `--cache-dir .` (an existing directory that is not amplint's) gets an
    .amplint_cache of its own; the project's .gitignore is not touched."""
    (project / ".gitignore").write_text("data/\n*.ckpt\n")
    os.chmod(project / ".gitignore", 0o644)
    before = {p.name for p in project.iterdir()}
    first = amplint("--cache-dir", ".", "train.py", cwd=project)
    assert first.returncode == 1 and first.stderr == ""
    assert (project / ".gitignore").read_text() == "data/\n*.ckpt\n"
    assert stat.S_IMODE(os.stat(project / ".gitignore").st_mode) == 0o644
    assert {p.name for p in project.iterdir()} == before | {".amplint_cache"}
    assert not (project / "CACHEDIR.TAG").exists()
    assert (project / ".amplint_cache" / "CACHEDIR.TAG").is_file()
    assert "train.py:8:5: AMP003" in amplint("--no-cache", "--concise", ".", cwd=project).stdout  # still found
    again = amplint("--cache-dir", ".", "train.py", cwd=project)
    assert (again.returncode, again.stdout, again.stderr) == (first.returncode, first.stdout, first.stderr)


def test_a_cache_dir_in_sources_deletes_nothing_of_the_users(amplint, project):
    """D2: old directories with a `lock`, even named like amplint's builds, are the user's."""
    src = project / "src"
    (src / "old").mkdir(parents=True)
    (src / "old" / "data.txt").write_text("precious\n")
    (src / "old" / "lock").write_text("")
    lookalike = src / "0.0.1-0123456789abcdef"
    lookalike.mkdir()
    (lookalike / "lock").write_text("")
    (lookalike / "files-00.json").write_text("mine\n")
    for path in (src / "old" / "lock", src / "old", lookalike / "lock", lookalike / "files-00.json", lookalike):
        _aged(path, 30)
    result = amplint("train.py", cwd=project, env={"AMPLINT_CACHE_DIR": str(src)})
    assert result.returncode == 1
    assert (src / "old" / "data.txt").read_text() == "precious\n" and (src / "old" / "lock").exists()
    assert (lookalike / "files-00.json").read_text() == "mine\n"
    assert sorted(p.name for p in src.iterdir()) == [".amplint_cache", "0.0.1-0123456789abcdef", "old"]


def test_only_provably_stale_builds_are_removed(tmp_path):
    """Under amplint's own root: an old build of its name holding only its files goes; one
    holding anything else, a link named like a build, and a fresh build stay."""
    cache_dir = tmp_path / "cache"
    Cache(str(cache_dir), fingerprint="0.1.0-aaaaaaaaaaaaaaaa")._writable("x.py")  # nothing to save: no root yet
    first = Cache(str(cache_dir), fingerprint="0.1.0-aaaaaaaaaaaaaaaa")
    first.put(str(tmp_path / "x.py"), "k", {})
    first.save()
    old_build = cache_dir / "0.1.0-aaaaaaaaaaaaaaaa"
    assert sorted(p.name for p in old_build.iterdir())[-1] == "lock"
    extra = cache_dir / "0.1.0-bbbbbbbbbbbbbbbb"
    extra.mkdir()
    (extra / "notes.txt").write_text("mine\n")
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "lock").write_text("")
    (cache_dir / "0.1.0-cccccccccccccccc").symlink_to(victim)
    fresh = cache_dir / "0.1.0-dddddddddddddddd"
    fresh.mkdir()
    (fresh / "lock").write_text("")
    for path in (*old_build.iterdir(), old_build, extra / "notes.txt", extra, cache_dir / "0.1.0-cccccccccccccccc"):
        _aged(path, 30)
    (tmp_path / "x.py").write_text("x = 1\n")
    second = Cache(str(cache_dir), fingerprint="0.2.0-eeeeeeeeeeeeeeee")
    second.put(str(tmp_path / "x.py"), "k", {})
    second.save()
    assert not old_build.exists()
    assert (extra / "notes.txt").exists() and (cache_dir / "0.1.0-cccccccccccccccc").is_symlink()
    assert (victim / "lock").exists() and fresh.exists()


def test_a_symlinked_cache_in_the_tree_is_not_followed(amplint, project, tmp_path):
    """D3: a repository shipping `.amplint_cache` as a link to elsewhere gets no cache and
    one note; nothing is written or removed at the link's target."""
    victim = tmp_path / "victim"
    (victim / "old").mkdir(parents=True)
    (victim / ".gitignore").write_text("mine\n")
    (victim / "old" / "important.db").write_text("data\n")
    (victim / "old" / "lock").write_text("")
    _aged(victim / "old" / "lock", 20)
    _aged(victim / "old", 20)
    (project / "pyproject.toml").write_text('[project]\nname = "x"\n')
    (project / ".amplint_cache").symlink_to(victim)
    before = sorted(str(p.relative_to(victim)) for p in victim.rglob("*"))
    result = amplint("train.py", cwd=project)
    assert result.returncode == 1 and "AMP003" in result.stdout
    assert result.stderr.count("amplint: note: not caching:") == 1 and "symbolic link" in result.stderr
    assert sorted(str(p.relative_to(victim)) for p in victim.rglob("*")) == before
    assert (victim / ".gitignore").read_text() == "mine\n"


def test_a_link_the_user_names_is_followed(amplint, project, tmp_path):
    real = tmp_path / "real"
    (tmp_path / "link").symlink_to(real, target_is_directory=True)
    real.mkdir()
    assert amplint("--cache-dir", str(tmp_path / "link"), "train.py", cwd=project).returncode == 1
    assert (real / ".amplint_cache" / "CACHEDIR.TAG").is_file()  # an existing directory: its own inside


def test_a_directory_in_the_tree_that_is_not_amplints_is_left_alone(amplint, project, tmp_path):
    """A `.amplint_cache` that amplint did not make (no marker of its own), or a named path
    that is a file, is not written into: no cache, one note, the same findings."""
    (project / ".amplint_cache").mkdir()
    (project / ".amplint_cache" / "notes.txt").write_text("mine\n")
    result = amplint("train.py", cwd=project)
    assert result.returncode == 1 and result.stderr.count("note: not caching") == 1
    assert [p.name for p in (project / ".amplint_cache").iterdir()] == ["notes.txt"]
    (tmp_path / "afile").write_text("mine\n")
    result = amplint("--cache-dir", str(tmp_path / "afile"), "train.py", cwd=project)
    assert result.returncode == 1 and "not a directory" in result.stderr
    assert (tmp_path / "afile").read_text() == "mine\n"


def test_a_cache_with_a_symlinked_build_directory_writes_nothing_through_it(project, tmp_path):
    lint(project, tmp_path / "cache")
    build = tmp_path / "cache" / "test-build"
    for path in build.iterdir():
        path.unlink()
    build.rmdir()
    victim = tmp_path / "victim"
    victim.mkdir()
    build.symlink_to(victim)
    _, runner = lint(project, tmp_path / "cache")
    assert runner.linted == 4 and list(victim.iterdir()) == []


@pytest.mark.parametrize("umask", [0o022, 0o077, 0o002])
def test_cache_files_are_made_with_the_umasks_mode(project, tmp_path, umask):
    """D16: a cache shared by a team is readable by it (mkstemp's 0600 was not)."""
    old = os.umask(umask)
    try:
        lint(project, tmp_path / "cache", names=("train.py",))
    finally:
        os.umask(old)
    root = tmp_path / "cache"
    files = [root / "CACHEDIR.TAG", root / ".gitignore", *(root / "test-build").iterdir()]
    assert {p.name for p in (root / "test-build").iterdir()} >= {"lock"} and len(files) >= 4
    assert {stat.S_IMODE(os.stat(p).st_mode) for p in files} == {0o666 & ~umask}
    assert {stat.S_IMODE(os.stat(p).st_mode) for p in (root, root / "test-build")} == {0o777 & ~umask}
    assert not [p for p in root.parent.iterdir() if ".tmp-" in p.name]


# --------------------------------------------------------------------------- a cache cannot be planted


def _shards(cache_dir, kind="files"):
    return sorted(Path(cache_dir).glob(f"*/{kind}-*.json"))


def _rewrite(cache_dir, change, seal=True, kind="files"):
    """Rewrite every shard's JSON with `change`, sealed with this user's key (what a bug in
    amplint or a shared key could leave) or, with `seal` False, with the MAC left as it was
    (what anyone else can write)."""
    for shard in _shards(cache_dir, kind):
        head, _, body = shard.read_bytes().partition(b"\n")
        body = change(json.loads(body))
        body = body if isinstance(body, bytes) else json.dumps(body).encode()
        if seal:
            cache = Cache(str(cache_dir), fingerprint=shard.parent.name)
            shard.write_bytes(cache._seal(shard.name, body))
        else:
            shard.write_bytes(head + b"\n" + body)


def _silence(data):
    """The reproducer of D8: every result says "no findings", for any stat."""
    for record in data["files"].values():
        record["stat"] = [0, 0, 0, 0]
        for result in record["results"].values():
            result["findings"] = []
    return data


def test_a_cache_shipped_with_the_repository_decides_nothing(amplint, project, tmp_path_factory, user_cache_home):
    """D8: a crafted `.amplint_cache` in a pull request (findings emptied, as a fresh clone
    would be) cannot make the gate pass, with the MAC left, or in the old format, or sealed
    with another user's key."""
    (project / "pyproject.toml").write_text('[project]\nname = "x"\n')
    (project / "broken.py").unlink()  # the verdict is then the findings' alone: 1, or 0 if silenced
    first = amplint(".", cwd=project)
    assert first.returncode == 1 and "AMP003" in first.stdout
    cache_dir = project / ".amplint_cache"
    _rewrite(cache_dir, _silence, seal=False)
    again = amplint(".", cwd=project)
    assert (again.returncode, again.stdout) == (first.returncode, first.stdout)
    for shard in _shards(cache_dir):  # amplint 0.1.0's format: plain JSON
        shard.write_text(json.dumps(_silence(json.loads(shard.read_bytes().partition(b"\n")[2]))))
    again = amplint(".", cwd=project)
    assert (again.returncode, again.stdout) == (first.returncode, first.stdout)
    other_user = tmp_path_factory.mktemp("other-user")
    planted = amplint(".", cwd=project, env={"XDG_CACHE_HOME": str(other_user)})
    assert planted.returncode == 1
    _rewrite(cache_dir, _silence, seal=False)  # the other user's own MAC, over emptied results
    os.environ["XDG_CACHE_HOME"] = str(other_user)
    try:
        _rewrite(cache_dir, _silence, seal=True)  # sealed, correctly, with the other user's key
    finally:
        os.environ["XDG_CACHE_HOME"] = str(user_cache_home)
    again = amplint(".", cwd=project)
    assert (again.returncode, again.stdout) == (first.returncode, first.stdout)


def test_another_users_key_makes_every_entry_a_miss(project, tmp_path, monkeypatch):
    lint(project, tmp_path / "cache")
    _, runner = lint(project, tmp_path / "cache")
    assert runner.linted == 0
    monkeypatch.setenv(cache_module.ENV_KEY_FILE, str(tmp_path / "other" / "key"))
    _, runner = lint(project, tmp_path / "cache")
    assert runner.linted == 4


def test_the_key_is_private_made_once_and_kept(tmp_path, user_cache_home):
    old = os.umask(0)
    try:
        key, problem = cache_module.user_key()
    finally:
        os.umask(old)
    path = user_cache_home / "amplint" / "key"
    assert problem is None and len(key) == 32
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert stat.S_IMODE(os.stat(path.parent).st_mode) == 0o700
    assert cache_module.user_key() == (key, None)
    assert [p.name for p in path.parent.iterdir()] == ["key"]


def _unusable_keys(tmp_path):
    (tmp_path / "a-file").write_text("")
    yield "unwritable location", tmp_path / "a-file" / "amplint" / "key"  # as a read-only HOME
    real = tmp_path / "real-key"
    real.write_text("ab" * 32 + "\n")
    os.chmod(real, 0o600)
    (tmp_path / "linked").symlink_to(real)
    yield "a symbolic link", tmp_path / "linked"
    shared = tmp_path / "shared-key"
    shared.write_text("ab" * 32 + "\n")
    os.chmod(shared, 0o644)
    yield "readable by others", shared
    garbage = tmp_path / "garbage-key"
    garbage.write_text("not a key\n")
    os.chmod(garbage, 0o600)
    yield "not a key", garbage
    yield "a directory", tmp_path


def test_without_a_usable_key_nothing_is_cached_or_believed(amplint, project, tmp_path, monkeypatch):
    """A read-only home, or a key that is not private and amplint's: no cache (one note),
    never a crash, never an unauthenticated entry believed."""
    first = amplint("train.py", cwd=project)
    _rewrite(project / ".amplint_cache", _silence, seal=True)  # sealed with a key that is then lost
    for why, key in _unusable_keys(tmp_path):
        monkeypatch.setenv(cache_module.ENV_KEY_FILE, str(key))
        cache = Cache(str(project / ".amplint_cache"), fingerprint="test-build")
        assert cache.root is None and cache.problem and str(key) in cache.problem, why
        result = amplint("train.py", cwd=project)
        assert (result.returncode, result.stdout) == (first.returncode, first.stdout), why
        assert result.stderr.count("amplint: note: not caching: cannot use the cache key") == 1, why
    monkeypatch.delenv(cache_module.ENV_KEY_FILE)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "a-file"))
    monkeypatch.setenv("HOME", str(tmp_path / "a-file"))
    assert amplint("train.py", cwd=project).returncode == 1


# --------------------------------------------------------------------------- a corrupt cache is a miss


def _every_record(change):
    def apply(data):
        for path in data["files"]:
            data["files"][path] = change(data["files"][path])
        return data

    return apply


def _every_result(change):
    def on_record(record):
        record["results"] = {key: change(result) for key, result in record["results"].items()}
        return record

    return _every_record(on_record)


def _every_finding_row(change):
    return _every_result(lambda result: dict(result, findings=[change(row) for row in result["findings"]] or [change([])]))


DEEP = b"[" * 100_000 + b"]" * 100_000
CORRUPTIONS = {
    # The whole shard.
    "empty": lambda data: b"",
    "truncated": lambda data: json.dumps(data).encode()[:-40],
    "binary": lambda data: bytes(range(256)) * 4,
    "deep JSON": lambda data: DEEP,
    "a list": lambda data: [data],
    "another format": lambda data: dict(data, format=1),
    "files a list": lambda data: dict(data, files=list(data["files"].values())),
    # Records.
    "record a string": _every_record(lambda record: "x"),
    "record a list": _every_record(lambda record: [record]),
    "stat a string": _every_record(lambda record: dict(record, stat="0 0 0 0")),
    "digest a number": _every_record(lambda record: dict(record, digest=7)),
    "results a list": _every_record(lambda record: dict(record, results=list(record["results"].values()))),
    "deep in a record": _every_record(lambda record: dict(record, results={"k": json.loads(b"[" * 900 + b"]" * 900)})),
    # Results and findings.
    "payload a string": _every_result(lambda result: "x"),
    "findings null": _every_result(lambda result: dict(result, findings=None)),
    "findings missing": _every_result(lambda result: {k: v for k, v in result.items() if k != "findings"}),
    "short finding rows": _every_finding_row(lambda row: row[:3]),
    "a finding row's line a string": _every_finding_row(lambda row: ["8", *row[1:]] if row else ["8"] * 14),
    "a broken fix": _every_finding_row(lambda row: [*row[:-1], ["title"]] if row else [None] * 14),
    "skipped a string": _every_result(lambda result: dict(result, skipped="no")),
}


def _every_fact(change):
    return _every_record(lambda record: {key: change(facts) for key, facts in record.items()})


# The facts shards beside: a result's summary, imports and ambient facts.
FACT_CORRUPTIONS = {
    "empty": lambda data: b"",
    "truncated": lambda data: json.dumps(data).encode()[:-40],
    "another format": lambda data: dict(data, format=1),
    "record a list": _every_record(lambda record: [record]),
    "facts a string": _every_fact(lambda facts: "x"),
    "imports of strings": _every_fact(lambda facts: dict(facts, imports=["torch"])),
    "summary functions a list": _every_fact(lambda facts: dict(facts, summary={"functions": ["f"]})),
    "ambient a list": _every_fact(lambda facts: dict(facts, ambient=[1])),
}


@pytest.mark.parametrize("kind, name", [("files", name) for name in CORRUPTIONS] + [("facts", name) for name in FACT_CORRUPTIONS])
@pytest.mark.parametrize("sealed", [True, False], ids=["sealed", "unsealed"])
def test_a_corrupt_cache_is_a_miss_whatever_its_shape(project, tmp_path, kind, name, sealed):
    """D6: each corruption of the reliability report (and more), of the records' shards or
    of the facts' beside them, with the MAC this user's key gives it (what only a bug could
    write) or not: the files are linted again, with the same results, and the cache is whole
    again afterwards."""
    cold, _ = lint(project, tmp_path / "cache")
    _rewrite(tmp_path / "cache", (CORRUPTIONS if kind == "files" else FACT_CORRUPTIONS)[name], seal=sealed, kind=kind)
    results, runner = lint(project, tmp_path / "cache")
    assert [(r.path, r.findings, r.error, r.skipped) for r in results] == [(r.path, r.findings, r.error, r.skipped) for r in cold]
    assert runner.linted == 4
    _, runner = lint(project, tmp_path / "cache")
    assert runner.linted == 0


def test_every_result_amplint_stores_passes_the_check_on_read(tmp_path):
    """The reader's shape check and `amplint.run.driver`'s payloads agree: on the fixtures
    (findings with fixes, notebooks, module summaries), nothing stored is refused."""
    from amplint.run.driver import _FINDING_FIELDS, _to_payload

    paths = sorted(str(p) for p in (REPO / "fixtures").rglob("*.py"))
    cache = Cache(str(tmp_path / "cache"), fingerprint="test-build")
    with Runner(workers=1, cache=cache) as runner:
        results = runner.lint([Job(path, CODES) for path in paths])
    payloads = [_to_payload(result) for result in results]
    fix = _FINDING_FIELDS.index("fix")
    assert any(p["summary"] for p in payloads) and any(f[fix] for p in payloads for f in p["findings"])
    assert [cache_module.valid_result(p) for p in payloads] == [True] * len(payloads)


def test_links_and_fifos_planted_inside_the_cache_are_not_followed_or_waited_on(project, tmp_path):
    """A shipped cache that looks like amplint's (its marker, its build) but whose lock and
    shards are links to a victim's file, or FIFOs: the victim is untouched, nothing blocks,
    and the files are linted."""
    lint(project, tmp_path / "cache")
    build = tmp_path / "cache" / "test-build"
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    shards = sorted(build.glob("files-*.json"))
    (build / "lock").unlink()
    (build / "lock").symlink_to(victim)
    for shard in shards[:1]:
        shard.unlink()
        shard.symlink_to(victim)
    for shard in shards[1:]:
        shard.unlink()
        os.mkfifo(shard)
    results, runner = lint(project, tmp_path / "cache")
    assert runner.linted == 4 and [f.code for f in results[0].findings] == ["AMP003"]
    assert victim.read_text() == "precious\n" and (build / "lock").is_symlink()
    (build / "lock").unlink()
    _, runner = lint(project, tmp_path / "cache")
    _, runner = lint(project, tmp_path / "cache")
    assert runner.linted == 0 and victim.read_text() == "precious\n"


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() == 0, reason="root can write a read-only directory")
def test_a_read_only_home_means_no_cache_and_one_note(amplint, project, tmp_path, monkeypatch):
    home = tmp_path / "home"
    home.mkdir()
    home.chmod(0o555)
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(home))
    try:
        result = amplint("train.py", cwd=project)
    finally:
        home.chmod(0o755)
    assert result.returncode == 1 and "AMP003" in result.stdout
    assert result.stderr.count("amplint: note: not caching: cannot use the cache key") == 1
    assert not (project / ".amplint_cache").exists()


def test_a_file_linted_in_every_round_of_the_second_phase_is_warm_the_next_run(tmp_path, monkeypatch):
    # A chain of modules: each learns what the next one does a round later, so the file at
    # its head is linted once on its own and again in every round, each time under a key of
    # its own. Every one of those results must be kept, or the next run lints it again
    # (each result pushed out by the one after it, run after run).
    from amplint import cli
    from amplint.run import driver as driver_module

    package = tmp_path / "pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "s0.py").write_text("def step0(scaler, optimizer):\n    scaler.step(optimizer)\n    scaler.update()\n")
    for level in range(1, 5):
        (package / f"s{level}.py").write_text(
            f"from .s{level - 1} import step{level - 1}\n\n\ndef step{level}(scaler, optimizer, loss):\n"
            f"    scaler.scale(loss).backward()\n    step{level - 1}(scaler, optimizer)\n"
        )
    (package / "train.py").write_text(
        "import torch\n\nfrom .s4 import step4\n\n\ndef train(model, optimizer, x):\n"
        '    scaler = torch.amp.GradScaler("cuda")\n    with torch.autocast("cuda"):\n'
        "        loss = model(x)\n        step4(scaler, optimizer, loss)\n"
    )
    linted = []
    real = driver_module.Runner.lint

    def counting(self, jobs, *args, **kwargs):
        before = self.linted
        results = real(self, jobs, *args, **kwargs)
        linted.append(self.linted - before)
        return results

    monkeypatch.setattr(driver_module.Runner, "lint", counting)
    monkeypatch.chdir(tmp_path)
    args = ["--cache-dir", str(tmp_path / "cache"), "-j", "1", "-q", "--exit-zero", "pkg"]
    assert cli.main(args) == 0
    assert sum(linted) > len(list(package.iterdir())), "the second phase linted files again"
    linted.clear()
    assert cli.main(args) == 0
    assert sum(linted) == 0
    # ... and so does it with the second phase worked out again (the run's memory of it gone).
    for runs in (tmp_path / "cache").glob("*/runs.json"):
        runs.unlink()
    assert cli.main(args) == 0
    assert sum(linted) == 0


# --------------------------------------------------------------------------- what a run's second phase made


def _two_module_project(root):
    package = root / "pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "optim_utils.py").write_text("def step(scaler, optimizer):\n    scaler.step(optimizer)\n    scaler.update()\n")
    (package / "train.py").write_text(
        "import torch\n\nfrom .optim_utils import step\n\n\ndef train(model, optimizer, x):\n"
        '    scaler = torch.amp.GradScaler("cuda")\n    with torch.autocast("cuda"):\n'
        "        loss = model(x)\n    loss.backward()\n    step(scaler, optimizer)\n"
    )
    for path in package.iterdir():
        _old(path)
    return package


def _run(root, cache_dir, capsys):
    from amplint import cli

    code = cli.main(["--cache-dir", str(cache_dir), "-j", "1", "--output-format", "json", "--exit-zero", str(root / "pkg")])
    assert code == 0
    return json.loads(capsys.readouterr().out)


def test_a_warm_run_takes_its_second_phase_from_the_cache(tmp_path, monkeypatch, capsys):
    from amplint.project import link as project_module

    _two_module_project(tmp_path)
    cold = _run(tmp_path, tmp_path / "cache", capsys)
    assert [f["code"] for f in cold] == ["AMP001"]  # found only with optim_utils.py's summary
    assert list((tmp_path / "cache").glob("*/runs.json"))

    def no_link(*args, **kwargs):
        raise AssertionError("the second phase was worked out again")

    monkeypatch.setattr(project_module, "link", no_link)
    assert _run(tmp_path, tmp_path / "cache", capsys) == cold


def test_a_changed_file_works_the_second_phase_out_again(tmp_path, monkeypatch, capsys):
    from amplint.project import link as project_module

    package = _two_module_project(tmp_path)
    _run(tmp_path, tmp_path / "cache", capsys)
    calls = []
    real = project_module.link
    monkeypatch.setattr(project_module, "link", lambda *args, **kwargs: calls.append(1) or real(*args, **kwargs))
    (package / "optim_utils.py").write_text("def step(scaler, optimizer):\n    optimizer.step()\n")
    assert _run(tmp_path, tmp_path / "cache", capsys) == []  # its summary changed: train.py's finding is gone
    assert calls == [1]


def test_a_remembered_run_whose_results_are_gone_or_forged_is_worked_out_again(tmp_path, monkeypatch, capsys):
    from amplint.project import link as project_module

    _two_module_project(tmp_path)
    cold = _run(tmp_path, tmp_path / "cache", capsys)
    calls = []
    real = project_module.link
    monkeypatch.setattr(project_module, "link", lambda *args, **kwargs: calls.append(1) or real(*args, **kwargs))
    (runs,) = (tmp_path / "cache").glob("*/runs.json")
    build = Cache(str(tmp_path / "cache"), fingerprint=runs.parent.name)
    head, _, body = runs.read_bytes().partition(b"\n")
    remembered = json.loads(body)
    # A result key the cache does not hold (pushed out since), sealed as amplint would.
    for rows in remembered["runs"].values():
        for row in rows:
            row[1] = "0" * 32
    runs.write_bytes(build._seal("runs.json", json.dumps(remembered).encode()))
    assert _run(tmp_path, tmp_path / "cache", capsys) == cold and calls == [1]
    # Not sealed with this user's key: not believed, whatever it says.
    runs.write_bytes(head + b"\n" + json.dumps({"format": cache_module._FORMAT, "runs": {}}).encode())
    assert _run(tmp_path, tmp_path / "cache", capsys) == cold and calls == [1, 1]
    # And a shape amplint never writes is nothing remembered.
    for shape in ({"format": cache_module._FORMAT, "runs": {"k": [[0]]}}, {"format": cache_module._FORMAT, "runs": []}, [1]):
        assert build._parse_runs(build._seal("runs.json", json.dumps(shape).encode())) == {}
