"""AMP016's statements written in a class body or a probing `try`, wherever they are nested."""

from __future__ import annotations

import textwrap

import libcst as cst

from rules.amp016_autocast_never_entered import _blocks

SOURCE = textwrap.dedent(
    """
    if ready:
        class Outer:
            ctx = torch.autocast("cuda")
            def method(self):
                try:
                    probe = torch.autocast("cpu")
                except RuntimeError:
                    pass
                class Inner: inline = 1
                for x in y:
                    with z:
                        class Deep:
                            deep = 2
    try:
        plain = 3
    finally:
        pass
    """
)


def _texts(module: cst.Module, ids: set) -> set:
    found = set()
    stack = [module]
    while stack:
        node = stack.pop()
        if id(node) in ids:
            found.add(module.code_for_node(node).strip())
        stack.extend(node.children)
    return found


def test_class_bodies_and_probing_try_bodies_are_found_at_any_depth() -> None:
    module = cst.parse_module(SOURCE)
    class_bodies, probes = _blocks(module)
    assert _texts(module, class_bodies) == {
        'ctx = torch.autocast("cuda")',
        module.code_for_node(module.body[0].body.body[0].body.body[1]).strip(),  # `def method`
        "deep = 2",
    }
    assert _texts(module, probes) == {'probe = torch.autocast("cpu")'}  # not a `try` without `except`
