"""`amplint.lint.positions.code_ranges` gives exactly what LibCST's PositionProvider gives."""

from __future__ import annotations

import glob
import os
from typing import Dict, Iterator, List

import libcst as cst
import pytest
from libcst.metadata import MetadataWrapper, PositionProvider

from amplint.lint import positions
from amplint.lint.positions import code_ranges
from amplint.semantic.walk import iter_tree

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)

TRICKY = {
    "crlf": "import torch\r\n\r\n@decorator\r\n@other(1)\r\ndef f(x):\r\n    return x  # c\r\n",
    "lone cr": "a = 1\rb = '''x\ry'''\rif a:\r    b = 2\r",
    "semicolons and suites": "a = 1; b = 2\nif a: b = 3; c = 4\nwhile b: pass\n",
    "decorated class": "\n\n# lead\n@dataclass\n\n# between\nclass C(Base, metaclass=M):\n    x: int = 1\n\n    @property\n    def y(self): return self.x\n",
    "strings and f-strings": 'x = f"{a!r:>{w}} {b}" "\\\n" """\nmulti\nline\n"""\ny = (1,\n     2)\n',
    "match and try": "match x:\n    case [1, *rest]:\n        pass\n    case _:\n        y = 1\ntry:\n    pass\nexcept* ValueError as e:\n    raise\nelse:\n    pass\nfinally:\n    z = 1\n",
    "no trailing newline": "def f():\n    return 1",
    "comments only": "# one\n\n# two\n",
    "async and with": "async def f():\n    async with a as b, c:\n        async for x in y:\n            await z\n    with (open(p) as h,\n          open(q) as g):\n        pass\n",
    "lambda and comprehension": "f = lambda *a, b=1, **k: [i for i in a if i if b]\ng = {k: v for k, v in d.items()}\n",
    "repeated statements": "# h\nx = 1\ny = 2\nx = 1\n\nx = 1\ndef f():\n    x = 1\n# t\nx = 1\n",
    "footer and header": "#!/usr/bin/env python\n# header\n\nimport a\n\n\n# footer\n",
}


def every_node(module: cst.Module) -> Iterator[cst.CSTNode]:
    stack: List[cst.CSTNode] = [module]
    while stack:
        node = stack.pop()
        yield node
        stack.extend(node.children)


def _same_as_provider(source: str) -> None:
    module = cst.parse_module(source)
    expected = MetadataWrapper(module, unsafe_skip_copy=True).resolve(PositionProvider)
    nodes = list(every_node(module))
    assert code_ranges(module, nodes) == {node: expected[node] for node in nodes}
    # Given the source, only the statements that hold the nodes are printed: the same ranges.
    assert code_ranges(module, nodes, source) == {node: expected[node] for node in nodes}
    # The code of each statement printed, as `code_for_node` prints it (what fix suggestions compare).
    printed: Dict[int, str] = {}
    in_statements = [node for statement in module.body for node in iter_tree(statement)]  # the code-carrying nodes
    assert code_ranges(module, in_statements, source, printed) == {node: expected[node] for node in in_statements}
    assert printed == {id(statement): module.code_for_node(statement) for statement in module.body if id(statement) in printed}
    if module.has_trailing_newline:
        assert len(printed) == len(module.body)
    # A few nodes alone: what is recorded for one must not depend on what else is asked for.
    for node in nodes[:: max(1, len(nodes) // 25)]:
        assert code_ranges(module, [node]) == {node: expected[node]}
        assert code_ranges(module, [node], source) == {node: expected[node]}
    # Nodes of statements far apart, each found by its text or by counting the ones between.
    sparse = [node for index, node in enumerate(nodes) if index % 7 == 3]
    assert code_ranges(module, sparse, source) == {node: expected[node] for node in sparse}
    for statement in module.body[1::2]:
        inner = list(every_node(statement))[-1:]
        assert code_ranges(module, inner, source) == {node: expected[node] for node in inner}


@pytest.mark.parametrize("name", sorted(TRICKY))
def test_tricky_layouts(name: str) -> None:
    _same_as_provider(TRICKY[name])


def _real_files() -> List[str]:
    found = sorted(glob.glob(os.path.join(HERE, "cases", "*.py")))
    found += sorted(glob.glob(os.path.join(REPO, "fixtures", "**", "*.py"), recursive=True))
    found += [os.path.join(REPO, "amplint", "lint", "engine.py"), os.path.join(REPO, "amplint", "lint", "fix.py")]
    return found


@pytest.mark.parametrize("path", _real_files(), ids=lambda p: os.path.relpath(p, REPO))
def test_real_files(path: str) -> None:
    with open(path, encoding="utf-8", newline="") as handle:
        _same_as_provider(handle.read())


def test_nothing_wanted_prints_nothing() -> None:
    assert code_ranges(cst.parse_module("a = 1\n"), []) == {}


def test_a_hoisted_child_that_is_never_printed_falls_back_to_the_provider(monkeypatch: pytest.MonkeyPatch) -> None:
    source = "def f():\n    return 1\n"
    module = cst.parse_module(source)
    function = module.body[0]
    expected = MetadataWrapper(module, unsafe_skip_copy=True).resolve(PositionProvider)[function]
    # As if the hoisted child's span had been lost: the provider is asked instead.
    original = positions._Recorder.after_codegen

    def forgetful(self, node):  # type: ignore[no-untyped-def]
        original(self, node)
        if node is function.body:
            self.spans.pop(id(node), None)

    asked = []

    def provider(*args, **kwargs):  # type: ignore[no-untyped-def]
        asked.append(True)
        return MetadataWrapper(*args, **kwargs)

    monkeypatch.setattr(positions._Recorder, "after_codegen", forgetful)
    monkeypatch.setattr(positions, "MetadataWrapper", provider)
    assert code_ranges(module, [function]) == {function: expected}
    assert asked


def test_a_printing_that_fails_under_the_private_hook_falls_back_to_the_provider(monkeypatch: pytest.MonkeyPatch) -> None:
    module = cst.parse_module(TRICKY["decorated class"])
    nodes = list(every_node(module))
    expected = MetadataWrapper(module, unsafe_skip_copy=True).resolve(PositionProvider)

    def broken(self, node):  # type: ignore[no-untyped-def]
        raise AttributeError("a LibCST whose codegen state changed")

    monkeypatch.setattr(positions._Recorder, "before_codegen", broken)
    assert code_ranges(module, nodes) == {node: expected[node] for node in nodes}
    assert code_ranges(module, nodes, TRICKY["decorated class"]) == {node: expected[node] for node in nodes}
