"""The editor's parse after an edit (`amplint.lint.reparse`): pieces of a file parsed alone
and joined make LibCST's tree of the whole file, node for node, and an edit parses only the
pieces whose text changed."""

from __future__ import annotations

import ast
import glob
import os
from typing import List, Optional

import libcst as cst
import pytest

from amplint.lint import reparse
from amplint.lint.engine import lint_source
from amplint.lint.reparse import StatementCache, pieces
from amplint.lint.syntax import parse_accepted
from amplint.rules import ALL_RULES

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)

TRICKY = {
    "blank lines and comments between": "import a\n\n\n# about f\n\n@decorator\n# between decorators\n@other(1)\ndef f(x):\n    return x  # c\n\n\nclass C:\n    y = 1\n",
    "indented comment after a block": "def f():\n    x = 1\n    # the block's footer\n\ny = 2\n\n\ndef g():\n    pass\n        # deeper\n# at column 0\nz = 3\n",
    "continued by a backslash": "x = 1 + \\\n    2\ny = 3 \\\n\nz = 4\n",
    "semicolons and suites": "a = 1; b = 2\nif a: b = 3; c = 4\nwhile b: pass\nd = 5\n",
    "header and footer": "#!/usr/bin/env python\n# header\n\n'''doc'''\n\nimport a\n\n\n# footer\n\n",
    "two-space indent first": "x = 1\n\nif x:\n  y = 2\n\n\ndef f():\n  return 3\n",
    "indent only in the else": "if x: pass\nelse:\n    y = 1\nz = 2\n",
    "match": "match x:\n    case [1, *rest]:\n        pass\n    case _:\n        y = 1\nz = 2\n",
    "repeated statements": "x = 1\n\nx = 1\ndef f():\n    x = 1\n# t\nx = 1\n\n\nx = 1\n",
    "strings across lines": 'x = """\n# not a comment\n\n"""\ny = (1,\n# inside brackets\n     2)\nz = 3\n',
    "whitespace-only line": "def f():\n    x = 1\n    \ny = 2\n",
    "tabs": "def f():\n\tx = 1\n\ny = 2\n\n\ndef g():\n\treturn 1\n",
    # Valid Python that LibCST's node validation refuses (no space after the keyword): a
    # piece's first statement is made again with the lines before it, unvalidated too.
    "keywords against numbers": "x = 1\n\nif.5:pass\n# c\nwhile.1:\n    break\n\nfor i in.5,:\n    pass\n",
}


def _joined(source: str, cache: Optional[StatementCache] = None) -> Optional[cst.Module]:
    texts = pieces(source, ast.parse(source))
    assert texts is not None
    assert "".join(texts) == source
    return (cache or StatementCache()).parse(texts)


def _assert_same_tree(source: str, cache: Optional[StatementCache] = None) -> None:
    joined = _joined(source, cache)
    whole = parse_accepted(source)  # as the engine parses code CPython accepts
    assert joined is not None
    assert joined.deep_equals(whole)
    assert joined.default_indent == whole.default_indent and joined.has_trailing_newline == whole.has_trailing_newline
    assert joined.code == source


@pytest.mark.parametrize("name", sorted(TRICKY))
def test_pieces_join_to_libcsts_tree(name: str) -> None:
    _assert_same_tree(TRICKY[name])


def _repository_files() -> List[str]:
    patterns = ("amplint/**/*.py", "rules/*.py", "fixtures/**/*.py", "bench/*.py")
    return sorted(path for pattern in patterns for path in glob.glob(os.path.join(REPO, pattern), recursive=True))


def test_pieces_join_to_libcsts_tree_on_the_repository() -> None:
    """Every file of the repository that can be cut, cut and joined, is LibCST's tree of it."""
    joined = 0
    for path in _repository_files():
        with open(path, encoding="utf-8") as handle:
            source = handle.read()
        if pieces(source, ast.parse(source)) is not None:
            _assert_same_tree(source)
            joined += 1
    assert joined > 200


def test_cut_only_where_libcst_splits_the_same() -> None:
    """No cut before an indented comment (the block's), after a backslash, inside a line."""
    cut = pieces(TRICKY["indented comment after a block"], ast.parse(TRICKY["indented comment after a block"]))
    assert cut == ["def f():\n    x = 1\n    # the block's footer\n\ny = 2\n", "\n\ndef g():\n    pass\n        # deeper\n# at column 0\nz = 3\n"]
    assert pieces(TRICKY["continued by a backslash"], ast.parse(TRICKY["continued by a backslash"])) == ["x = 1 + \\\n    2\n", "y = 3 \\\n\nz = 4\n"]
    assert pieces(TRICKY["semicolons and suites"], ast.parse(TRICKY["semicolons and suites"])) == ["a = 1; b = 2\n", "if a: b = 3; c = 4\n", "while b: pass\n", "d = 5\n"]


@pytest.mark.parametrize("source", ["x = 1\r\ny = 2\r\n", "x = 1\ny = 2", "\ufeffx = 1\ny = 2\n", "x = 1\n\x0c\ny = 2\n", "# only a comment\n"])
def test_files_parsed_whole(source: str) -> None:
    assert pieces(source, ast.parse(source.lstrip("\ufeff"))) is None


def test_an_indentation_not_the_files_is_parsed_whole() -> None:
    """A piece whose first indentation is not the file's would print its blocks with the
    wrong one: such a file is not joined."""
    source = "if a:\n  b = 1\n\n\ndef f():\n    return 2\n"
    assert _joined(source) is None
    assert _joined("if a:\n    b = 1\n\n\ndef f():\n    return 2\n") is not None


