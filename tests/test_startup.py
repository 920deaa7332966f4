"""Start-up: `amplint --version` and a run whose files mention no AMP code import neither LibCST
nor the rules (bench/startup.py measures the CPU; these tests check what is imported, which
does not depend on the machine's load). The catalogue the command line selects rules from
is generated from the rules' own metadata, and must be regenerated when they change."""

import json
import resource
import subprocess
import sys
import textwrap

import pytest

from amplint.lint import catalogue
from amplint import cli
from amplint.docs import CATALOGUE, catalogue_source
from amplint.run.driver import _lint_task, _needs_engine, _syntax_only, _Task
from amplint.lint.engine import lint_bytes
from amplint.rules import ALL_RULES
from amplint.semantic import AMP_VOCABULARY
from conftest import BUGGY, REPO

HEAVY = ("libcst", "amplint.rules", "amplint.semantic", "amplint.lint.engine")
ALL_CODES = tuple(rule.code for rule in ALL_RULES)


def test_the_catalogue_is_generated_from_the_rules():
    assert (REPO / CATALOGUE).read_text() == catalogue_source(), f"{CATALOGUE} is stale: run `python -m amplint.docs` to regenerate it"
    entries = [(e.code, e.name, tuple(e.triggers), tuple(e.requires)) for e in catalogue.RULES]
    classes = [(r.code, r.name, tuple(r.triggers), tuple(r.requires)) for r in ALL_RULES]
    assert entries == classes


def test_the_catalogue_takes_each_rules_words_from_its_class(monkeypatch):
    """Computed words too (AMP011's devices, from `KNOWN_DEVICES`): nothing is copied by hand."""
    (devices,) = [rule for rule in ALL_RULES if rule.code == "AMP011"]
    monkeypatch.setattr(devices, "name", "renamed")
    monkeypatch.setattr(devices, "requires", devices.requires + ('"tpu',))
    generated: dict = {}
    exec(catalogue_source(), generated)
    assert ("AMP011", "renamed", AMP_VOCABULARY, devices.requires) in generated["RULES"]


def test_the_command_lines_constants_are_the_modules_own():
    from amplint.run import cache, driver
    from amplint.output import FORMATS, HUMAN_FORMATS

    assert set(cli.OUTPUT_FORMATS) == set(FORMATS) - {"text"}
    assert HUMAN_FORMATS == frozenset({"full", "concise", "text"})
    assert (cli.CACHE_DIR_NAME, cli.ENV_CACHE_DIR) == (cache.CACHE_DIR_NAME, cache.ENV_CACHE_DIR)
    assert cli.DEFAULT_BUDGET == driver.DEFAULT_BUDGET
    assert cli.DEFAULT_MEMORY == driver.DEFAULT_MEMORY


def imported_by(code, cwd):
    """The heavy modules a fresh interpreter has imported after running `code`."""
    probe = code + f"\nimport sys\nprint(sorted(m for m in {HEAVY!r} if m in sys.modules))\n"
    done = subprocess.run([sys.executable, "-c", probe], cwd=cwd, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1].replace("'", '"'))


def test_version_imports_neither_libcst_nor_the_rules(tmp_path):
    code = "from amplint.cli import main\ntry:\n    main(['--version'])\nexcept SystemExit:\n    pass"
    assert imported_by(code, tmp_path) == []


def test_a_run_on_files_without_amp_code_imports_neither_libcst_nor_the_rules(tmp_path):
    (tmp_path / "plain.py").write_text("import os\n\n\ndef f(x):\n    return x  # noqa: E501\n")
    (tmp_path / "broken.py").write_text("def f(:\n")
    # In the process and in its workers (the task is linted in process here, as a worker would).
    code = textwrap.dedent(
        """\
        import sys
        from amplint.cli import main
        from amplint.run.driver import _lint_task, _Task
        from amplint.lint.catalogue import RULES
        code = main(['--no-cache', '-q', '.'])
        assert code == 0, code  # broken.py mentions no AMP code: not analysed, not parsed
        code = main(['--no-cache', '-q', '--syntax-errors', 'all', '.'])
        assert code == 2, code  # its verdict, asked for: CPython's parser, not LibCST
        main(['.'])  # with the cache
        result, ok, _ = _lint_task(_Task(0, 'plain.py', open('plain.py', 'rb').read(), tuple(r.code for r in RULES), None, None), 2.0, in_process=True)
        assert ok and result.error is None and result.skipped and not result.findings
        """
    )
    assert imported_by(code, tmp_path) == []
    # A file with AMP code still gets the engine (and its finding).
    (tmp_path / "train.py").write_text(BUGGY)
    assert "libcst" in imported_by("from amplint.cli import main\nmain(['--no-cache', '-q', '.'])", tmp_path)


