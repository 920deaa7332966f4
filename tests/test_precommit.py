"""The pre-commit hook, end to end: the real `pre-commit` installs amplint and runs it.

pre-commit installs a hook repository at a commit. So that the test checks this working tree
(as `pre-commit try-repo` does) and not only what was last committed, it commits a snapshot
of the tree (tracked and untracked, not ignored, files) to a temporary repository, tagged
with the release the README pins (`rev: vX.Y.Z`, pyproject.toml's version), and uses the
README's own `.pre-commit-config.yaml` snippet with only `repo:` pointed there; in CI, on a
clean checkout, that snapshot is HEAD.
"""

import os
import shutil
import subprocess
import sys
import tomllib

import pytest

from conftest import REPO

PUBLIC_REPO = "https://github.com/amplint/amplint"
VERSION = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]


def test_required_flags_are_in_entry_so_args_cannot_drop_them():
    """pre-commit replaces a hook's `args` with the user's (`args: [--fix]`), never its
    `entry`: what the hook needs to be correct belongs in `entry`, as in ruff's hook."""
    import yaml

    (hook,) = yaml.safe_load((REPO / ".pre-commit-hooks.yaml").read_text())
    assert hook["entry"].split() == ["amplint", "--force-exclude"]
    assert hook.get("args", []) == []
    # The README's examples are `args` lines that keep --force-exclude out: it is not theirs to repeat.
    examples = [line.strip() for line in readme_snippet().splitlines() if "args:" in line]
    assert "# args: [--fix]" in examples
    assert not any("--force-exclude" in line for line in examples)


def readme_snippet():
    """The README's `.pre-commit-config.yaml`, as a user copies it."""
    section = (REPO / "README.md").read_text().split("\n## pre-commit\n", 1)[1]
    snippet = section.split("```yaml\n", 1)[1].split("```", 1)[0]
    assert snippet.startswith("# .pre-commit-config.yaml\n") and PUBLIC_REPO in snippet
    return snippet
from test_notebooks import CLIP, LOOP, SETUP, cell, notebook
from test_output_formats import BUGGY

FIXED = BUGGY.replace(CLIP, "scaler.unscale_(optimizer)\n    " + CLIP)
# What pip prints when it cannot reach an index: the only reason to skip.
NO_NETWORK = (
    "NewConnectionError",
    "Failed to establish a new connection",
    "Temporary failure in name resolution",
    "Network is unreachable",
    "No matching distribution found",
    "Could not find a version that satisfies",
    "ProxyError",
    "ConnectTimeoutError",
    "ReadTimeoutError",
)


def git(*args, cwd, env):
    return subprocess.run(["git", *args], cwd=cwd, env=env, check=True, capture_output=True, text=True)


def snapshot_of_this_checkout(target, env):
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=REPO, env=env, check=True, capture_output=True, text=True,
    ).stdout.split("\0")
    for name in filter(None, listed):
        source = REPO / name
        if source.is_file():  # tracked files deleted in the working tree are left out
            (target / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target / name)
    git("init", "-q", "-b", "main", cwd=target, env=env)
    git("add", "-A", cwd=target, env=env)
    git("commit", "-q", "-m", "snapshot", cwd=target, env=env)
    return git("rev-parse", "HEAD", cwd=target, env=env).stdout.strip()


def pre_commit(*args, cwd, env):
    return subprocess.run(
        [sys.executable, "-m", "pre_commit", *args, "--color", "never"],
        cwd=cwd, env=env, capture_output=True, text=True, timeout=600,
    )


