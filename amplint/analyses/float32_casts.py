"""Explicit float32 casts as the code shows them (`Float32Casts`): whether an expression is
`x.float()`, `x.to(torch.float32)`, `x.type(torch.float32)` (a dtype that is float32 whatever
the caller does), `x.type_as(f)` or `x.to(f)` of an evidently float32 `f`, seen through views
(`.transpose()`, `[...]`, `.T`), scalar arithmetic and names assigned it on the straight-line
way there (`straight_line`); and whether a tensor is evidently float32 (such a cast, a tensor
built with `dtype=torch.float32`, a variable or buffer every value of which is one). A
parameter, a module's output, anything unknown is not.
"""

from __future__ import annotations

from typing import FrozenSet, List, Optional, Tuple

import libcst as cst

from amplint.analyses.straight_line import StraightLineValues
from amplint.semantic import CodeUnit, Scope, SemanticModel, dotted_name
from amplint.semantic.pytorch.api import DTYPES, SAME_DTYPE_ATTRIBUTES, SAME_DTYPE_METHODS
from amplint.semantic.pytorch.autocast_ops import CREATION_FUNCTIONS

_MAX_DEPTH = 4
# How far a float32 cast is followed: through names, views, arithmetic and a buffer's value
# (`t = t.type_as(self.inv_freq)`, `t = t / scale`, then `inv_freq = 1.0 / (base ** (...).float())`).
_CAST_DEPTH = 12
_TENSOR_TYPES = {"FloatTensor": "float32", "DoubleTensor": "float64", "HalfTensor": "float16", "BFloat16Tensor": "bfloat16"}
# Arithmetic that keeps float32 with a float16, bfloat16 or float32 operand, or a Python number.
ARITHMETIC = (cst.Add, cst.Subtract, cst.Multiply, cst.Divide, cst.Power)


