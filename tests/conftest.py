import io
import os
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path
from typing import List

import pytest

REPO = Path(__file__).resolve().parent.parent

# A float16 training loop that clips before unscale_: one AMP003 finding, at 8:5.
BUGGY = textwrap.dedent(
    """\
    import torch

    scaler = torch.amp.GradScaler("cuda")
    for x, y in loader:
        with torch.autocast("cuda", dtype=torch.float16):
            loss = loss_fn(model(x), y)
        scaler.scale(loss).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        scaler.step(optimizer)
        scaler.update()
    """
)


def run_amplint(*args, cwd=None, input=None, env=None):
    """Run the real command in a subprocess, as a user or CI would."""
    full_env = dict(os.environ)
    full_env.pop("NO_COLOR", None)
    if env:
        full_env.update(env)
    return subprocess.run(
        [sys.executable, "-m", "amplint", *args],
        cwd=cwd,
        input=input,
        capture_output=True,
        text=True,
        env=full_env,
        timeout=120,
    )


def write_files(root, files):
    """Write `files` (name -> text, dedented) under `root`, making their folders."""
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text).lstrip())


def lint_project(root, files, *options):
    """Write `files` under `root` and run `amplint --isolated OPTIONS` there, JSON out, as a
    user would: the (file, row, code) of each finding, sorted, and the findings themselves."""
    import json

    write_files(root, files)
    done = run_amplint("--isolated", *options, "--output-format", "json", ".", cwd=root)
    assert done.returncode in (0, 1), done.stderr
    findings = json.loads(done.stdout)
    return sorted((os.path.relpath(f["filename"], root).replace(os.sep, "/"), f["location"]["row"], f["code"]) for f in findings), findings


@dataclass
class Completed:
    """What a finished `amplint` run left: a subprocess.CompletedProcess's fields."""

    args: List[str]
    returncode: int
    stdout: str
    stderr: str


def run_amplint_in_process(*args, cwd=None, input=None, env=None):
    """`amplint ARGS` through the same entry point as the console script (amplint.cli.main),
    in this process: the command's behaviour without an interpreter start (about a second of
    CPU on a loaded machine) per call. Working directory, environment and standard streams are
    the run's own and restored after it. Anything about the interpreter itself (PYTHONPATH and
    the like) needs a real process, and gets one."""
    if env and any(key.startswith("PYTHON") for key in env):
        return run_amplint(*args, cwd=cwd, input=input, env=env)
    from amplint import cli

    saved_environ, saved_cwd = dict(os.environ), os.getcwd()
    saved_streams = sys.stdin, sys.stdout, sys.stderr
    stdout, stderr = io.StringIO(), io.StringIO()
    try:
        os.environ.pop("NO_COLOR", None)
        os.environ.update(env or {})
        if cwd is not None:
            os.chdir(cwd)
        data = input.encode("utf-8") if isinstance(input, str) else (input or b"")
        sys.stdin = io.TextIOWrapper(io.BytesIO(data), encoding="utf-8")
        sys.stdout, sys.stderr = stdout, stderr
        try:
            code = cli.main([str(arg) for arg in args])
        except SystemExit as exit:  # argparse: --help, --version, usage errors
            code = exit.code if isinstance(exit.code, int) else (0 if exit.code is None else 1)
    finally:
        sys.stdin, sys.stdout, sys.stderr = saved_streams
        os.chdir(saved_cwd)
        os.environ.clear()
        os.environ.update(saved_environ)
    return Completed(["amplint", *map(str, args)], code, stdout.getvalue(), stderr.getvalue())


@pytest.fixture
def meter_steps(monkeypatch):
    """The steps each metered lint took (`amplint.work.metered`), one per lint, in order."""
    from contextlib import contextmanager

    from amplint import work

    spent: List[int] = []
    real = work.metered

    @contextmanager
    def metered(*args, **kwargs):
        with real(*args, **kwargs) as meter:
            yield meter
            spent.append(meter.spent)

    monkeypatch.setattr(work, "metered", metered)
    return spent


@pytest.fixture
def amplint():
    """The command, run in-process (see run_amplint_in_process); `run_amplint` is the same
    through a real `python -m amplint` subprocess, for what only a process can show."""
    return run_amplint_in_process


@pytest.fixture(scope="session")
def verified(tmp_path_factory):
    """One real `amplint verify --dtype all` on CPU, shared by every test that needs measurements:
    each prediction at every dtype it is about (one fixture process per rule, ~20 s).

    Once per run, not once per xdist worker: the first worker to need it runs it and leaves
    it, pickled, in the run's shared temporary directory; the others wait for it there."""
    pytest.importorskip("torch")
    from amplint.harness.runner import ALL_DTYPES, verify
    from amplint.rules import ALL_RULES

    def run():
        return verify([rule for rule in ALL_RULES if rule.PREDICTIONS], "cpu", ALL_DTYPES)

    if not os.environ.get("PYTEST_XDIST_WORKER"):
        return run()
    import pickle

    from filelock import FileLock

    shared = tmp_path_factory.getbasetemp().parent / "verified.pickle"
    with FileLock(str(shared) + ".lock"):
        if shared.is_file():
            return pickle.loads(shared.read_bytes())
        result = run()
        shared.write_bytes(pickle.dumps(result))
        return result


# --------------------------------------------------------------------------- parallel runs


def pytest_collection_modifyitems(config, items):
    """Start the slowest tests first, longest first.

    `python -m pytest` runs on every CPU (pytest-xdist, `-n auto --dist loadgroup`): the
    scheduler hands tests (or whole `xdist_group`s, such as the tests sharing the session's
    real `verify` run) to the workers in turn, in this order. Tests marked
    `slow(seconds=...)` (the real harness runs, the real pre-commit run, the wheel build) go
    first, longest first, so that they start at once on different workers instead of queueing
    behind each other at the end."""
    slow = sorted(
        (item for item in items if item.get_closest_marker("slow")),
        key=lambda item: -item.get_closest_marker("slow").kwargs.get("seconds", 1),
    )
    if slow:
        items[:] = slow + [item for item in items if not item.get_closest_marker("slow")]


@pytest.fixture
def project(tmp_path):
    """Write {name: text or bytes} under tmp_path; returns tmp_path."""
    def write(files):
        for name, text in files.items():
            path = tmp_path / name
            path.parent.mkdir(parents=True, exist_ok=True)
            if isinstance(text, bytes):
                path.write_bytes(text)
            else:
                path.write_text(text)
        return tmp_path

    return write
