"""The value a variable certainly holds where it is read (`StraightLineValues`): the nearest
earlier assignment on the straight-line way, looked for statement by statement."""

import textwrap

import libcst as cst

from amplint.analyses import straight_line
from amplint.analyses.straight_line import StraightLineValues
from amplint.semantic import analyze, iter_tree, source_text


def values_read(source, name):
    """The source of the value of each read of `name` at the module's top level, in order."""
    model = analyze(cst.parse_module(textwrap.dedent(source)))
    module = next(unit for unit in model.units if unit.is_module)
    values = StraightLineValues()
    reads = [
        node
        for statement in module.node.body
        if isinstance(statement, cst.SimpleStatementLine) and isinstance(statement.body[0], cst.Expr)
        for node in iter_tree(statement)
        if isinstance(node, cst.Name) and node.value == name
    ]
    found = [values.value_at(read, module) for read in reads]
    return [source_text(value) if value is not None else None for value in found]


def test_what_a_function_assigns_in_its_body_does_not_rebind_the_modules_name():
    assert values_read(
        """
        eps = 1e-8
        def f():
            eps = 0.1
            return eps
        class C:
            eps = 0.5
        print(eps)
        """,
        "eps",
    ) == ["1e-8"]


def test_a_definition_of_the_name_itself_rebinds_it():
    assert values_read("eps = 1e-8\ndef eps():\n    pass\nprint(eps)\n", "eps") == [None]


def test_the_names_a_statement_binds_are_gathered_once_for_all_reads(monkeypatch):
    """A module of many statements and many reads: each statement's names once, not once per
    read (the square of the module's size, which the step meter did not count)."""
    gathered = []
    real = straight_line._bound_names
    monkeypatch.setattr(straight_line, "_bound_names", lambda node: gathered.append(node) or real(node))
    blocks = "".join(f"for i{k} in range(3):\n    total = i{k}\nprint(total)\n" for k in range(40))
    assert values_read("total = 0\n" + blocks, "total") == [None] * 40  # each loop may rebind it
    assert len(gathered) == len({id(node) for node in gathered})
