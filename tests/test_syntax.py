"""The syntax verdict, with the grammar of the project's Python: reported for the files amplint
analyses (those with some rule's words) by default, and for every file with `syntax-errors =
"all"`, where it is one verdict whatever the file mentions. Most tests here are about the
verdict itself, and ask for it everywhere (`verdict`)."""

import textwrap

import pytest

from amplint.lint.engine import lint_source
from amplint.rules import ALL_RULES
from amplint.lint.syntax import RUNNING, normalise_for_libcst, syntax_error
from conftest import BUGGY

AMP_COMMENT = "\n# autocast\n"


def verdict(source, target=None, path="f.py", every_syntax=True):
    """The file's error message, or None: linted with every rule, as the command does with
    `--syntax-errors all` (`every_syntax=False`: the default, the files it analyses)."""
    result = lint_source(source, path, ALL_RULES, target=target, every_syntax=every_syntax)
    return result.error.message if result.error else None


def test_by_default_only_the_files_amplint_analyses_get_a_syntax_verdict():
    broken = "def f(:\n    pass\n"
    assert verdict(broken, every_syntax=False) is None  # no AMP words: not parsed at all
    amp = "import torch\nscaler = torch.amp.GradScaler()\n" + broken
    assert verdict(amp, every_syntax=False) == verdict(amp) == "syntax error at 3:7: invalid syntax"
    # A word in a comment is enough: the pre-check reads text, and such a file is parsed.
    assert verdict("# autocast\n" + broken, every_syntax=False) is not None


def test_the_command_reports_syntax_errors_of_the_files_it_analyses_or_of_all(amplint, tmp_path):
    (tmp_path / "plain.py").write_text("def f(:\n")
    (tmp_path / "train.py").write_text("import torch\nwith torch.autocast('cuda'):\n    x = (\n")
    result = amplint("--no-cache", "--concise", ".", cwd=tmp_path)
    assert result.returncode == 2 and "train.py: syntax error at 3:" in result.stderr and "plain.py" not in result.stderr
    result = amplint("--no-cache", "--concise", "--syntax-errors", "all", ".", cwd=tmp_path)
    assert result.returncode == 2 and "plain.py: syntax error at 1:7" in result.stderr
    (tmp_path / "pyproject.toml").write_text('[tool.amplint]\nsyntax-errors = "all"\n')
    assert "plain.py: syntax error" in amplint("--no-cache", ".", cwd=tmp_path).stderr
    assert "plain.py" not in amplint("--no-cache", "--syntax-errors", "analysed", ".", cwd=tmp_path).stderr, "the flag wins"
    (tmp_path / "pyproject.toml").write_text('[tool.amplint]\nsyntax-errors = "some"\n')
    result = amplint("--no-cache", ".", cwd=tmp_path)
    assert result.returncode == 2 and "syntax-errors must be one of 'analysed', 'all'" in result.stderr


def same_verdict_with_and_without_amp(source, target=None):
    """The verdict, after checking that a comment naming autocast does not change it."""
    plain = verdict(source, target)
    assert "autocast" not in source and "caler" not in source
    with_amp = verdict("# autocast\n" + source, target)
    assert (plain is None) == (with_amp is None), (plain, with_amp)
    return plain


# --------------------------------------------------------------------------- CPython and LibCST disagree

VALID_BUT_LIBCST_REJECTS = {
    "backslash and CRLF at the end": "x = 1\r\n\\\r\n",
    "a backslash alone on a line (found by the fuzz test)": "try:\n pass\n\\\r\nexcept:\n pass\n",
    "tab/space indent CPython accepts": "if x:\n  if y:\n\t        pass\n  pass\n",
    "tabs inside a block": "if x:\n\tif y:\n \t pass\n\tz = '''\n\t keep\n'''\n",
    "5,000 implicitly concatenated strings": "x = " + " ".join("'a'" for _ in range(5000)) + "\n",
    "5,000 strings over 5,000 lines": "x = (\n" + "".join("    b'a'  # c\n" for _ in range(5000)) + ")\n",
}
INVALID_BUT_LIBCST_ACCEPTS = {
    "non-ASCII bytes literal": ("x = b'\xc3\xa9'\n", "bytes can only contain ASCII literal characters"),
    "unknown \\N{} name": ("x = '\\N{foo}'\n", "unicode error"),
    "201 nested parentheses": ("x = " + "(" * 201 + "1" + ")" * 201 + "\n", "too many nested parentheses"),
}


