"""LibCST's node classes answer `isinstance` with `type`'s check once the semantic core is
imported (`amplint.semantic.node_classes`), and the answers are ABCMeta's: on every kind of
node the fixtures hold, for every node class; and ABCMeta answers again as soon as anything
registers a virtual subclass."""

import abc
import subprocess
import sys
import textwrap
from pathlib import Path

import libcst as cst

import amplint.semantic  # noqa: F401  (gives the node classes their checks)
from amplint.semantic.node_classes import _node_classes, _PlainChecks

REPO = Path(__file__).resolve().parent.parent


def test_the_core_gives_every_node_class_the_plain_checks():
    classes = _node_classes()
    assert len(classes) > 300
    assert all(type(cls) is _PlainChecks for cls in classes)
    assert type(cst.Name) is _PlainChecks and type(cst.BaseExpression) is _PlainChecks


def test_the_answers_are_abcmetas_on_every_kind_of_node_of_real_files():
    classes = _node_classes()
    examples = {}  # a node of each kind the fixtures hold, whitespace and operators too
    for path in sorted(REPO.glob("fixtures/AMP0*/*.py")):
        waiting = [cst.parse_module(path.read_text(encoding="utf-8"))]
        while waiting:
            node = waiting.pop()
            examples.setdefault(type(node), node)
            waiting.extend(node.children)
    assert len(examples) > 90
    for kind, node in examples.items():
        for cls in classes:
            assert isinstance(node, cls) is abc.ABCMeta.__instancecheck__(cls, node), (kind, cls)
            assert issubclass(kind, cls) is abc.ABCMeta.__subclasscheck__(cls, kind), (kind, cls)
    assert not isinstance("a name", cst.Name) and not isinstance(None, cst.CSTNode)


def _run(code: str) -> str:
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, cwd=REPO, check=True)
    return done.stdout.strip()


def test_registering_a_virtual_subclass_brings_abcmeta_back():
    out = _run(
        """
        import abc, libcst as cst
        import amplint.semantic
        class Lookalike: pass
        print(type(cst.Name).__name__, isinstance(Lookalike(), cst.BaseExpression))
        cst.BaseExpression.register(Lookalike)
        print(type(cst.Name) is abc.ABCMeta, isinstance(Lookalike(), cst.BaseExpression), isinstance(Lookalike(), cst.CSTNode))
        """
    )
    assert out.splitlines() == ["_PlainChecks False", "True True True"]


def test_node_classes_with_a_virtual_subclass_are_left_to_abcmeta():
    out = _run(
        """
        import abc, libcst as cst
        class Lookalike: pass
        cst.BaseExpression.register(Lookalike)
        import amplint.semantic
        from amplint.semantic.node_classes import plain_checks
        print(type(cst.Name) is abc.ABCMeta, plain_checks(), isinstance(Lookalike(), cst.CSTNode))
        """
    )
    assert out == "True False True"