@pytest.mark.slow(seconds=55)
def test_hook_fails_on_the_finding_then_passes_after_the_fix(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    (home / ".gitconfig").write_text("[user]\n\tname = amplint tests\n\temail = tests@amplint.invalid\n")
    env = {
        **os.environ,
        "PRE_COMMIT_HOME": str(tmp_path / "pre-commit-home"),
        "HOME": str(home),  # the user's git config (signing, hooks) stays out of it
        "GIT_CONFIG_GLOBAL": str(home / ".gitconfig"),
        "GIT_CONFIG_NOSYSTEM": "1",
    }
    env.pop("GIT_DIR", None)
    env.pop("GIT_INDEX_FILE", None)

    hooks = tmp_path / "amplint-hooks"
    hooks.mkdir()
    snapshot_of_this_checkout(hooks, env)
    git("tag", f"v{VERSION}", cwd=hooks, env=env)

    project = tmp_path / "project"
    project.mkdir()
    snippet = readme_snippet()
    (project / ".pre-commit-config.yaml").write_text(snippet.replace(PUBLIC_REPO, str(hooks)))
    (project / "train.py").write_text(BUGGY)
    (project / "explore.ipynb").write_text(notebook(cell("# Explore", kind="markdown"), SETUP, LOOP))
    # Staged, but excluded by default (`build`): the hook's --force-exclude keeps it out.
    (project / "build").mkdir()
    (project / "build" / "generated.py").write_text(BUGGY)
    (project / "notes.txt").write_text(BUGGY)  # not python or jupyter: never passed to the hook
    git("init", "-q", cwd=project, env=env)
    git("add", "-A", cwd=project, env=env)

    install = pre_commit("install-hooks", cwd=project, env=env)
    if install.returncode != 0:
        log = install.stdout + install.stderr
        log_file = tmp_path / "pre-commit-home" / "pre-commit.log"
        if log_file.exists():
            log += log_file.read_text()
        if any(marker in log for marker in NO_NETWORK):
            pytest.skip("pre-commit cannot install hook environments here (no package index reachable)")
        pytest.fail(f"pre-commit could not install the hook:\n{log}")
    # The hook environment holds the light linter only: torch is an extra, never installed.
    installed = {p.name.lower() for p in (tmp_path / "pre-commit-home").glob("repo*/py_env-*/lib*/python*/site-packages/*")}
    assert "amplint" in installed and "libcst" in installed, installed
    assert "torch" not in installed

    failing = pre_commit("run", "--all-files", cwd=project, env=env)
    output = failing.stdout + failing.stderr
    assert failing.returncode == 1, output
    # The README pins a release: pre-commit has no moving reference to warn about.
    assert "mutable reference" not in install.stdout + install.stderr + output
    assert "amplint" in output and "Failed" in output
    assert "--> train.py:8:5" in output
    assert "--> explore.ipynb:cell 3:7:5" in output
    assert "generated.py" not in output and "notes.txt" not in output

    (project / "train.py").write_text(FIXED)
    (project / "explore.ipynb").write_text(notebook(cell("# Explore", kind="markdown"), SETUP))
    git("add", "-A", cwd=project, env=env)
    passing = pre_commit("run", "--all-files", cwd=project, env=env)
    assert passing.returncode == 0, passing.stdout + passing.stderr
    assert "amplint" in passing.stdout and "Passed" in passing.stdout

    # The ruff habit `args: [--fix]` replaces the hook's `args`; --force-exclude is in its
    # `entry`, so the excluded file is still neither linted nor rewritten.
    (project / "train.py").write_text(BUGGY)
    config = project / ".pre-commit-config.yaml"
    config.write_text(snippet.replace(PUBLIC_REPO, str(hooks)).replace("# args: [--fix]", "args: [--fix]", 1))
    git("add", "-A", cwd=project, env=env)
    fixing = pre_commit("run", "--all-files", cwd=project, env=env)
    output = fixing.stdout + fixing.stderr
    assert fixing.returncode == 1, output  # pre-commit fails a hook that modified files
    assert "scaler.unscale_(optimizer)" in (project / "train.py").read_text()
    assert (project / "build" / "generated.py").read_text() == BUGGY
    assert "generated.py" not in output
    config.write_text(snippet.replace(PUBLIC_REPO, str(hooks)))

    # The README's promise: `pre-commit autoupdate` moves `rev` to the newest release.
    (hooks / "CHANGELOG.md").write_text((hooks / "CHANGELOG.md").read_text() + "\n")
    git("commit", "-q", "-am", "the next release", cwd=hooks, env=env)
    git("tag", "v99.0.0", cwd=hooks, env=env)
    update = pre_commit("autoupdate", cwd=project, env=env)
    assert update.returncode == 0, update.stdout + update.stderr
    assert "rev: v99.0.0" in (project / ".pre-commit-config.yaml").read_text()
