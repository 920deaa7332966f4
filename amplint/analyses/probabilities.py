"""Probabilities that saturate in low precision (`Probabilities.probability`): a log's argument
that a sigmoid, `1 - sigmoid`, or a softmax computed in its input's low precision, with the
epsilon guards around it (`p + eps`, `p.clamp(min=eps)`, `p.clamp(max=1 - eps)`), and whether
the dtype rounds it (or the guards) to exactly 0 or 1.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import FrozenSet, List, Optional, Tuple

import libcst as cst

from amplint.analyses.float32_casts import ARITHMETIC, Float32Casts
from amplint.analyses.straight_line import StraightLineValues
from amplint.analyses.torch_ops import TorchOp, TorchOps
from amplint.semantic import CodeUnit, SemanticModel, dotted_name
from amplint.semantic.pytorch.api import SAME_DTYPE_ATTRIBUTES
from amplint.semantic.pytorch.autocast_ops import FLOAT32, FORMATS, autocast_policy, rounds_to_one, rounds_to_zero

__all__ = ["Guard", "Probabilities", "Probability", "rounds_to_one", "rounds_to_zero"]


@dataclass(frozen=True)
class Guard:
    """An epsilon around a probability: `p + eps`, `p.clamp(min=eps)`, `p.clamp(max=1 - eps)`.
    `value` is None when it is not a constant amplint can read (then it is trusted)."""

    node: cst.BaseExpression
    value: Optional[float]


@dataclass(frozen=True)
class Probability:
    """A log's argument that is a probability computed by a saturating op.

    `kind` is "sigmoid" (`sigmoid(x)`), "complement" (`1 - sigmoid(x)`, or `-sigmoid(x)`
    under `log1p`) or "softmax"; `source` the sigmoid/softmax call; `floors` the epsilons
    added or clamped onto the log's argument; `ceilings` the upper clamps of the sigmoid
    before `1 - p` is taken (`sigmoid(x).clamp(eps, 1 - eps)`)."""

    kind: str
    source: cst.Call
    logits: cst.BaseExpression  # the sigmoid's or softmax's input
    floors: Tuple[Guard, ...] = ()
    ceilings: Tuple[Guard, ...] = ()
    # The devices on which autocast makes the logits float32 (`(u * v).sum(-1)` on CUDA,
    # where `sum` autocasts to float32): there the probability saturates only where float32's does.
    float32_on: FrozenSet[str] = frozenset()

    def reaches_zero(self, dtype: str) -> bool:
        """Whether, with low-precision inputs in `dtype`, the log's argument rounds to
        exactly 0 at ordinary logits, the guards notwithstanding: a float16 sigmoid is 0 for
        x < -17.3 (a softmax likewise, 17 below its row's maximum), `1 - sigmoid(x)` is 0 for
        x > 8.3 in float16 and x > 6.2 in bfloat16. bfloat16 keeps float32's range, so its
        sigmoid and softmax do not reach 0 there. A guard helps when it is not itself
        rounded away: `1e-8` is 0 in float16, `1 - 1e-7` is 1.0 in both."""
        if self.kind in ("sigmoid", "softmax"):
            if dtype != "float16":
                return False
        elif dtype not in FORMATS:
            return False
        if any(guard.value is None or not rounds_to_one(guard.value, dtype) for guard in self.ceilings):
            return False
        if any(guard.value is None or not rounds_to_zero(guard.value, dtype) for guard in self.floors):
            return False
        return True

    def rounded_away(self, dtype: str) -> List[Guard]:
        """The guards that `dtype` rounds away (an epsilon that is 0, a `1 - eps` that is 1)."""
        return [g for g in self.floors if g.value is not None and rounds_to_zero(g.value, dtype)] + [
            g for g in self.ceilings if g.value is not None and rounds_to_one(g.value, dtype)
        ]


_MAX_DEPTH = 4
# Tensor methods whose result's elements are some of the receiver's, unchanged.
_SELECTIONS = frozenset(
    {
        "view", "reshape", "flatten", "squeeze", "unsqueeze", "transpose", "permute", "contiguous",
        "gather", "index_select", "masked_select", "take", "take_along_dim", "expand", "expand_as",
        "t", "clone", "detach", "narrow", "select",
    }
)


class Probabilities:
    """What a log's argument is, read with the ops of `ops`, the float32 casts of `casts` and
    the straight-line values of `values`."""

    def __init__(self, model: SemanticModel, ops: TorchOps, casts: Float32Casts, values: StraightLineValues) -> None:
        self.model = model
        self.ops = ops
        self.casts = casts
        self.values = values

    def probability(self, expression: cst.BaseExpression, unit: CodeUnit, op: str = "log") -> Optional[Probability]:
        """What a log's argument is, when it is a probability a saturating op computed:
        `sigmoid(x)`, `1 - sigmoid(x)`, `softmax(x)` (or, for `log1p`, `-sigmoid(x)`), with
        the epsilon guards around it; None for anything else. A sigmoid or softmax of an
        explicit float32 cast (or `softmax(..., dtype=torch.float32)`) runs in float32 and
        is not one."""
        core, floors, _ = self._peel(expression, unit)
        complement: Optional[cst.BaseExpression] = None
        if op == "log1p":
            # log1p(-p) is log(1 - p).
            if not (isinstance(core, cst.UnaryOperation) and isinstance(core.operator, cst.Minus)):
                return None
            complement = core.expression
        elif isinstance(core, cst.BinaryOperation) and isinstance(core.operator, cst.Subtract) and _is_one(core.left):
            complement = core.right
        if complement is not None:
            inner, _, ceilings = self._peel(complement, unit)
            found = self._saturating(inner, unit, "sigmoid")
            if found is None:
                return None
            logits = found.inputs[0]
            float32_on = self.float32_devices(logits, unit)
            return Probability("complement", found.node, logits, tuple(floors), tuple(ceilings), float32_on)  # type: ignore[arg-type]
        for kind in ("sigmoid", "softmax"):
            found = self._saturating(core, unit, kind)
            if found is not None:
                logits = found.inputs[0]
                float32_on = self.float32_devices(logits, unit)
                return Probability(kind, found.node, logits, tuple(floors), (), float32_on)  # type: ignore[arg-type]
        return None

    def float32_devices(self, expression: cst.BaseExpression, unit: CodeUnit, depth: int = 0) -> FrozenSet[str]:
        """The devices on which an expression is float32 under autocast, as far as the code
        shows: an op autocast runs in float32 there (`sum`, `layer_norm`, `exp` on CUDA),
        or arithmetic with such an operand (float32 with float16 is float32); empty when
        nothing shows it (the output of a model or a Linear is taken to be low precision)."""
        if depth > _MAX_DEPTH:
            return frozenset()
        node = self._resolved(expression, unit)
        if isinstance(node, cst.Call):
            op = self.ops.torch_op(node, unit)
            if op is not None:
                return frozenset(d for d in ("cuda", "cpu") if autocast_policy(op.name, d) == FLOAT32)
            selected = _selection_of(node)
            return self.float32_devices(selected, unit, depth + 1) if selected is not None else frozenset()
        if isinstance(node, cst.BinaryOperation) and isinstance(node.operator, ARITHMETIC):
            return self.float32_devices(node.left, unit, depth + 1) | self.float32_devices(node.right, unit, depth + 1)
        if isinstance(node, cst.UnaryOperation):
            return self.float32_devices(node.expression, unit, depth + 1)
        selected = _selection_of(node)
        return self.float32_devices(selected, unit, depth + 1) if selected is not None else frozenset()

    def _resolved(self, expression: cst.BaseExpression, unit: CodeUnit) -> cst.BaseExpression:
        for _ in range(_MAX_DEPTH):
            if not isinstance(expression, cst.Name):
                break
            value = self.values.value_at(expression, unit)
            if value is None:
                break
            expression = value
        return expression

    def _peel(self, expression: cst.BaseExpression, unit: CodeUnit) -> Tuple[cst.BaseExpression, List[Guard], List[Guard]]:
        """An expression through names and epsilon guards: (what is guarded, its lower
        bounds (`+ eps`, `clamp(min=eps)`), its upper bounds (`clamp(max=1 - eps)`))."""
        floors: List[Guard] = []
        ceilings: List[Guard] = []
        node = expression
        for _ in range(_MAX_DEPTH * 2):
            node = self._resolved(node, unit)
            if isinstance(node, cst.BinaryOperation) and isinstance(node.operator, cst.Add):
                guarded = None
                for value, other in ((node.right, node.left), (node.left, node.right)):
                    if _numeric_like(value):
                        floors.append(Guard(value, self.constant(value, unit)))
                        guarded = other
                        break
                if guarded is None:
                    break
                node = guarded
                continue
            selected = _selection_of(node)
            if selected is not None:
                node = selected  # `p[:, 0]`, `p.gather(1, t)`, `p.view(-1)`: the same values
                continue
            clamp = self._clamp(node, unit)
            if clamp is None:
                break
            node, low, high = clamp
            if low is not None:
                floors.append(low)
            if high is not None:
                ceilings.append(high)
        return node, floors, ceilings

    def _saturating(self, node: cst.BaseExpression, unit: CodeUnit, kind: str) -> Optional[TorchOp]:
        """The `kind` call (sigmoid or softmax) `node` is, when it runs in its input's low
        precision: not on an explicit float32 cast, not `softmax(..., dtype=torch.float32)`."""
        if not isinstance(node, cst.Call):
            return None
        op = self.ops.torch_op(node, unit)
        if op is None or op.name != kind or not op.inputs:
            return None
        if self.casts.float32_cast(op.inputs[0], unit) is not None:
            return None  # computed in float32: saturates only where float32 does
        if kind == "softmax":
            dtype = op.keyword("dtype") or (op.inputs[2] if op.form == "function" and len(op.inputs) > 2 else None)
            if dtype is not None:
                dtypes = self.model.resolver.dtypes(dtype, unit.scope)
                if not dtypes or not dtypes <= {"float16", "bfloat16"}:
                    return None  # `softmax(x, dtype=torch.float32)` (or a dtype amplint cannot read)
        return op

    def _clamp(
        self, node: cst.BaseExpression, unit: CodeUnit
    ) -> Optional[Tuple[cst.BaseExpression, Optional[Guard], Optional[Guard]]]:
        """(what is clamped, lower bound, upper bound) of a clamp call."""
        if not isinstance(node, cst.Call):
            return None
        op = self.ops.torch_op(node, unit)
        if op is None or op.name not in ("clamp", "clamp_min") or not op.inputs:
            return None
        low = op.keyword("min")
        high = op.keyword("max")
        rest = [v for v in op.inputs[1:] if v is not low and v is not high]
        if low is None and rest:
            low = rest.pop(0)
        if op.name == "clamp" and high is None and rest:
            high = rest.pop(0)
        low_guard = Guard(low, self.constant(low, unit)) if low is not None and not _is_none(low) else None
        high_guard = Guard(high, self.constant(high, unit)) if high is not None and not _is_none(high) else None
        return op.inputs[0], low_guard, high_guard

    def constant(self, expression: cst.BaseExpression, unit: CodeUnit, depth: int = 0) -> Optional[float]:
        """The number an expression is: a literal, arithmetic on literals, a name given one
        constant value (`EPS = 1e-8`); None otherwise."""
        if depth > _MAX_DEPTH:
            return None
        if isinstance(expression, (cst.Float, cst.Integer)):
            try:
                return float(expression.evaluated_value)
            except (ValueError, OverflowError):
                return None
        if isinstance(expression, cst.UnaryOperation) and isinstance(expression.operator, cst.Minus):
            inner = self.constant(expression.expression, unit, depth + 1)
            return -inner if inner is not None else None
        if isinstance(expression, cst.BinaryOperation):
            left = self.constant(expression.left, unit, depth + 1)
            right = self.constant(expression.right, unit, depth + 1)
            if left is None or right is None:
                return None
            try:
                if isinstance(expression.operator, cst.Add):
                    return left + right
                if isinstance(expression.operator, cst.Subtract):
                    return left - right
                if isinstance(expression.operator, cst.Multiply):
                    return left * right
                if isinstance(expression.operator, cst.Divide):
                    return left / right
                if isinstance(expression.operator, cst.Power):
                    return float(left**right)
            except (ZeroDivisionError, OverflowError):
                return None
            return None
        name = dotted_name(expression)
        if name is not None and "." not in name:
            bound = self.model.resolver.constant(name, unit.scope)
            if bound is not None and bound[0] is not expression:
                return self.constant(bound[0], unit, depth + 1)
        return None


def _selection_of(node: cst.BaseExpression) -> Optional[cst.BaseExpression]:
    """What a selection or view of values reads (`p[:, 0]`, `p.gather(1, t)`, `p.view(-1)`,
    `p.T`): its elements are elements of that, unchanged."""
    if isinstance(node, cst.Subscript):
        return node.value
    if isinstance(node, cst.Attribute) and node.attr.value in SAME_DTYPE_ATTRIBUTES:
        return node.value
    if isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute) and node.func.attr.value in _SELECTIONS:
        return node.func.value
    return None


def _is_one(node: cst.BaseExpression) -> bool:
    if isinstance(node, (cst.Integer, cst.Float)):
        try:
            return float(node.evaluated_value) == 1.0
        except ValueError:
            return False
    return False


def _is_none(node: cst.BaseExpression) -> bool:
    return isinstance(node, cst.Name) and node.value == "None"


def _numeric_like(node: cst.BaseExpression) -> bool:
    """A constant or a name that reads like an epsilon (`1e-8`, `eps`, `self.eps`, `EPSILON`)."""
    if isinstance(node, (cst.Float, cst.Integer)):
        return True
    if isinstance(node, cst.UnaryOperation):
        return _numeric_like(node.expression)
    name = dotted_name(node)
    return name is not None and "eps" in name.rsplit(".", 1)[-1].lower()