@pytest.mark.parametrize("source", VALID_BUT_LIBCST_REJECTS.values(), ids=VALID_BUT_LIBCST_REJECTS.keys())
def test_valid_code_libcst_rejects_is_valid_and_analysed(source):
    assert same_verdict_with_and_without_amp(source) is None
    # ... and an AMP bug after it is still found: LibCST parsed a normalised text.
    findings = lint_source(source.rstrip("\\\r\n") + "\n" + BUGGY, "f.py", ALL_RULES).findings
    assert [f.code for f in findings] == ["AMP003"]


@pytest.mark.parametrize("case", INVALID_BUT_LIBCST_ACCEPTS.values(), ids=INVALID_BUT_LIBCST_ACCEPTS.keys())
def test_code_cpython_rejects_is_a_syntax_error_whatever_it_mentions(case):
    source, message = case
    plain = same_verdict_with_and_without_amp(source)
    assert plain.startswith("syntax error at 1:") and message in plain


def test_normalising_moves_no_character():
    source = VALID_BUT_LIBCST_REJECTS["tabs inside a block"] + VALID_BUT_LIBCST_REJECTS["5,000 strings over 5,000 lines"]
    normalised = normalise_for_libcst(source)
    assert normalised != source
    assert len(normalised) == len(source)
    assert [len(line) for line in normalised.splitlines()] == [len(line) for line in source.splitlines()]
    assert "\t keep\n" in normalised  # a string's own whitespace is the string's


def test_a_huge_concatenation_keeps_its_findings_in_place():
    strings = "x = (\n" + "".join("    'a'\n" for _ in range(3000)) + ")\n"
    findings = lint_source(strings + BUGGY, "f.py", ALL_RULES).findings
    assert [(f.code, f.row) for f in findings] == [("AMP003", 3002 + 8)]


def test_empty_tuple_condition_is_not_an_internal_error():
    # source_text() stripped the parentheses of `()`: CSTValidationError.
    assert verdict("# autocast\nif (): pass\nwhile ():\n    break\n") is None


def test_syntax_errors_of_files_with_and_without_amp_words_read_the_same():
    broken = "def f(:\n    pass\n"
    assert verdict(broken) == verdict("import torch\nscaler = torch.amp.GradScaler()\n" + broken).replace("3:", "1:")


# What the parser accepts and only compiling rejects: files amplint does not analyse are
# checked with `symtable`, which objects to these; the verdict must stay the parser's.
REJECTED_ONLY_BY_THE_COMPILER = {
    "duplicate argument": "def f(a, a):\n    pass\n",
    "nonlocal at module level": "nonlocal x\n",
    "import * in a function": "def f():\n    from m import *\n",
    "unknown __future__ feature": "from __future__ import nope\n",
    "annotated global": "def f():\n    global x\n    x: int = 1\n",
    "walrus in a comprehension's iterable": "[x for x in (y := [1])]\n",
}


@pytest.mark.parametrize("source", REJECTED_ONLY_BY_THE_COMPILER.values(), ids=REJECTED_ONLY_BY_THE_COMPILER.keys())
def test_what_only_the_compiler_rejects_gets_the_parsers_verdict(source):
    assert same_verdict_with_and_without_amp(source) is None
    assert syntax_error(source, "f.py") is None


def test_a_file_amplint_does_not_analyse_is_checked_without_building_its_tree(monkeypatch):
    import ast

    def no_tree(*args, **kwargs):
        raise AssertionError("ast.parse called for a file whose tree is not needed")

    monkeypatch.setattr(ast, "parse", no_tree)
    assert verdict("import numpy as np\n\ndef f(x):\n    return np.sum(x)\n") is None


