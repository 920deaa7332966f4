"""How a gradient read uses the gradients: the facts AMP009 judges.

A norm computed from gradients that still carry the loss scale is off by the scale; noise of
a fixed size added to them is divided away with the scale when they are unscaled. Linear
changes (averaging, `all_reduce`, `mul_`) commute with the later unscale and are no use the
scale corrupts.

Noise is followed through the variables of the read's function (`noise = torch.randn_like(p.grad)
* sigma`, then `p.grad.add_(noise)`) when the caller says what they are assigned (`values`).
Noise whose size is computed from the gradients themselves (`torch.randn_like(p.grad) *
p.grad.std()`, `sigma * grad_norm` with `grad_norm = clip_grad_norm_(...)`) carries the scale
too and comes out right when unscaled: it is not counted as noise. Reading a gradient for its
shape, device or dtype (`torch.randn_like(p.grad)`, `p.grad.shape`) does not size anything.
"""

from __future__ import annotations

from typing import Callable, Dict, Iterable, List, Optional, Set

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
# What reads a tensor for its shape, device or dtype only: `p.grad.shape`, `p.grad.size()`,
# `torch.randn_like(p.grad)` (the first argument of a `*_like` function).
_SHAPE_ATTRIBUTES = frozenset({"shape", "device", "dtype", "is_cuda", "ndim", "layout"})
_SHAPE_METHODS = frozenset({"size", "numel", "dim", "new_empty", "new_zeros", "new_ones", "get_device"})
_SIZES_ONLY = frozenset({"randn", "rand", "empty", "zeros", "ones"})  # positional arguments are sizes
_SHAPE_KEYWORDS = frozenset({"size", "device", "dtype", "layout", "generator", "out", "requires_grad"})
_MAX_DEPTH = 8

# What a variable of the read's function is assigned, as its caller knows it: every value
# given to it there (a `for` target: what it is drawn from); empty when unknown.
Values = Callable[[str], List[cst.BaseExpression]]


def _no_values(name: str) -> List[cst.BaseExpression]:
    return []


def gradient_use(read: cst.Attribute, statement: cst.CSTNode, values: Values = _no_values) -> Optional[str]:
    """How `statement` uses the gradient it reads at `read` (`p.grad`): NORM (a norm is
    computed from it), NOISE (random noise is added to it, there or through the variables
    `values` knows), or None (nothing the scale corrupts)."""
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
                if parent.attr.value in _ADDING and noise(call.args, values):
                    return NOISE
        if isinstance(parent, cst.Call) and _is_norm_function(parent.func):
            return NORM
        if isinstance(parent, cst.AugAssign) and parent.target is node and noise([parent.value], values):
            return NOISE
        if (
            isinstance(parent, cst.BinaryOperation)
            and isinstance(parent.operator, cst.Add)
            and _assigns_gradient(statement)
            and noise([parent.right if parent.left is node else parent.left], values)
        ):
            return NOISE  # `p.grad = p.grad + noise`
        if isinstance(parent, cst.BinaryOperation) and isinstance(parent.operator, cst.Power) and parent.left is node:
            return NORM  # `p.grad ** 2`: a sum of squares
        node = parent
    return None


def _is_norm_function(func: cst.BaseExpression) -> bool:
    name = dotted_name(func) or ""
    return name in _NORM_FUNCTIONS or name.rsplit(".", 1)[-1] in ("get_total_norm", "vector_norm")


def _assigns_gradient(statement: cst.CSTNode) -> bool:
    """Whether the statement assigns a `.grad`: `p.grad = p.grad + noise`."""
    for node in iter_tree(statement):
        if isinstance(node, cst.AssignTarget) and isinstance(node.target, cst.Attribute) and node.target.attr.value == "grad":
            return True
    return False


def noise(expressions: Iterable, values: Values = _no_values) -> bool:
    """Whether these expressions (or arguments) are random noise of a size that does not come
    from the gradients: a random call in them, or in what their variables are assigned
    (`values`), and no gradient read for its value (only for its shape) or gradient norm
    among what sizes it."""
    sources = _Sources(values)
    for value in expressions:
        sources.visit(value.value if isinstance(value, cst.Arg) else value, 0)
    return sources.random and not sources.from_gradients


class _Sources:
    """What an expression is computed from: a random call, the gradients' values."""

    def __init__(self, values: Values) -> None:
        self.values = values
        self.random = False
        self.from_gradients = False
        self.seen: Set[str] = set()

    def visit(self, node: cst.CSTNode, depth: int) -> None:
        if self.from_gradients or depth > _MAX_DEPTH:
            return
        if isinstance(node, cst.Attribute):
            if node.attr.value in _SHAPE_ATTRIBUTES:
                return
            if node.attr.value == "grad":
                self.from_gradients = True
                return
        if isinstance(node, cst.Call):
            self._call(node, depth)
            return
        if isinstance(node, cst.Subscript):
            self.visit(node.value, depth)  # `noises[i]`: what the container holds
            return
        if isinstance(node, (cst.ListComp, cst.SetComp, cst.GeneratorExp)):
            self.visit(node.elt, depth)  # the elements, not the filters (`if p.grad is not None`)
            return
        if isinstance(node, cst.DictComp):
            self.visit(node.value, depth)
            return
        if isinstance(node, cst.IfExp):
            self.visit(node.body, depth)
            self.visit(node.orelse, depth)
            return
        if isinstance(node, (cst.Comparison, cst.BooleanOperation, cst.Lambda)):
            return  # a truth value, or code not run here
        if isinstance(node, cst.Name):
            if node.value not in self.seen:
                self.seen.add(node.value)
                for value in self.values(node.value):
                    self.visit(value, depth + 1)
            return
        for child in children(node):
            self.visit(child, depth)

    def _call(self, call: cst.Call, depth: int) -> None:
        name = dotted_name(call.func) or ""
        last = name.rsplit(".", 1)[-1]
        func = call.func
        if isinstance(func, cst.Attribute) and func.attr.value in _SHAPE_METHODS:
            for arg in call.args:
                self.visit(arg.value, depth)
            return
        if "grad" in last.lower():
            self.from_gradients = True  # `clip_grad_norm_(...)`, `grad_norm(model)`: computed from gradients
            return
        if last in _RANDOM:
            self.random = True
        position = 0
        for arg in call.args:
            if arg.keyword is not None:
                if arg.keyword.value not in _SHAPE_KEYWORDS:
                    self.visit(arg.value, depth)
                continue
            position += 1
            if last in _SIZES_ONLY or (last.endswith("_like") and position == 1) or (last == "normal" and position > 2):
                continue  # sizes, the tensor a `*_like` copies the shape of, `torch.normal(mean, std, size)`
            self.visit(arg.value, depth)
        if isinstance(func, cst.Attribute):
            self.visit(func.value, depth)  # `torch.empty_like(g).normal_(0, s)`, `noise.mul(s)`
