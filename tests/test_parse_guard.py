"""Valid Python LibCST takes minutes on or crashes on is reported at once, in the file's own
error; ordinary code, however long its lines, never pays for the check."""

import time

import pytest

from amplint.lint.engine import lint_source
from amplint.lint.parse_guard import NESTING_LIMIT, nesting, parse_hazard
from amplint.rules import ALL_RULES

# Code a rule needs (`amplint.lint.evidence`): the file would be parsed by LibCST.
HEADER = "import torch; torch.autocast; loss.backward()\n"


@pytest.mark.parametrize(
    "line, message",
    [
        ("x = a" + " and a" * 10000, "not parsed: the statement at 2:1 nests 10003 levels deep"),  # SIGSEGV in LibCST
        ("x = " + "[" * 1500 + "]" * 1500, "syntax error at 2:205: too many nested parentheses"),  # SIGSEGV
        ("x = " + "not " * 20000 + "a", "not parsed: nested too deeply for CPython's parser"),  # SIGSEGV
        ("x = a" + " + a" * 5000, "nests 5003 levels deep"),  # minutes
        ("x = a" + ".b" * 3000, "nests 3003 levels deep"),
        ("x = f" + "()" * 2500, "nests 2503 levels deep"),
        ("x = a" + "[0]" * 2100, "nests 2103 levels deep"),
    ],
)
def test_deep_nesting_is_an_error_not_a_crash_or_a_stall(line, message):
    started = time.process_time()
    result = lint_source(HEADER + line + "\n", "bad.py", ALL_RULES)
    assert message in result.error.message
    assert time.process_time() - started < 2


def test_long_lines_of_ordinary_code_are_not_checked():
    data = "x = [" + ", ".join(str(i) for i in range(5000)) + "]\n"
    calls = "y = f(" + ", ".join(f"a{i}=g(b{i})" for i in range(300)) + ")\n"
    assert parse_hazard(HEADER + data + calls) is None
    assert parse_hazard(HEADER + "x = (" + " + ".join(["a"] * 1500) + ")\n") is None  # 0.5 s for LibCST: allowed


def test_nesting_counts_as_libcst_builds_it():
    import ast

    assert nesting(ast.parse("a and b and c and d"))[0] == nesting(ast.parse("a + b + c + d"))[0]
    assert nesting(ast.parse("x = 1\ny = (a + (b + c))\n"))[1] == (2, 1)
    assert NESTING_LIMIT >= 1500  # a 1,500-term concatenation is linted (tests/test_cli.py)