def test_invalid_escape_sequences_print_no_warning(capfd):
    assert verdict("x = '\\d'\ny = b'\\d'\n" + AMP_COMMENT) is None
    assert capfd.readouterr().err == ""


# --------------------------------------------------------------------------- the project's grammar

NEWER_SYNTAX = {
    (3, 12): "type Vector = list[float]\n\ndef first[T](items: list[T]) -> T:\n    return items[0]\n",
    (3, 14): "greeting = t'hello {name}'\n",
}


@pytest.mark.parametrize("since", sorted(NEWER_SYNTAX))
def test_newer_syntax_is_valid_when_the_project_targets_it(since):
    source = NEWER_SYNTAX[since]
    assert same_verdict_with_and_without_amp(source) is None  # no configuration: the newest grammar
    assert same_verdict_with_and_without_amp(source, since) is None
    older = same_verdict_with_and_without_amp(source, (since[0], since[1] - 1))
    assert older is not None and older.startswith("syntax error")


def test_an_older_target_is_checked_with_its_grammar():
    match = "match command:\n    case 'go':\n        pass\n"
    assert verdict(match, (3, 10)) is None
    error = verdict(match, (3, 9))
    assert error.startswith("syntax error at ") and "only supported in Python 3.10 and greater" in error


@pytest.mark.skipif(RUNNING >= (3, 12), reason="needs an interpreter older than the syntax")
def test_newer_syntax_does_not_hide_a_real_error_elsewhere():
    # The running parser stops at `type`; LibCST finds the real error below it.
    assert verdict("type X = int\nx = (\n", (3, 12)) is not None
    # An error CPython can see without newer syntax in the way is still CPython's.
    assert "too many nested parentheses" in verdict("x = " + "(" * 201 + "1" + ")" * 201 + "\n", (3, 12))
    # A newer file whose string literal CPython rejects.
    assert verdict("type X = int\nx = b'\xc3\xa9'\n", (3, 12)) is not None


def test_newer_syntax_with_amp_code_is_analysed():
    source = NEWER_SYNTAX[(3, 12)] + BUGGY
    findings = lint_source(source, "f.py", ALL_RULES, target=(3, 12)).findings
    assert [f.code for f in findings] == ["AMP003"]


def test_target_version_configuration(amplint, tmp_path):
    (tmp_path / "new.py").write_text("# autocast\n" + NEWER_SYNTAX[(3, 12)])
    assert amplint("new.py", cwd=tmp_path).returncode == 0  # no configuration at all
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "p"\nrequires-python = ">=3.11"\n')
    result = amplint("new.py", cwd=tmp_path)
    if RUNNING < (3, 12):
        assert result.returncode == 2 and "new.py: syntax error at 2:" in result.stderr
    (tmp_path / "pyproject.toml").write_text('[project]\nrequires-python = ">=3.12"\n')
    assert amplint("new.py", cwd=tmp_path).returncode == 0, "requires-python applies without [tool.amplint]"
    (tmp_path / "pyproject.toml").write_text('[project]\nrequires-python = ">=3.9"\n[tool.amplint]\ntarget-version = "py312"\n')
    assert amplint("new.py", cwd=tmp_path).returncode == 0, "target-version wins over requires-python"
    assert amplint("--target-version", "py311", "new.py", cwd=tmp_path).returncode == 2, "the flag wins"
    (tmp_path / "pyproject.toml").write_text('[tool.amplint]\ntarget-version = "3.12"\n')
    result = amplint("new.py", cwd=tmp_path)
    assert result.returncode == 2 and "target-version must be one of py37" in result.stderr


def test_pre_commit_on_an_older_python_passes_a_newer_project(amplint, tmp_path):
    """The adoption report: on 3.11, a 3.12 project with no AMP code got 'syntax error'."""
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "p"\nrequires-python = ">=3.12"\n')
    (tmp_path / "types_.py").write_text(NEWER_SYNTAX[(3, 12)])
    result = amplint("--force-exclude", "types_.py", cwd=tmp_path)
    assert result.returncode == 0, result.stderr