class Float32Casts:
    """The file's explicit float32 casts, read with the straight-line values of `values`."""

    def __init__(self, model: SemanticModel, values: StraightLineValues) -> None:
        self.model = model
        self.values = values

    def float32_cast(self, expression: cst.BaseExpression, unit: CodeUnit, depth: int = 0) -> Optional[cst.Call]:
        """The explicit float32 cast an expression is (`x.float()`, `x.to(torch.float32)`,
        `x.type(torch.float32)`), seen through views (`.transpose()`, `[...]`, `.T`), scalar
        arithmetic and names assigned it on the straight-line way here; None otherwise."""
        if depth > _CAST_DEPTH:
            return None
        node = expression
        if isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute) and self.model.qualified(node.func) is None:
            method = node.func.attr.value
            if method == "float":
                return node
            if method == "type_as" and len(node.args) == 1:
                # `x.type_as(f)`: the dtype of another tensor, a cast to float32 when that
                # tensor evidently is float32.
                return node if self.evidently_float32(node.args[0].value, unit, depth + 1) else None
            if method in ("to", "type"):
                dtypes = self._cast_dtypes(node, unit)
                if dtypes == frozenset({"float32"}):
                    return node if self._fixed_float32(node, unit) else None
                if dtypes:
                    return None
                other = self._tensor_argument(node) if method == "to" else None
                if other is not None and self.evidently_float32(other, unit, depth + 1):
                    return node  # `x.to(f)` for a float32 `f`
                if method == "to" and node.args and all(self.device_like(arg, unit) for arg in node.args):
                    return self.float32_cast(node.func.value, unit, depth + 1)  # `.to(device)`
                return None
            if method in SAME_DTYPE_METHODS:
                return self.float32_cast(node.func.value, unit, depth + 1)
            return None
        if isinstance(node, cst.Subscript):
            return self.float32_cast(node.value, unit, depth + 1)
        if isinstance(node, cst.Attribute) and node.attr.value in SAME_DTYPE_ATTRIBUTES:
            return self.float32_cast(node.value, unit, depth + 1)
        if isinstance(node, cst.UnaryOperation) and isinstance(node.operator, (cst.Minus, cst.Plus)):
            return self.float32_cast(node.expression, unit, depth + 1)
        if isinstance(node, cst.BinaryOperation) and isinstance(node.operator, ARITHMETIC):
            # float32 with float16, bfloat16, float32 or a Python number is float32.
            left = self.float32_cast(node.left, unit, depth + 1)
            right = self.float32_cast(node.right, unit, depth + 1)
            if (left or right) and not (self.is_float64(node.left, unit) or self.is_float64(node.right, unit)):
                return left or right
            return None
        if isinstance(node, cst.Name):
            value = self.values.value_at(node, unit)
            return self.float32_cast(value, unit, depth + 1) if value is not None else None
        return None

    def evidently_float32(self, expression: cst.BaseExpression, unit: CodeUnit, depth: int = 0) -> bool:
        """Whether a tensor is float32 by what the code shows: an explicit float32 cast, a
        tensor built with `dtype=torch.float32` (`torch.zeros(n, dtype=torch.float32)`), or a
        variable or buffer every value of which is one (`self.register_buffer("scale",
        torch.ones(d, dtype=torch.float32))`). A parameter, a module's output, anything
        unknown is not."""
        if depth > _CAST_DEPTH:
            return False
        if self.float32_cast(expression, unit, depth) is not None:
            return True
        if isinstance(expression, cst.Call):
            if (self.model.qualified(expression.func) or "") in CREATION_FUNCTIONS:
                dtype = next((a.value for a in expression.args if a.keyword is not None and a.keyword.value == "dtype"), None)
                return dtype is not None and self.model.resolver.dtypes(dtype, unit.scope) == frozenset({"float32"})
            return False
        name = dotted_name(expression)
        if name is None or name.count(".") > 1 or (isinstance(expression, cst.Name) and self.values.value_at(expression, unit) is not None):
            return False  # a straight-line value was already followed by float32_cast
        values = self.values_of(name, unit)
        return bool(values) and all(value is not expression and self.evidently_float32(value, home, depth + 1) for value, home in values)

    def values_of(self, name: str, unit: CodeUnit) -> List[Tuple[cst.BaseExpression, CodeUnit]]:
        """Every value a variable or attribute (`self.avg`, a buffer `self.register_buffer(
        "avg", value)` gives) is given, each with the unit it is written in; empty when one
        of them is not known (a parameter, an unpacking)."""
        values = list(self.model.values(unit, name))
        if name.startswith("self."):
            values += self._buffers(name[len("self."):], unit)
        found = []
        for value, where in values:
            home = next((u for u in self.model.units if u.scope is where), None)
            if value is None or home is None:
                return []
            found.append((value, home))
        return found

    def _buffers(self, attribute: str, unit: CodeUnit) -> List[Tuple[Optional[cst.BaseExpression], Scope]]:
        """The values `self.register_buffer("attribute", value)` gives, in the methods of
        the unit's class."""
        found: List[Tuple[Optional[cst.BaseExpression], Scope]] = []
        if unit.class_name is None:
            return found
        for other in self.model.units:
            if other.class_name != unit.class_name:
                continue
            for record in other.calls:
                call = record.node
                if dotted_name(call.func) != "self.register_buffer" or len(call.args) < 2:
                    continue
                key = call.args[0].value
                if isinstance(key, cst.SimpleString) and key.evaluated_value == attribute:
                    found.append((call.args[1].value, other.scope))
        return found

    @staticmethod
    def _tensor_argument(call: cst.Call) -> Optional[cst.BaseExpression]:
        """`x.to(other)`'s one positional argument, when it is not a dtype, a device or a string."""
        if len(call.args) != 1 or call.args[0].keyword is not None or call.args[0].star:
            return None
        value = call.args[0].value
        if not isinstance(value, (cst.Name, cst.Attribute, cst.Call)):
            return None
        name = dotted_name(value) or ""
        if name.startswith("torch.") or name.rsplit(".", 1)[-1].lower().endswith(("device", "dtype")):
            return None
        return value

    def _cast_dtypes(self, call: cst.Call, unit: CodeUnit) -> FrozenSet[str]:
        found: FrozenSet[str] = frozenset()
        for arg in call.args:
            if arg.keyword is not None and arg.keyword.value != "dtype":
                continue
            dtypes = self.model.resolver.dtypes(arg.value, unit.scope)
            qualified = self.model.qualified(arg.value) or ""
            tensor_type = _TENSOR_TYPES.get(qualified.rsplit(".", 1)[-1]) if qualified.startswith("torch.") else None
            if tensor_type is not None:
                dtypes = frozenset({tensor_type})  # `.type(torch.cuda.FloatTensor)`
            elif qualified in ("torch.float64", "torch.double"):
                dtypes = frozenset({"float64"})
            found |= dtypes
        return found

    def _fixed_float32(self, call: cst.Call, unit: CodeUnit) -> bool:
        """Whether each dtype a cast names is float32 whatever the caller does: written out
        (through an alias), or a variable every assignment of which is. Not a parameter (its
        default is only one of the values a caller may pass), nor a choice with an unknown
        side (`torch.float32 if on_cpu else x.dtype`)."""
        for arg in call.args:
            if arg.keyword is not None and arg.keyword.value != "dtype":
                continue
            if self.model.resolver.dtypes(arg.value, unit.scope) and not self._fixed(arg.value, unit.scope, 0):
                return False
        return True

    def _fixed(self, value: Optional[cst.BaseExpression], scope: Scope, depth: int) -> bool:
        if value is None or depth > _MAX_DEPTH:
            return False
        if isinstance(value, cst.IfExp):
            return self._fixed(value.body, scope, depth + 1) and self._fixed(value.orelse, scope, depth + 1)
        if self.model.resolver.dtypes(value, scope) != frozenset({"float32"}):
            return False
        if DTYPES.get(self.model.qualified(value) or "") == "float32":
            return True
        name = dotted_name(value)
        bindings = self.model.resolver.bindings(name, scope) if name is not None else []
        return bool(bindings) and all(
            binding.kind == "assign" and self._fixed(binding.value, binding.value_scope, depth + 1) for binding in bindings
        )

    def device_like(self, arg: cst.Arg, unit: CodeUnit) -> bool:
        """`.to(device)`, `.to(x.device)`, `.to("cuda")`, `non_blocking=True`: no dtype change."""
        if arg.keyword is not None:
            return arg.keyword.value in ("device", "non_blocking", "copy", "memory_format")
        if self.model.resolver.devices(arg.value, unit.scope):
            return True
        name = dotted_name(arg.value)
        return name is not None and name.rsplit(".", 1)[-1].lower().endswith("device")

    def is_float64(self, expression: cst.BaseExpression, unit: CodeUnit) -> bool:
        if isinstance(expression, cst.Call) and isinstance(expression.func, cst.Attribute):
            if expression.func.attr.value == "double":
                return True
            if expression.func.attr.value in ("to", "type"):
                return "float64" in self._cast_dtypes(expression, unit)
        return False