# The driver forks its workers on Linux only (`driver._context`): the import hooks below are
# inherited from the process that forks them.
FORKED = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="workers are forked on Linux only")
# A soft address-space limit a user may set (`ulimit -v`), where the hard limit allows it.
_HARD = resource.getrlimit(resource.RLIMIT_AS)[1]
USER_LIMIT = 16 << 30 if _HARD == resource.RLIM_INFINITY or _HARD > 16 << 30 else None


@FORKED
def test_the_workers_of_a_run_on_files_without_amp_code_import_no_libcst(tmp_path):
    # The workers are forked from the process that runs this: every import of LibCST in any
    # of them is noted in a file.
    (tmp_path / "plain.py").write_text("import os\n\n\ndef f(x):\n    return x\n")
    (tmp_path / "other.py").write_text("print(1)\n")
    code = textwrap.dedent(
        """\
        import os, sys
        from amplint.cli import main

        class Noting:
            def find_spec(self, name, path=None, target=None):
                if name.split(".")[0] == "libcst":
                    with open("imported.txt", "a") as handle:
                        handle.write(f"{os.getpid()} {name}\\n")
                return None

        sys.meta_path.insert(0, Noting())
        assert main(['--no-cache', '-q', '-j2', 'plain.py', 'other.py']) == 0
        """
    )
    assert imported_by(code, tmp_path) == []
    assert not (tmp_path / "imported.txt").exists(), (tmp_path / "imported.txt").read_text()


@FORKED
@pytest.mark.parametrize(
    "first, ulimit",
    [("plain", None), ("none", None), pytest.param("plain", USER_LIMIT, marks=pytest.mark.skipif(USER_LIMIT is None, reason="the hard address-space limit is below 16 GiB"))],
)
def test_a_worker_started_without_the_engine_loads_it_outside_its_memory_cap(tmp_path, first, ulimit):
    # In a fresh interpreter, whose workers are forked from it: the worker starts without the
    # engine (the first lint needs none, or there is no first lint) and caps its memory. It
    # loads LibCST's native parser, which fails to load past a tight cap, when a file first
    # needs it: a file with AMP words, and one whose encoding hides them from the byte search
    # (the engine is found to be needed only once it is decoded). The import hook notes the
    # soft limit each load of the parser runs under: the one the run started with, also one
    # the user set (`ulimit -v`), which a worker's cap never lifts.
    (tmp_path / "plain.py").write_text("import os\n")
    (tmp_path / "train.py").write_text(BUGGY)
    (tmp_path / "hidden.py").write_bytes(b"# coding: unicode_escape\nimport torch\nwith torch.\\x61utocast('cuda'):\n    loss = model(x)\n    loss.backward()\n")
    code = textwrap.dedent(
        """\
        import resource, sys
        from amplint.lint.catalogue import RULES
        from amplint.run.driver import Job, Runner

        loads = []

        class Noting:
            def find_spec(self, name, path=None, target=None):
                if name == "libcst.native":
                    loads.append(resource.getrlimit(resource.RLIMIT_AS)[0])
                    with open("loads.txt", "a") as handle:
                        handle.write(f"{loads[-1]}\\n")
                return None

        sys.meta_path.insert(0, Noting())
        if ULIMIT:
            resource.setrlimit(resource.RLIMIT_AS, (ULIMIT, resource.getrlimit(resource.RLIMIT_AS)[1]))
        started = resource.getrlimit(resource.RLIMIT_AS)[0]
        codes = tuple(rule.code for rule in RULES)
        for path in ("hidden.py", "train.py"):
            with Runner(workers=1, memory=64) as runner:
                if FIRST == "plain":
                    first = runner.lint([Job("plain.py", codes)])
                    assert "libcst" not in sys.modules and first[0].error is None and first[0].skipped
                result = runner.lint([Job(path, codes)])[0]
            assert result.error is None and result.findings, (path, result.error)
        print(started)
        """
    ).replace("FIRST", repr(first)).replace("ULIMIT", repr(ulimit))
    done = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stderr == "", done.stderr
    started = int(done.stdout.split()[-1])
    loads = [int(line) for line in (tmp_path / "loads.txt").read_text().split()]
    # hidden.py: loaded by its worker. train.py: by the parent, which preloads it for a file
    # the pre-check lets through, and by the worker forked before that, if one was.
    assert loads == [started] * (3 if first == "plain" else 2), (loads, started)


