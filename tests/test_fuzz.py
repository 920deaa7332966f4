"""Fuzzing the syntax verdict with programs hypothesmith generates from CPython's grammar.

For every program: no exception escapes the engine (the command would report an internal
error), and the verdict is the same with and without an AMP word in a comment, so it never
depends on whether amplint analyses the file. The suite runs a small budget; a larger run:

    AMPLINT_FUZZ_EXAMPLES=3000 python -m pytest tests/test_fuzz.py -W ignore::SyntaxWarning
"""

import os

import pytest

hypothesis = pytest.importorskip("hypothesis")
hypothesmith = pytest.importorskip("hypothesmith")

from hypothesis import HealthCheck, assume, example, given, settings, strategies  # noqa: E402

from amplint.lint.engine import lint_source  # noqa: E402
from amplint.rules import ALL_RULES  # noqa: E402
from amplint.lint.syntax import syntax_error  # noqa: E402

# Examples per test; the suite's budget keeps the file to a few seconds (generating from
# LibCST nodes is the slow part).
EXAMPLES = int(os.environ.get("AMPLINT_FUZZ_EXAMPLES", "0"))


def budget(default):
    return settings(
        max_examples=EXAMPLES or default,
        deadline=None,
        derandomize=not EXAMPLES,  # the suite is reproducible; a larger run explores
        suppress_health_check=list(HealthCheck),
        database=None,
    )


def with_amp_word(source):
    """The program with `# autocast` appended as a comment on a line of its own."""
    return source + ("" if source.endswith(("\n", "\r")) else "\n") + "# autocast\n"


def check(source):
    # With every file given its verdict (`--syntax-errors all`), skipping a file without AMP words
    # must not change whether its syntax error is reported.
    plain = lint_source(source, "fuzz.py", ALL_RULES, every_syntax=True)
    amp_source = with_amp_word(source)
    # Appending a line must not change what CPython thinks (a trailing `\` would join it).
    assume((syntax_error(source, "f.py") is None) == (syntax_error(amp_source, "f.py") is None))
    amp = lint_source(amp_source, "fuzz.py", ALL_RULES, whole=True)  # analysed, whatever the code needs
    for result in (plain, amp):
        assert result.error is None or "internal error" not in result.error.message
    assert (plain.error is None) == (amp.error is None), (plain.error, amp.error)


@budget(25)
@given(hypothesmith.from_grammar())
def test_programs_from_the_grammar(source):
    check(source)


@budget(8)
@given(hypothesmith.from_node())
@example("try:\n pass\n\\\r\nexcept :\n pass\n")  # a lone backslash line LibCST rejected
def test_programs_from_libcst_nodes(source):
    check(source)


ODD_LINES = strategies.sampled_from(
    ["\t", " ", "\f", "\\", "\r\n", "\r", "\n", "if x:", "pass", "b'\\xff'", "'\\N{DASH}'", "(", ")", "#", "'''", '"', "f'{x}'"]
)


@budget(300)
@given(strategies.lists(ODD_LINES, max_size=12).map("".join))
@example("b'\\xff'''''''")  # LibCST refused with CSTValidationError, not a parse error
def test_odd_whitespace_and_literals(source):
    check(source)