def test_an_edit_parses_only_the_pieces_it_changed() -> None:
    cache = StatementCache()
    source = TRICKY["blank lines and comments between"]
    _assert_same_tree(source, cache)
    parsed = cache.parsed
    edited = source.replace("y = 1", "y = 2")
    _assert_same_tree(edited, cache)
    assert cache.parsed == parsed + 1
    assert cache.kept == len(pieces(edited, ast.parse(edited))) - 1


def test_a_statement_stands_once_in_a_tree() -> None:
    """The same text twice in a file: the second place is parsed again, not the same nodes."""
    cache = StatementCache()
    source = "x = 1\n\n\nx = 1\n\n\nx = 1\n"
    module = _joined(source, cache)
    assert module is not None
    assert len({id(statement) for statement in module.body}) == 3
    assert cache.parsed == 3 and cache.kept == 0


def test_a_file_larger_than_the_cache_is_parsed_whole() -> None:
    cache = StatementCache(limit=14)  # 13 characters fit, 19 do not
    assert _joined("a = 1\n\n\nb = 2\n", cache) is not None
    assert _joined("a = 1\n\n\nb = 2222222\n", cache) is None


def test_the_work_counted_is_the_same_whatever_was_kept(monkeypatch, meter_steps) -> None:
    """The work meter's verdict never depends on what a worker kept: a lint takes as many
    steps with every piece parsed anew, with every piece kept, and without pieces."""
    spent = meter_steps
    with open(os.path.join(REPO, "fixtures", "AMP001", "buggy.py"), encoding="utf-8") as handle:
        source = handle.read()
    cache = StatementCache()
    for active in (None, cache, cache):  # whole, every piece new, every piece kept
        monkeypatch.setattr(reparse, "_ACTIVE", active)
        lint_source(source, "buggy.py", ALL_RULES, summary=False)
    assert cache.parsed > 1 and cache.kept == cache.parsed
    assert spent[0] == spent[1] == spent[2]


def test_the_least_recently_used_pieces_are_dropped_past_the_limit() -> None:
    cache = StatementCache(limit=40)
    first = "a = 1\n\n\nb = 2\n"
    _joined(first, cache)
    _joined("c = 3333333333333333333333333333333\n", cache)  # 36 characters: a's and b's go
    parsed = cache.parsed
    _joined(first, cache)
    assert cache.parsed == parsed + 2


@pytest.mark.parametrize("path", sorted(glob.glob(os.path.join(REPO, "fixtures", "AMP*", "buggy.py"))), ids=lambda p: os.path.basename(os.path.dirname(p)))
def test_the_editors_lint_finds_what_a_whole_parse_finds(path: str) -> None:
    """Edit after edit (a line added at the top, one changed in the middle, one at the end),
    a lint with the kept statements has the findings of a lint without."""
    with open(path, encoding="utf-8") as handle:
        source = handle.read()
    lines = source.splitlines(keepends=True)
    edits = [
        source,
        "import os\n" + source,
        "".join(lines[: len(lines) // 2] + ["\n\nLR = 0.1\n\n"] + lines[len(lines) // 2 :]),
        source + "\nLR = 0.2\n",
        source + "\n\nif.5:pass\n",
    ]
    cache = StatementCache()
    for text in edits:
        reparse._ACTIVE = None
        whole = lint_source(text, "buggy.py", ALL_RULES, summary=False)
        reparse._ACTIVE = cache
        try:
            kept = lint_source(text, "buggy.py", ALL_RULES, summary=False)
        finally:
            reparse._ACTIVE = None
        assert kept.findings == whole.findings and kept.error == whole.error
    assert cache.kept > 0


def test_the_editors_workers_keep_statements(tmp_path, monkeypatch) -> None:
    """The language server's lanes lint in workers that keep what they parse (and a run's
    workers do not); through them, an edited file has the findings of a plain run."""
    from amplint.lsp import linting
    from amplint.run.driver import Job, Runner

    marker = tmp_path / "kept"
    keep = reparse.keep_statements

    def noted_keep(*args, **kwargs) -> None:  # runs in the forked worker
        marker.write_text("yes")
        keep(*args, **kwargs)

    monkeypatch.setattr(reparse, "keep_statements", noted_keep)
    with open(os.path.join(REPO, "fixtures", "AMP001", "buggy.py"), encoding="utf-8") as handle:
        source = handle.read()
    codes = tuple(rule.code for rule in ALL_RULES)
    with Runner() as plain:
        expected = [plain.lint([Job("train.py", codes, data=text.encode(), summary=False)])[0].findings for text in (source, source + "\nLR = 0.1\n")]
    assert not marker.exists()
    with Runner(keep_statements=True) as editor:
        found = [editor.lint([Job("train.py", codes, data=text.encode(), summary=False)])[0].findings for text in (source, source + "\nLR = 0.1\n")]
    assert marker.read_text() == "yes"
    assert found == expected and found[0]
    linting.lint_isolated("train.py", codes, source.encode(), None)
    assert all(runner.keep_statements for runner in linting._lane.runners.values())


def test_a_worker_out_of_memory_drops_what_it_kept(monkeypatch) -> None:
    from amplint.run import driver

    cache = StatementCache()
    source = "a = 1\n\n\nb = 2\n"
    _joined(source, cache)
    monkeypatch.setattr(reparse, "_ACTIVE", cache)
    driver._forget_kept_statements()
    parsed = cache.parsed
    _joined(source, cache)
    assert cache.parsed == parsed + 2