@FORKED
def test_a_worker_whose_engine_fails_to_load_lints_on(tmp_path):
    # The worker's first load of LibCST's parser raises (a RuntimeError, as a broken install
    # might): the worker goes on, and the file's first parse imports it again.
    (tmp_path / "plain.py").write_text("import os\n")
    (tmp_path / "train.py").write_text(BUGGY)
    code = textwrap.dedent(
        """\
        import os, sys
        from amplint.lint.catalogue import RULES
        from amplint.run.driver import Job, Runner

        parent = os.getpid()
        failed = []

        class Failing:
            def find_spec(self, name, path=None, target=None):
                if name == "libcst.native" and os.getpid() != parent and not failed:
                    failed.append(name)
                    with open("failed.txt", "w") as handle:
                        handle.write(name)
                    raise RuntimeError("cannot load")
                return None

        sys.meta_path.insert(0, Failing())
        codes = tuple(rule.code for rule in RULES)
        with Runner(workers=1, memory=64) as runner:
            runner.lint([Job("plain.py", codes)])
            result = runner.lint([Job("train.py", codes)])[0]
        assert result.error is None and result.findings, result.error
        """
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stderr == "", done.stderr
    assert (tmp_path / "failed.txt").read_text() == "libcst.native"


def test_the_language_servers_load_leaves_its_lanes_nothing_to_import(tmp_path):
    # Its two lanes fork workers: one importing a module (LibCST's parser, at a lint's
    # preload) while the other forks leaves that module's import lock held in the child for
    # good. So the server loads everything a lint or its workers import before any lane runs.
    code = "import sys\nfrom amplint.lsp.linting import load_engine\nload_engine()\nprint(sorted(m for m in ('libcst.native', 'amplint.rules', 'amplint.lint.engine', 'amplint.lint.fix_loop') if m in sys.modules))"
    done = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split("\n")[-2] == "['amplint.lint.engine', 'amplint.lint.fix_loop', 'amplint.rules', 'libcst.native']"


SOURCES = {
    "plain": "import os\nx = 1\n",
    "syntax error": "def f(:\n    pass\n",
    "newer grammar": "type X = int\n",
    "deep nesting": "x = " + "(" * 300 + "1" + ")" * 300 + "\n",
    "too deep": "x = " + "[" * 2000 + "]" * 2000 + "\n",
    "other tools' noqa": "import os  # noqa: F401\n",
    "latin-1": "# -*- coding: latin-1 -*-\ns = 'caf\xe9'\n",
    "undecodable": b"s = '\xff\xfe'\n",
    "binary": b"\x00\x01",
}


@pytest.mark.parametrize("name", sorted(SOURCES))
@pytest.mark.parametrize("target", [None, (3, 9)])
def test_the_syntax_only_path_gives_what_the_engine_gives(name, target):
    text = SOURCES[name]
    data = text if isinstance(text, bytes) else text.encode("latin-1" if name == "latin-1" else "utf-8")
    task = _Task(0, "m.py", data, ALL_CODES, None, target)
    assert not _needs_engine(task)
    quick = _syntax_only(task)
    full = lint_bytes(data, "m.py", ALL_RULES, None, target)
    assert (quick.error, quick.findings, quick.skipped) == (full.error, full.findings, full.skipped)
    assert _lint_task(task, 2.0, in_process=True)[0].error == full.error


@pytest.mark.parametrize(
    "path, text",
    [
        ("m.py", BUGGY),
        ("m.py", "import torch\nx = torch.ones(1)  # noqa: AMP003\n"),  # an unused directive to report
        ("m.py", "# amplint: noqa\nimport os\n"),
        ("m.ipynb", '{"cells": []}'),
    ],
)
def test_what_needs_the_engine_gets_it(path, text):
    assert _needs_engine(_Task(0, path, text.encode(), ALL_CODES, None, None))


@pytest.mark.parametrize("hidden", [b"with torch.\\x61utocast('cuda'):\n    loss = model(x)\n    loss.backward()\n", b"x = 1  # \\x6eoqa: AMP003\n"])
def test_words_an_encoding_hides_from_the_byte_search_still_get_the_engine(hidden):
    data = b"# coding: unicode_escape\nimport torch\n" + hidden
    task = _Task(0, "m.py", data, ALL_CODES, None, None)
    assert not _needs_engine(task)  # the bytes do not say "autocast" or "noqa"
    full = lint_bytes(data, "m.py", ALL_RULES)
    assert full.findings and _syntax_only(task).findings == full.findings


def test_the_pre_check_searches_a_file_once_and_the_worker_keeps_its_verdict(monkeypatch):
    # The parent's task carries the verdict; neither the worker nor the syntax-only path
    # searches the text for the rules' words again (it was up to four searches a file).
    from amplint.lint import catalogue
    from amplint.run.driver import Job, Runner

    plain = b"import os\nprint(os.sep)\n"
    task = Runner(1)._task(0, Job("m.py", ALL_CODES), plain)
    assert task.parse is False and Runner(1)._task(0, Job("m.py", ALL_CODES), BUGGY.encode()).parse is True
    searches = []
    for name in ("might_use_amp", "rules_matching_words"):
        original = getattr(catalogue, name)
        monkeypatch.setattr(catalogue, name, lambda *args, _original=original: searches.append(args) or _original(*args))
    assert not _needs_engine(task) and _syntax_only(task).skipped
    assert searches == []
    assert _needs_engine(task._replace(parse=True))  # the verdict decides, not the bytes


def test_a_project_run_takes_its_ordering_verdict_for_the_same_bytes_only(tmp_path, monkeypatch):
    from amplint.lint import catalogue
    from amplint.run.driver import Job, Runner

    path = tmp_path / "m.py"
    path.write_bytes(b"import os\n")
    runner, job = Runner(1), Job(str(path), ALL_CODES)
    assert runner._analysable_texts([job], [(None, None)]) == {}
    searches = []
    original = catalogue.might_use_amp
    monkeypatch.setattr(catalogue, "might_use_amp", lambda *args: searches.append(args) or original(*args))
    assert runner._task(0, job, b"import os\n").parse is False and searches == []
    # Changed since the ordering read it: searched again, and let through.
    assert runner._task(0, job, BUGGY.encode()).parse is True and len(searches) == 1


@pytest.mark.parametrize(
    "data, same",
    [
        (b"import torch\n", True),
        ("# \u00e9t\u00e9\nimport torch\n".encode("utf-8"), True),
        (b"\xef\xbb\xbfimport torch\n", True),  # a BOM
        (b"# coding: unicode_escape\nx = '\\x61utocast'\n", False),
        (b"# coding: latin-1\nx = '\xe9'\n", False),  # searched again: another encoding
    ],
)
def test_a_decoded_text_is_searched_again_only_where_its_encoding_may_change_the_words(data, same):
    from amplint.run.driver import _words_as_searched
    from amplint.run.source import decode_python

    assert _words_as_searched(data, decode_python(data, "m.py")) is same


def test_a_deselected_rule_does_not_call_for_the_engine():
    task = _Task(0, "m.py", b"import os  # noqa: AMP003\n", tuple(c for c in ALL_CODES if c != "AMP100"), None, None)
    assert not _needs_engine(task)