def test_a_plain_syntax_error_keeps_cpythons_message():
    # Also on an interpreter older than the (default, newest) grammar: LibCST rejects it too.
    assert syntax_error("x = (\n", "f.py").message == "syntax error at 1:5: '(' was never closed"


@pytest.mark.parametrize("source", ["x = 1\x00\n", "x = '\ud800'\n"])
def test_text_no_parser_takes_is_an_error_not_a_crash(source):
    assert verdict(source + AMP_COMMENT).startswith(("could not parse", "syntax error"))
    assert verdict(source).startswith(("could not parse", "syntax error"))


def test_notebook_cells_keep_their_locations_in_syntax_errors(amplint, tmp_path):
    import json

    cells = [{"cell_type": "code", "metadata": {}, "outputs": [], "execution_count": None, "source": source}
             for source in (["import torch\n", "# autocast\n"], ["x = (\n"])]
    document = {"cells": cells, "metadata": {}, "nbformat": 4, "nbformat_minor": 5}
    (tmp_path / "n.ipynb").write_text(json.dumps(document))
    result = amplint("n.ipynb", cwd=tmp_path)
    assert result.returncode == 2 and "n.ipynb: syntax error at cell 2:1:5: '(' was never closed" in result.stderr


def test_valid_python_libcst_cannot_parse_is_not_called_a_syntax_error(monkeypatch):
    import libcst

    def refuse(source):
        raise libcst.ParserSyntaxError("nope", lines=["x"], raw_line=1, raw_column=0)

    monkeypatch.setattr(libcst, "parse_module", refuse)
    message = verdict(textwrap.dedent(BUGGY))
    assert message.startswith("could not analyse: LibCST cannot parse this valid Python")


# --------------------------------------------------------------------------- LibCST without validation


def test_a_tree_parsed_without_validation_is_the_validated_tree():
    import glob
    import os

    import libcst as cst

    from amplint.lint.syntax import parse_module_exactly

    here = os.path.dirname(os.path.abspath(__file__))
    paths = sorted(glob.glob(os.path.join(here, "cases", "*.py"))) + sorted(glob.glob(os.path.join(here, "..", "fixtures", "*", "*.py")))
    sources = [open(p, encoding="utf-8").read() for p in paths] + list(VALID_BUT_LIBCST_REJECTS.values())
    for source in sources:
        trusted, trusted_exact = parse_module_exactly(source, cpython_accepts=True)
        checked, checked_exact = parse_module_exactly(source)
        assert isinstance(trusted, cst.Module) and trusted.deep_equals(checked) and trusted_exact == checked_exact
        assert trusted.code == checked.code


def test_validation_is_back_after_a_trusted_parse_even_one_that_fails():
    import libcst as cst

    from amplint.lint.syntax import parse_module_exactly

    for source in ("x = 1\n", "x = (\n"):
        parse_module_exactly(source, cpython_accepts=True)
        with pytest.raises(cst.CSTValidationError):
            cst.Name("")


def test_nodes_made_while_trusting_the_parser_are_not_validated():
    import libcst as cst

    from amplint.lint.syntax import trusting_libcsts_parser

    with trusting_libcsts_parser():
        with trusting_libcsts_parser():
            cst.Name("")  # no CSTValidationError: validation is off
        cst.Name("")  # still off until the outer one ends
    with pytest.raises(cst.CSTValidationError):
        cst.Name("")


def test_a_libcst_without_post_init_validation_parses_as_before(monkeypatch):
    import libcst as cst

    from amplint.lint import syntax

    monkeypatch.setattr(syntax, "_VALIDATION", None)
    module, exact = syntax.parse_module_exactly("x = 1\n", cpython_accepts=True)
    assert isinstance(module, cst.Module) and exact
    with pytest.raises(cst.CSTValidationError):
        cst.Name("")
