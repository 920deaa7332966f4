"""How a gradient read uses the gradients: the facts AMP009 judges.

A norm computed from gradients that still carry the loss scale is off by the scale; noise of
a fixed size added to them is divided away with the scale when they are unscaled. Linear
changes (averaging, `all_reduce`, `mul_`) commute with the later unscale and are no use the
scale corrupts.
"""

from __future__ import annotations

from typing import Dict, Optional

import libcst as cst

from amplint.semantic.names import dotted_name
from amplint.semantic.walk import children, iter_tree

NORM = "norm"
NOISE = "noise"

_NORM_METHODS = frozenset({"norm"})
_NORM_FUNCTIONS = frozenset(
    {
        "torch.norm",
        "torch.linalg.norm",
        "torch.linalg.vector_norm",
        "torch.nn.utils.get_total_norm",
        "torch.nn.utils.clip_grad.get_total_norm",
    }
)
_RANDOM = frozenset({"randn", "randn_like", "rand", "rand_like", "normal", "normal_"})
_ADDING = frozenset({"add", "add_"})


def gradient_use(read: cst.Attribute, statement: cst.CSTNode) -> Optional[str]:
    """How `statement` uses the gradient it reads at `read` (`p.grad`): NORM (a norm is
    computed from it), NOISE (random noise is added to it), or None (nothing the scale
    corrupts)."""
    parents: Dict[int, cst.CSTNode] = {}
    for node in iter_tree(statement):
        for child in children(node):
            parents[id(child)] = node
    node: cst.CSTNode = read
    while True:
        parent = parents.get(id(node))
        if parent is None:
            break
        if isinstance(parent, cst.Attribute) and parent.value is node:
            call = parents.get(id(parent))
            if isinstance(call, cst.Call) and call.func is parent:
                # a method of the gradient (or of what is computed from it): `p.grad.norm()`
                if parent.attr.value in _NORM_METHODS:
                    return NORM
                if parent.attr.value in _ADDING and _random(call.args):
                    return NOISE
        if isinstance(parent, cst.Call) and _is_norm_function(parent.func):
            return NORM
        if isinstance(parent, cst.AugAssign) and parent.target is node and _random([parent.value]):
            return NOISE
        if isinstance(parent, cst.BinaryOperation) and isinstance(parent.operator, cst.Power) and parent.left is node:
            return NORM  # `p.grad ** 2`: a sum of squares
        node = parent
    return None


def _is_norm_function(func: cst.BaseExpression) -> bool:
    name = dotted_name(func) or ""
    return name in _NORM_FUNCTIONS or name.rsplit(".", 1)[-1] in ("get_total_norm", "vector_norm")


def _random(values) -> bool:
    for value in values:
        expression = value.value if isinstance(value, cst.Arg) else value
        for node in iter_tree(expression):
            if isinstance(node, cst.Call) and (dotted_name(node.func) or "").rsplit(".", 1)[-1] in _RANDOM:
                return True
    return False
