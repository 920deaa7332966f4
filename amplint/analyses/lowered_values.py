"""Which expressions hold a value autocast lowered (a fact family: `LoweredValues`), for a
function and an assumed autocast context: a device ("cuda" or "cpu") and a low-precision dtype
("float16" or "bfloat16").

A value is lowered where autocast ran the op that made it in the context's dtype: the ops on
the device's lower-precision list (`amplint.semantic.pytorch.autocast_ops`: `@`, `matmul`,
`bmm`, `baddbmm`, `addmm`, `einsum` (every one on CUDA, a contracting one on CPU), `linear`,
`conv*`, `F.scaled_dot_product_attention`, and the sub-modules a class builds as `nn.Linear`
or `nn.Conv*`: `self.q_proj(x)`), and the file's own functions and modules whose every return
is lowered (`self.attend(q, k)`). It stays lowered through what runs in its input's dtype:
arithmetic with Python numbers or with other lowered values, views and selections (`view`,
`transpose`, `[...]`, `.T`, `chunk`, `split`), `masked_fill`, in-place methods, `torch.where`
of lowered values and numbers, `torch.cat` of lowered values, the ops on neither device's
lists (`sigmoid`, `clamp`, `mean`, `sqrt`, `gelu`, `dropout`, ...) and straight-line
assignments (`q, k, v = self.qkv(x).chunk(3, -1)`, `scores *= self.scale`).

An island ends it: `.float()`, `.double()`, `.to(...)`/`.type(...)` of a dtype, an op given
an explicit `dtype=`, an op on the device's float32 list (`softmax`, `log_softmax`,
`layer_norm`, `exp`, `log`, `pow` and `**`, `sum`, `norm`, `rsqrt`, a number divided by a
tensor ... on CUDA; on CPU the losses, `cdist`, `prod`), arithmetic with a tensor whose dtype is
unknown (a float32 mask promotes the sum to float32), and code where autocast is switched
off (`torch.autocast(..., enabled=False)`, `custom_fwd(cast_inputs=...)`), where ops run in
their inputs' dtype: only what is already lowered stays so.

Unknown stays unknown: a parameter, an attribute, the output of a module or function whose
code is out of sight, anything computed under a context manager amplint does not know (it may
switch autocast off) or in a function decorated by anything but the plain decorators, is not
lowered. Nothing is guessed.

Where the function's code runs is the caller's to say. `ambient=True`: it runs under the
context (a function a region of the file, or of another file, calls under autocast), except
inside its own autocast regions, which run as they say. `ambient=False`: it runs outside
autocast, and only its own regions that may run in the context lower anything.

    model.facts(LoweredValues).lowered(expression, unit, "cuda", "float16") -> Lowered | None
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, FrozenSet, List, Optional, Tuple, Union

import libcst as cst

from amplint.analyses.region_ops import RegionOps
from amplint.semantic import (
    Analysis,
    AutocastRegion,
    CallRecord,
    CodeUnit,
    ProductRecord,
    SemanticModel,
    WithFrame,
    dotted_name,
    iter_tree,
    own_returns,
)
from amplint.semantic.pytorch.api import SAME_DTYPE_ATTRIBUTES, SAME_DTYPE_METHODS
from amplint.semantic.pytorch.autocast_ops import DEFAULT_DTYPES, FLOAT32, LOWER_PRECISION, PROMOTE, autocast_policy

# The contexts amplint knows autocast's lists for: (device, dtype).
CONTEXTS: Tuple[Tuple[str, str], ...] = (("cuda", "float16"), ("cuda", "bfloat16"), ("cpu", "float16"), ("cpu", "bfloat16"))
Context = Tuple[str, str, bool]  # device, dtype, ambient

# Methods whose result holds the receiver's elements (or is the receiver), in its dtype,
# whatever their arguments (but a dtype): views, selections, `masked_fill`, and the pieces of
# a split.
_VIEWS = (SAME_DTYPE_METHODS - {"mul", "div"}) | frozenset(
    {"chunk", "split", "unbind", "tensor_split", "cpu", "cuda", "gather", "index_select", "take_along_dim", "max", "min", "topk", "sort",
     "diagonal", "diag", "diag_embed", "masked_select", "nan_to_num", "abs"}
)
_ATTRIBUTES = SAME_DTYPE_ATTRIBUTES | frozenset({"values"})  # `.values` of `max(dim)`, `topk`, `sort`
# Tensor methods that compute with one other operand: lowered when both are.
_BINARY_METHODS = frozenset({"add", "sub", "mul", "div", "true_divide", "multiply", "subtract", "divide"})
_CASTS = frozenset({"float", "double", "half", "bfloat16", "int", "long", "bool", "short", "byte", "item", "tolist", "numpy", "type"})
_ARITHMETIC = (cst.Add, cst.Subtract, cst.Multiply, cst.Divide, cst.FloorDivide, cst.Modulo, cst.Power)
_NUMBER_CALLS = frozenset({"float", "int", "len", "round", "min", "max"})
_NUMBER_METHODS = frozenset({"size", "item", "numel", "dim", "__len__"})
_NUMBER_ATTRIBUTES = frozenset({"ndim"})
# Context managers that leave autocast as it is.
_TRANSPARENT = frozenset({"record_function", "sdpa_kernel", "sdp_kernel", "stream", "device", "catch_warnings", "nullcontext", "fork_rng", "profile"})
_BUDGET = 60  # steps of one question, through names, callees and operands
_CALLEE_COST = 15  # a callee's returns cost this much of the budget: at most a few levels deep


@dataclass(frozen=True)
class Lowered:
    """An expression that holds a value autocast lowered, and where that value was made."""

    source: cst.CSTNode  # the op autocast ran in low precision (`q @ k.transpose(-2, -1)`, `self.q_proj(x)`)
    unit: CodeUnit  # the unit whose code it is in


def region_contexts(region: AutocastRegion) -> FrozenSet[Tuple[str, str]]:
    """The (device, dtype) pairs a region may run in, of those amplint knows the lists of:
    its devices (CUDA and CPU when the code does not say) with its dtypes, each device with
    its own default where the region gives none (`torch.autocast("cuda")` is float16,
    `torch.autocast("cpu")` bfloat16). Empty when its dtype is unknown (the default of a
    device the code does not show)."""
    devices = [d for d in (region.possible_devices or ("cuda", "cpu")) if d in DEFAULT_DTYPES]
    if region.dtype_is_default and not region.framework and not region.hook:
        if not region.possible_devices:
            return frozenset()
        return frozenset((device, DEFAULT_DTYPES[device]) for device in devices)
    return frozenset((device, dtype) for device in devices for dtype in region.possible_dtypes if dtype in ("float16", "bfloat16"))


class LoweredValues(Analysis):
    """`lowered(expression, unit, device, dtype, ambient)`: whether an expression holds a value
    autocast lowered in that context (see the module's docstring)."""

    def __init__(self, model: SemanticModel) -> None:
        super().__init__(model)
        region_ops = model.facts(RegionOps)
        self.region_ops = region_ops
        self.ops = region_ops.torch_ops
        self.casts = region_ops.casts
        self.values = region_ops.values
        self.numbers = region_ops.probabilities  # `constant`: the number an expression is
        self._memo: Dict[Tuple[int, Context], Optional[Lowered]] = {}
        self._where: Dict[Tuple[int, int], Tuple[Optional[AutocastRegion], bool, bool]] = {}
        self._with_frames: Optional[Dict[int, tuple]] = None
        self._products: Optional[Dict[int, ProductRecord]] = None
        self._units: Optional[Dict[int, CodeUnit]] = None

    def lowered(self, expression: cst.BaseExpression, unit: CodeUnit, device: str, dtype: str, ambient: bool = True) -> Optional[Lowered]:
        """Where the value `expression` holds was lowered to `dtype` by autocast on `device`,
        when the code shows it was; None when it was not, or the code does not show it."""
        return self._lowered(expression, unit, (device, dtype, ambient), [_BUDGET])

    def autocast_on(self, node: cst.CSTNode, unit: CodeUnit, device: str, dtype: str, ambient: bool = True) -> Optional[bool]:
        """Whether autocast in the context is on where `node` runs in `unit`: True, False where
        it is off, None where that is unknown (a context manager amplint does not know, a
        region of another device or dtype, a function that may switch autocast itself)."""
        return self._state(node, unit, (device, dtype, ambient))

    def number(self, expression: cst.BaseExpression, unit: CodeUnit) -> bool:
        """Whether an expression is a Python number (it never changes a tensor's dtype): a
        literal, `math.*`, a shape or a size, `len(...)`, and names and attributes every value
        of which is one, a parameter with a numeric default or an `int`/`float` annotation."""
        return self._number(expression, unit, 0)

    def region_at(self, node: cst.CSTNode, unit: CodeUnit) -> Optional[AutocastRegion]:
        """The enabled autocast region of `unit` that `node` runs in, if any."""
        return self._position(node, unit)[0]

    # ---------------------------------------------------------------- where autocast is on
    def _state(self, node: cst.CSTNode, unit: CodeUnit, context: Context) -> Optional[bool]:
        device, dtype, ambient = context
        region, off, unknown = self._position(node, unit)
        if unknown:
            return None
        if off:
            return False
        if region is not None:
            return True if (device, dtype) in region_contexts(region) else None
        if not ambient:
            return False
        return None if self.region_ops.may_switch_autocast(unit) else True  # (a decorator may switch it)

    def _position(self, node: cst.CSTNode, unit: CodeUnit) -> Tuple[Optional[AutocastRegion], bool, bool]:
        """(the enabled region of the unit around `node`, autocast switched off there, inside a
        context manager that may switch it)."""
        key = (id(node), id(unit))
        if key not in self._where:
            frames = self._frames(node, unit)
            regions = self.model.regions
            context = regions.context_of(unit, frames)
            unknown = False
            for frame in reversed(frames):
                if not isinstance(frame, WithFrame) or regions.is_no_grad(frame.item):
                    continue
                if regions.region_of(frame, unit) is not None:
                    break  # the innermost autocast decides
                name = dotted_name(frame.item.func if isinstance(frame.item, cst.Call) else frame.item) or ""
                if name.rsplit(".", 1)[-1] not in _TRANSPARENT:
                    unknown = True
                    break
            self._where[key] = (context.region, context.autocast_off, unknown)
        return self._where[key]

    def _frames(self, node: cst.CSTNode, unit: CodeUnit) -> tuple:
        record: Optional[Union[CallRecord, ProductRecord]] = None
        if isinstance(node, cst.Call):
            record = self.model.call_record(node)
        elif isinstance(node, cst.BinaryOperation):
            if self._products is None:
                self._products = {id(p.node): p for u in self.model.units for p in u.products}
            record = self._products.get(id(node))
        if record is not None:
            return record.frames
        if self._with_frames is None:
            self._with_frames = {id(frame.statement): inner + (frame,) for _, frame, inner in self.model.index.withs}
        parents = self.values.parents(unit)
        current: cst.CSTNode = node
        while True:
            parent = parents.get(id(current))
            if parent is None or parent is unit.node:
                return ()
            if isinstance(parent, cst.With) and current is parent.body:
                return self._with_frames.get(id(parent), ())
            current = parent

    # ---------------------------------------------------------------- what is lowered
    def _lowered(self, node: cst.BaseExpression, unit: CodeUnit, context: Context, budget: List[int]) -> Optional[Lowered]:
        budget[0] -= 1
        if budget[0] < 0:
            return None
        key = (id(node), context)
        if key in self._memo:
            return self._memo[key]
        self._memo[key] = None  # a name read in its own binding's value
        found = self._compute(node, unit, context, budget)
        if found is None and budget[0] <= 0:
            del self._memo[key]  # cut short, not answered: another question may get further
        else:
            self._memo[key] = found
        return found

    def _compute(self, node: cst.BaseExpression, unit: CodeUnit, context: Context, budget: List[int]) -> Optional[Lowered]:
        if isinstance(node, cst.Name):
            return self._name(node, unit, context, budget)
        if isinstance(node, cst.Subscript):
            return self._lowered(node.value, unit, context, budget)
        if isinstance(node, cst.Attribute):
            return self._lowered(node.value, unit, context, budget) if node.attr.value in _ATTRIBUTES else None
        if isinstance(node, cst.UnaryOperation) and isinstance(node.operator, (cst.Minus, cst.Plus)):
            return self._lowered(node.expression, unit, context, budget)
        if isinstance(node, cst.BinaryOperation):
            if isinstance(node.operator, cst.MatrixMultiply):
                op = self.ops.torch_op(node, unit)
                return self._op(op, node, unit, context, budget) if op is not None else None
            if isinstance(node.operator, _ARITHMETIC):
                return self._arithmetic(node, node.left, node.right, node.operator, unit, context, budget)
            return None
        if isinstance(node, cst.IfExp):
            body = self._lowered(node.body, unit, context, budget)
            return body if body is not None and self._lowered(node.orelse, unit, context, budget) is not None else None
        if isinstance(node, cst.Call):
            return self._call(node, unit, context, budget)
        return None

    def _name(self, node: cst.Name, unit: CodeUnit, context: Context, budget: List[int]) -> Optional[Lowered]:
        """A variable: lowered when every assignment that may have given it its value here
        (one on the straight-line way, or the last of each branch of an `if` on it) is."""
        statements = self.values.bindings_at(node, unit)
        if not statements:
            return None
        found: Optional[Lowered] = None
        for statement in statements:
            lowered = self._assigned(statement, node, unit, context, budget)
            if lowered is None:
                return None
            found = found or lowered
        return found

    def _assigned(self, statement, node: cst.Name, unit: CodeUnit, context: Context, budget: List[int]) -> Optional[Lowered]:
        if isinstance(statement, cst.AugAssign):
            # `scores *= scale`: an in-place op keeps the tensor's dtype.
            return self._lowered(statement.target, unit, context, budget)
        if isinstance(statement, cst.AnnAssign):
            return self._lowered(statement.value, unit, context, budget) if statement.value is not None else None
        if not isinstance(statement, cst.Assign):
            return None
        for target in statement.targets:
            if isinstance(target.target, cst.Name) and target.target.value == node.value:
                return self._lowered(statement.value, unit, context, budget)
            if isinstance(target.target, (cst.Tuple, cst.List)):
                elements = target.target.elements
                for position, element in enumerate(elements):
                    if isinstance(element.value, cst.Name) and element.value.value == node.value and not isinstance(element, cst.StarredElement):
                        return self._unpacked(statement.value, position, len(elements), unit, context, budget)
        return None

    def _unpacked(self, value: cst.BaseExpression, position: int, count: int, unit: CodeUnit, context: Context, budget: List[int]) -> Optional[Lowered]:
        """The `position`-th of `count` names an unpacking binds: an element of a tuple
        written out, or a piece of a split (`q, k, v = qkv.chunk(3, dim=-1)`)."""
        if isinstance(value, (cst.Tuple, cst.List)):
            elements = value.elements
            if len(elements) == count and not any(isinstance(e, cst.StarredElement) for e in elements):
                return self._lowered(elements[position].value, unit, context, budget)
            return None
        if isinstance(value, cst.Call) and isinstance(value.func, cst.Attribute) and value.func.attr.value in ("chunk", "split", "unbind", "tensor_split"):
            return self._lowered(value.func.value, unit, context, budget)
        return None

    def _arithmetic(self, node, left, right, operator, unit: CodeUnit, context: Context, budget: List[int]) -> Optional[Lowered]:
        """`a op b`: in the lowered dtype when both are lowered, or one is and the other a
        Python number; CUDA's autocast runs `**` and a number divided by a tensor in float32."""
        state = self._state(node, unit, context)
        if state is None:
            return None
        lowered_left = self._lowered(left, unit, context, budget)
        lowered_right = self._lowered(right, unit, context, budget)
        if lowered_left is None and lowered_right is None:
            return None
        if lowered_left is None and not self.number(left, unit):
            return None
        if lowered_right is None and not self.number(right, unit):
            return None
        if state and isinstance(operator, cst.Power) and autocast_policy("pow", context[0]) == FLOAT32:
            return None  # `__pow__`, `__rpow__`: CUDA runs them in float32
        if state and isinstance(operator, cst.Divide) and lowered_left is None and autocast_policy("reciprocal", context[0]) == FLOAT32:
            return None  # a number over a tensor is `__rtruediv__`, a reciprocal: float32 on CUDA
        return lowered_left or lowered_right

    def _call(self, node: cst.Call, unit: CodeUnit, context: Context, budget: List[int]) -> Optional[Lowered]:
        func = node.func
        if isinstance(func, cst.Attribute) and self.model.qualified(func) is None:
            method = func.attr.value
            receiver = func.value
            if method in _CASTS:
                return None  # an island, or another dtype
            if method == "to":
                if node.args and all(self.casts.device_like(arg, unit) for arg in node.args):
                    return self._lowered(receiver, unit, context, budget)
                return None
            if method == "type_as":
                return self._lowered(node.args[0].value, unit, context, budget) if len(node.args) == 1 else None
            if method in _VIEWS:
                if any(self.model.resolver.dtypes(arg.value, unit.scope) for arg in node.args):
                    return None  # `x.view(torch.int32)`: another dtype
                if method in ("max", "min") and not all(self.number(arg.value, unit) or arg.keyword is not None for arg in node.args):
                    return None  # `a.max(b)`: elementwise, with `b`'s dtype in the promotion
                return self._lowered(receiver, unit, context, budget)
            if method.endswith("_") and not method.startswith("_"):
                return self._lowered(receiver, unit, context, budget)  # in place: the receiver
            if method in _BINARY_METHODS and len(node.args) == 1 and node.args[0].keyword is None:
                return self._arithmetic(node, receiver, node.args[0].value, cst.Multiply(), unit, context, budget)
            if method == "where" and len(node.args) == 2:
                return self._arithmetic(node, receiver, node.args[1].value, cst.Multiply(), unit, context, budget)
        qualified = self.model.qualified(func) or ""
        positional = [arg.value for arg in node.args if arg.keyword is None and not arg.star]
        if qualified.startswith("torch.") and qualified[6:] in _VIEWS - {"max", "min", "cpu", "cuda"} and positional:
            if any(self.model.resolver.dtypes(arg.value, unit.scope) for arg in node.args):
                return None
            return self._lowered(positional[0], unit, context, budget)  # `torch.diagonal(gram)`: a view of it
        op = self.ops.torch_op(node, unit)
        if op is not None:
            return self._op(op, node, unit, context, budget)
        if qualified == "torch.where" and len(positional) == 3:
            return self._arithmetic(node, positional[1], positional[2], cst.Multiply(), unit, context, budget)
        if qualified in ("torch.cat", "torch.concat", "torch.concatenate", "torch.stack") and positional:
            if isinstance(positional[0], (cst.List, cst.Tuple)) and positional[0].elements:
                found = [self._lowered(e.value, unit, context, budget) for e in positional[0].elements if not isinstance(e, cst.StarredElement)]
                if len(found) == len(positional[0].elements) and all(found):
                    return found[0]
            return None
        record = self.model.call_record(node)
        callee = self.region_ops.callee(record) if record is not None else None
        if callee is not None:
            return self._returned(node, callee, unit, context, budget)
        return None

    def _op(self, op, node: cst.CSTNode, unit: CodeUnit, context: Context, budget: List[int]) -> Optional[Lowered]:
        """A PyTorch op autocast knows (`TorchOps`), by its policy on the device where autocast
        is on; where it is off, every op runs in its inputs' dtype."""
        state = self._state(node, unit, context)
        if state is None or op.keyword("dtype") is not None or op.keyword("out") is not None:
            return None
        policy = autocast_policy(op.name, context[0]) if state else None
        if policy == LOWER_PRECISION:
            if any(self.casts.is_float64(operand, unit) for operand in op.operands):
                return None  # float64 is not eligible: it runs in float64
            return Lowered(node, unit)
        if policy is not None and policy != PROMOTE:
            return None  # float32, banned, or unknown
        inputs = op.inputs[:1] if op.form == "module" else op.inputs
        found: Optional[Lowered] = None
        for value in inputs:
            lowered = self._lowered(value, unit, context, budget)
            if lowered is None and (policy == PROMOTE or not self.number(value, unit)):
                return None
            found = found or lowered
        return found

    def _returned(self, call: cst.Call, callee: CodeUnit, unit: CodeUnit, context: Context, budget: List[int]) -> Optional[Lowered]:
        """A call of the file's own function or module: lowered when every value it returns
        is, run as the call site runs (under the context, or with autocast off)."""
        state = self._state(call, unit, context)
        if state is None or callee is unit or not isinstance(callee.node, cst.FunctionDef) or budget[0] < _CALLEE_COST:
            return None
        returns = own_returns(callee.node)
        if not returns or any(r.value is None for r in returns) or _generates(callee.node):
            return None
        inner = (context[0], context[1], bool(state))
        budget[0] -= _CALLEE_COST
        found: Optional[Lowered] = None
        for returned in returns:
            lowered = self._lowered(returned.value, callee, inner, budget)  # type: ignore[arg-type]
            if lowered is None:
                return None
            found = found or lowered
        return found

    # ---------------------------------------------------------------- Python numbers
    def _number(self, node: cst.BaseExpression, unit: CodeUnit, depth: int) -> bool:
        if depth > 6:
            return False
        if isinstance(node, (cst.Integer, cst.Float)):
            return True
        if isinstance(node, cst.UnaryOperation):
            return self._number(node.expression, unit, depth + 1)
        if isinstance(node, cst.BinaryOperation) and isinstance(node.operator, _ARITHMETIC):
            return self._number(node.left, unit, depth + 1) and self._number(node.right, unit, depth + 1)
        if isinstance(node, cst.IfExp):
            return self._number(node.body, unit, depth + 1) and self._number(node.orelse, unit, depth + 1)
        if isinstance(node, cst.BooleanOperation) and isinstance(node.operator, cst.Or):
            # `qk_scale or head_dim ** -0.5`: a number, or None by default then the number.
            return self._number(node.right, unit, depth + 1) and (self._number(node.left, unit, depth + 1) or self._none_by_default(node.left, unit))
        if isinstance(node, cst.Call):
            name = dotted_name(node.func) or ""
            if name.startswith("math.") or name in _NUMBER_CALLS:
                return True
            return isinstance(node.func, cst.Attribute) and node.func.attr.value in _NUMBER_METHODS
        if isinstance(node, cst.Subscript):
            return isinstance(node.value, cst.Attribute) and node.value.attr.value == "shape"
        if isinstance(node, cst.Attribute) and node.attr.value in _NUMBER_ATTRIBUTES:
            return True
        name = dotted_name(node)
        if name is None or name.count(".") > 1 or name.startswith("math."):
            return name is not None and name.startswith("math.")
        bindings = self.model.resolver.bindings(name, unit.scope)
        if not bindings:
            return False
        for binding in bindings:
            if binding.kind == "param":
                if not self._numeric_parameter(binding.node, binding.scope):
                    return False
            elif binding.kind != "assign" or binding.value is None:
                return False
            else:
                home = self._unit_of(binding.value_scope) or unit
                if not self._number(binding.value, home, depth + 1):
                    return False
        return True

    def _numeric_parameter(self, param: cst.CSTNode, scope) -> bool:
        """A parameter with a numeric default or an `int`/`float` annotation, or one its
        function hands to a `torch.nn` layer as a size (`nn.Linear(dim, dim * 3)`)."""
        if not isinstance(param, cst.Param):
            return False
        annotation = dotted_name(param.annotation.annotation) if param.annotation is not None else None
        if annotation in ("int", "float"):
            return True
        default = param.default
        if isinstance(default, cst.UnaryOperation):
            default = default.expression
        if isinstance(default, (cst.Integer, cst.Float)):
            return True
        unit = self._unit_of(scope)
        name = param.name.value
        return unit is not None and any(
            (self.model.qualified(record.node.func) or "").startswith("torch.nn.")
            and any(isinstance(arg.value, cst.Name) and arg.value.value == name for arg in record.node.args)
            for record in unit.calls
        )

    def _none_by_default(self, node: cst.BaseExpression, unit: CodeUnit) -> bool:
        name = dotted_name(node)
        bindings = self.model.resolver.bindings(name, unit.scope) if name is not None else []
        return bool(bindings) and all(
            (b.kind == "param" and isinstance(b.node, cst.Param) and isinstance(b.node.default, cst.Name) and b.node.default.value == "None")
            or (b.kind == "assign" and b.value is not None and (self._number(b.value, unit, 5) or self._none_by_default(b.value, unit)))
            for b in bindings
        )

    def _unit_of(self, scope) -> Optional[CodeUnit]:
        if self._units is None:
            self._units = {id(u.scope): u for u in self.model.units}
        return self._units.get(id(scope))


def _generates(function: cst.FunctionDef) -> bool:
    """Whether a function yields (a generator returns no tensor)."""

    def descend(node: cst.CSTNode) -> bool:
        return node is function or not isinstance(node, (cst.FunctionDef, cst.ClassDef, cst.Lambda))

    return any(isinstance(node, cst.Yield) for node in iter_tree(function, descend))


__all__ = ["CONTEXTS", "Lowered", "LoweredValues", "region_contexts"]
