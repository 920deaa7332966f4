"""What a call is to autocast: the PyTorch op a call or `@` is, when amplint knows it (`TorchOps`),
named as autocast's policy tables in `amplint.semantic.pytorch.autocast_ops` name it.

`torch.matmul(a, b)`, `F.softmax(x, -1)` (a function, by its qualified name), `x.mm(y)`,
`x.log()` (a tensor method, not a function of a module: `np.log(x)` is none), `a @ b` (an
operator), `self.fc(x)` for `self.fc = nn.Linear(...)` and `nn.BCELoss()(p, y)` (a module,
when every value the variable is given is that `torch.nn` module). An einsum is named
by what its equation does, which autocast's lists tell apart: "einsum" when it contracts an
index (a `bmm`), "einsum_elementwise" when it contracts none (an outer or elementwise product),
"einsum_unread" when the equation cannot be read.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, Optional, Tuple, Union

import libcst as cst

from amplint.semantic import CodeUnit, Scope, SemanticModel, dotted_name
from amplint.semantic.pytorch.autocast_ops import ALL_OPERANDS, FUNCTIONS, METHODS, MODULES, OPERANDS, einsum_contracts

# Names conventionally bound to modules (`import torch.nn.functional as F`).
_MODULE_NAMES = frozenset({"F", "nn", "np", "torch", "functional", "math", "jnp", "tf", "scipy", "special"})


@dataclass(frozen=True, eq=False)
class TorchOp:
    """One call (or `@`) that is a PyTorch op amplint knows, as written."""

    node: Union[cst.Call, cst.BinaryOperation]
    name: str  # the op: "matmul", "linear", "log", "sigmoid", "binary_cross_entropy", ...
    form: str  # "function" (`torch.log(x)`), "method" (`x.log()`), "module" (`self.fc(x)`), "operator" (`a @ b`)
    inputs: Tuple[cst.BaseExpression, ...]  # tensor inputs in signature order, the receiver first for methods

    @property
    def operands(self) -> Tuple[cst.BaseExpression, ...]:
        """A product's operands (`a`, `b` of `torch.baddbmm(bias, a, b)`); for a module
        call only what is passed (its weight is the module's)."""
        if self.name in ALL_OPERANDS or self.form == "module":
            return self.inputs
        positions = OPERANDS.get(self.name, ())
        return tuple(self.inputs[i] for i in positions if i < len(self.inputs))

    def keyword(self, name: str) -> Optional[cst.BaseExpression]:
        if isinstance(self.node, cst.Call):
            for arg in self.node.args:
                if arg.keyword is not None and arg.keyword.value == name:
                    return arg.value
        return None


class TorchOps:
    """The PyTorch op each call or `@` of a file is, named once."""

    def __init__(self, model: SemanticModel) -> None:
        self.model = model
        self._named: Dict[int, Optional[TorchOp]] = {}

    def torch_op(self, node: cst.CSTNode, unit: CodeUnit) -> Optional[TorchOp]:
        """The PyTorch op a call or `@` is, when amplint knows it."""
        key = id(node)
        if key not in self._named:
            self._named[key] = self._torch_op(node, unit)
        return self._named[key]

    def _torch_op(self, node: cst.CSTNode, unit: CodeUnit) -> Optional[TorchOp]:
        if isinstance(node, cst.BinaryOperation):
            if isinstance(node.operator, cst.MatrixMultiply):
                return TorchOp(node, "matmul", "operator", (node.left, node.right))
            return None
        if not isinstance(node, cst.Call):
            return None
        func = node.func
        positional = [arg.value for arg in node.args if arg.keyword is None and not arg.star]
        if any(arg.star for arg in node.args):
            return None
        qualified = self.model.qualified(func)
        if qualified is not None:
            name = FUNCTIONS.get(qualified)
            if name is None:
                return None
            if name == "einsum":
                # CPU runs it as a `bmm` only when the equation contracts an index (an outer or
                # elementwise product is a `mul`); CUDA casts its inputs down whatever it is.
                contracts = self._contracts(positional[0], unit.scope) if positional else None
                name = {True: "einsum", False: "einsum_elementwise", None: "einsum_unread"}[contracts]
            if name in ALL_OPERANDS:
                operands = positional[1:] if name.startswith("einsum") else positional
                if len(operands) == 1 and isinstance(operands[0], (cst.List, cst.Tuple)):
                    operands = [element.value for element in operands[0].elements]
                return TorchOp(node, name, "function", tuple(operands))
            return TorchOp(node, name, "function", tuple(positional) + _input_keywords(node))
        if isinstance(func, cst.Attribute) and not self._names_a_module(func.value, unit):
            method = METHODS.get(func.attr.value)
            if method is not None and len(positional) in method[1]:
                return TorchOp(node, method[0], "method", (func.value, *positional))
        if isinstance(func, cst.Call):
            # `nn.BCELoss()(p, y)`
            built = MODULES.get(self.model.qualified(func.func) or "")
            return TorchOp(node, built, "module", tuple(positional)) if built is not None else None
        name = dotted_name(func)
        if name is not None:
            module = self._module(name, unit)
            if module is not None:
                return TorchOp(node, module, "module", tuple(positional))
        return None

    def _contracts(self, equation: cst.BaseExpression, scope: Scope, depth: int = 0) -> Optional[bool]:
        """Whether an einsum's equation, as written (`"bid,bjd->bij"`, implicitly concatenated,
        an f-string without fields) or as every value a name is given (`EQ = "bid,bjd->bij"`),
        contracts an index (`einsum_contracts`); None when it cannot be read."""
        if isinstance(equation, (cst.SimpleString, cst.ConcatenatedString)):
            text = equation.evaluated_value
            return einsum_contracts(text) if isinstance(text, str) else None
        if isinstance(equation, cst.FormattedString) and all(isinstance(part, cst.FormattedStringText) for part in equation.parts):
            return einsum_contracts("".join(part.value for part in equation.parts))  # type: ignore[union-attr]
        if isinstance(equation, cst.Name) and depth < 4:
            values = self.model.resolver.values(equation.value, scope)
            found = {self._contracts(value, where, depth + 1) if value is not None else None for value, where in values}
            return found.pop() if len(found) == 1 else None
        return None

    def _names_a_module(self, receiver: cst.BaseExpression, unit: CodeUnit) -> bool:
        """`F.softmax(x, -1)`, `np.log(x)`: a function of a module (imported, or named like
        one where the import is out of sight), not a tensor method."""
        name = dotted_name(receiver)
        if name is None:
            return False
        if name.split(".")[0] in _MODULE_NAMES:
            return True
        return any(binding.kind == "import" for binding in self.model.resolver.bindings(name.split(".")[0], unit.scope))

    def _module(self, name: str, unit: CodeUnit) -> Optional[str]:
        """The op a module variable stands for, when every value it is given is that
        `torch.nn` module (`self.fc = nn.Linear(...)`)."""
        kinds = set()
        values = self.model.values(unit, name)
        if not values:
            return None
        for value, _ in values:
            if not isinstance(value, cst.Call):
                return None
            kinds.add(MODULES.get(self.model.qualified(value.func) or ""))
        return kinds.pop() if len(kinds) == 1 else None


def _input_keywords(call: cst.Call) -> Tuple[cst.BaseExpression, ...]:
    """Tensor inputs passed by keyword (`torch.matmul(input=a, other=b)`), in signature order."""
    keywords = {arg.keyword.value: arg.value for arg in call.args if arg.keyword is not None}
    return tuple(keywords[k] for k in ("input", "other", "mat1", "mat2", "batch1", "batch2", "weight") if k in keywords)
