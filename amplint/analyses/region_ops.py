"""What autocast does to the expressions evaluated under it (a fact family: `RegionOps`).

Autocast does not change what a tensor is; it changes the dtype each eligible op runs in. The
policy of each op is data, in `amplint.semantic.pytorch.autocast_ops`:

- lower precision: matrix products and convolutions run in the region's dtype, *whatever the
  dtype of their inputs*; a float32 input is cast down (`.float()` before them is undone);
- float32 (CUDA): `log`, `log1p`, `log2`, `log10`, `exp`, `softmax`, `log_softmax`, `sum`,
  `pow`, the losses ...; on CPU only a list of losses, linear algebra and FFTs (not `log`, not
  `softmax`: on CPU they run in their input's dtype, measured on torch 2.13);
- banned (CUDA): `binary_cross_entropy` (and `nn.BCELoss`) raise inside an enabled region;
  on CPU it is on the float32 list and runs;
- everything unlisted (`sigmoid`, `1 - p`, `+`, `clamp`) runs in its input's dtype, so
  downstream of a low-precision op it runs in low precision too.

`RegionOps` finds the ops evaluated inside each enabled autocast region (written in
it, or in a function of the file called from inside it, transitively, unless that function
switches autocast off itself), names them (`torch.matmul`, `x.mm(y)`, `a @ b`, `self.fc(x)`
for `self.fc = nn.Linear(...)`), and answers two questions about their inputs: is this an
explicit float32 cast (seen through views and straight-line assignments), and is this a
probability that saturates in low precision (a sigmoid, `1 - sigmoid`, a softmax, with the
epsilon guards around it).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, FrozenSet, List, Optional, Set, Tuple, Union

import libcst as cst

from amplint.semantic import (
    Analysis,
    AutocastRegion,
    CallRecord,
    CodeUnit,
    ProductRecord,
    Scope,
    SemanticModel,
    WithFrame,
    callers_autocast,
    children,
    dotted_name,
    iter_tree,
    names_bound,
    source_text,
)
from amplint.semantic.pytorch.api import DTYPES, SAME_DTYPE_ATTRIBUTES, SAME_DTYPE_METHODS
from amplint.semantic.pytorch.autocast_ops import (
    ALL_OPERANDS,
    CREATION_FUNCTIONS,
    FLOAT32,
    FUNCTIONS,
    METHODS,
    MODULES,
    OPERANDS,
    autocast_policy,
    einsum_contracts,
)


def region_devices(region: AutocastRegion) -> FrozenSet[str]:
    """The devices a region may run on; CUDA or CPU when the code does not say."""
    return region.possible_devices or frozenset({"cuda", "cpu"})


def region_words(region: AutocastRegion) -> str:
    """How a message names a region: its autocast call, or the hook a framework runs under
    its own autocast and the call that sets that framework's precision."""
    if region.caller:
        return f"`{region.caller}.forward`, which runs under its caller's autocast"
    if region.hook:
        return f"`{region.hook}`, which `{source_text(region.anchor)}` runs under autocast"
    return f"`{source_text(region.anchor)}`"


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


@dataclass(frozen=True, eq=False)
class RegionOp:
    """An op evaluated inside an enabled autocast region."""

    op: TorchOp
    unit: CodeUnit  # the unit whose code contains it
    region: AutocastRegion
    # The calls from the region's unit down to the helper that contains the op; empty when
    # the op is written inside the region.
    via: Tuple[cst.Call, ...] = ()

    @property
    def node(self) -> Union[cst.Call, cst.BaseExpression]:
        return self.op.node

    def policies(self) -> FrozenSet[Optional[str]]:
        """What autocast does to the op on each device the region may run on."""
        return frozenset(autocast_policy(self.op.name, device) for device in region_devices(self.region))


# --------------------------------------------------------------------------- saturating probabilities

# The smallest positive float16 is 2**-24; anything at or below half of it rounds to 0.
_FLOAT16_ZERO = 2.0**-25
# Just below 1, float16 is spaced 2**-11 and bfloat16 2**-8: within half a spacing of 1, a
# value rounds to 1.0 and `1 - p` is exactly 0.
_ROUNDS_TO_ONE = {"float16": 2.0**-12, "bfloat16": 2.0**-9}


def rounds_to_zero(value: float, dtype: str) -> bool:
    """Whether a positive constant (an epsilon) is 0 once stored in `dtype`."""
    if dtype == "float16":
        return value <= _FLOAT16_ZERO
    if dtype == "bfloat16":
        return value <= 2.0**-134  # bfloat16 keeps float32's range
    return False


def rounds_to_one(value: float, dtype: str) -> bool:
    """Whether a constant just below 1 (a clamp's `1 - eps`) is 1.0 once stored in `dtype`."""
    gap = _ROUNDS_TO_ONE.get(dtype)
    return gap is not None and 1.0 - value <= gap


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
        elif dtype not in _ROUNDS_TO_ONE:
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


# --------------------------------------------------------------------------- the analysis

_UNKNOWN = object()  # a binding whose value amplint cannot read
_NOT_BOUND = object()
_MAX_DEPTH = 4
# How far a float32 cast is followed: through names, views, arithmetic and a buffer's value
# (`t = t.type_as(self.inv_freq)`, `t = t / scale`, then `inv_freq = 1.0 / (base ** (...).float())`).
_CAST_DEPTH = 12

# Tensor methods and attributes that keep their receiver's dtype.
# Tensor methods whose result's elements are some of the receiver's, unchanged.
_SELECTIONS = frozenset(
    {
        "view", "reshape", "flatten", "squeeze", "unsqueeze", "transpose", "permute", "contiguous",
        "gather", "index_select", "masked_select", "take", "take_along_dim", "expand", "expand_as",
        "t", "clone", "detach", "narrow", "select",
    }
)
_TENSOR_TYPES = {"FloatTensor": "float32", "DoubleTensor": "float64", "HalfTensor": "float16", "BFloat16Tensor": "bfloat16"}
# Names conventionally bound to modules (`import torch.nn.functional as F`).
_MODULE_NAMES = frozenset({"F", "nn", "np", "torch", "functional", "math", "jnp", "tf", "scipy", "special"})
# nn.Module methods that return the module itself.
_RETURNS_SELF = frozenset({"to", "cuda", "cpu", "train", "eval", "requires_grad_"})
_ARITHMETIC = (cst.Add, cst.Subtract, cst.Multiply, cst.Divide, cst.Power)
# Decorators that leave a function's autocast as its caller's.
_PLAIN_DECORATORS = frozenset(
    {"staticmethod", "classmethod", "property", "cached_property", "wraps", "override", "no_grad", "inference_mode",
     "enable_grad", "compile", "script", "ignore", "unused", "export", "lru_cache", "cache", "abstractmethod"}
)


class RegionOps(Analysis):
    """The ops under autocast and what their inputs are: `model.facts(RegionOps)`."""

    def __init__(self, model: SemanticModel) -> None:
        super().__init__(model)
        self._ops: Optional[List[RegionOp]] = None
        self._named: Dict[int, Optional[TorchOp]] = {}
        self._parents: Dict[int, Dict[int, cst.CSTNode]] = {}
        self._functions: Optional[Dict[int, CodeUnit]] = None
        self._in_region: Optional[Set[int]] = None
        self._callers: Optional[List[RegionOp]] = None

    # ---------------------------------------------------------------- ops under autocast
    def ops_in_regions(self) -> List[RegionOp]:
        """Every known op evaluated inside an enabled autocast region, once each: written in
        the region first, then in the file's functions called from inside it (through helpers
        that do not switch autocast off), in source order."""
        if self._ops is not None:
            return self._ops
        found: List[RegionOp] = []
        seen: Set[Tuple[int, int]] = set()
        hooks = self.model.regions.hook_regions
        if not hooks and not any(region.active for region in self.model.autocast_regions):
            self._ops = found
            return found
        # (helper, the region it is called under, the calls on the way, the helpers on the way)
        pending: List[Tuple[CodeUnit, AutocastRegion, Tuple[cst.Call, ...], Tuple[CodeUnit, ...]]] = []
        for unit in self.model.units:
            hook = hooks.get(id(unit))  # a method a framework runs under its own autocast
            for record in self._records(unit):
                context = self._context(record)
                region = context.region
                if region is None and hook is not None and not context.autocast_off:
                    region = hook  # no region of its own inside: the framework's
                if region is None:
                    continue
                self._add(found, seen, record, unit, region, ())
                callee = self._callee(record)
                if callee is not None and callee is not unit:
                    pending.append((callee, region, (record.node,), (unit, callee)))  # type: ignore[arg-type]
        while pending:
            unit, region, via, chain = pending.pop(0)
            for record in self._records(unit):
                context = self._context(record)
                if context.region is not None or context.autocast_off:
                    continue  # its own region (found above), or autocast switched off there
                self._add(found, seen, record, unit, region, via)
                callee = self._callee(record)
                if callee is not None and len(via) < _MAX_DEPTH and all(callee is not u for u in chain):
                    pending.append((callee, region, via + (record.node,), chain + (callee,)))  # type: ignore[operator]
        self._ops = found
        return found

    def ops_under_callers_autocast(self) -> List[RegionOp]:
        """The known ops an `nn.Module`'s `forward` evaluates where no region of the file
        reaches them, itself or in the file's functions it calls: they run under whatever
        autocast the module's caller has on, and mixed-precision training and inference call
        their model under one. Left out: what the file's own regions reach (`ops_in_regions`),
        code under autocast switched off (in the forward, on the way, or around a call of the
        module or helper that the file makes), and a hook a framework already runs under its
        own autocast. Each op once, the forwards' own first, in source order."""
        if self._callers is not None:
            return self._callers
        found: List[RegionOp] = []
        seen: Set[Tuple[int, int]] = set()
        guarded = self._called_with_autocast_off()
        pending: List[Tuple[CodeUnit, AutocastRegion, Tuple[cst.Call, ...], Tuple[CodeUnit, ...]]] = []
        for unit in self.model.units:
            owner = unit.scope.class_scope if not unit.is_module else None
            if owner is None or unit.node.name.value != "forward" or id(unit) in guarded or self._may_switch_autocast(unit):  # type: ignore[union-attr]
                continue
            if id(unit) in self.model.regions.hook_regions or not self.model.classifier.is_module_class(owner):
                continue
            pending.append((unit, callers_autocast(unit, owner), (), (unit,)))
        reached = {id(op.node) for op in self.ops_in_regions()}
        while pending:
            unit, region, via, chain = pending.pop(0)
            for record in self._records(unit):
                context = self._context(record)
                if context.region is not None or context.autocast_off or id(record.node) in reached or self._in_unknown_context(record):
                    continue
                reached.add(id(record.node))
                self._add(found, seen, record, unit, region, via)
                callee = self._callee(record)
                if callee is None or id(callee) in guarded or self._may_switch_autocast(callee):
                    continue
                if len(via) < _MAX_DEPTH and all(callee is not u for u in chain):
                    pending.append((callee, region, via + (record.node,), chain + (callee,)))  # type: ignore[operator]
        self._callers = found
        return found

    def _in_unknown_context(self, record: Union[CallRecord, ProductRecord]) -> bool:
        """Inside a `with` whose item is neither an autocast nor `no_grad`: a context manager of
        the file's (`with fp32():` over `torch.autocast(..., enabled=False)`) or anyone's may
        switch autocast off, and no caller's autocast is guessed through it."""
        regions = self.model.regions
        return any(
            isinstance(frame, WithFrame) and regions.region_of(frame, record.unit) is None and not regions.is_no_grad(frame.item)
            for frame in record.frames
        )

    def _may_switch_autocast(self, unit: CodeUnit) -> bool:
        """A function whose own code may run with autocast off whatever its caller has on: one
        decorated by anything but the plain decorators (`custom_fwd(cast_inputs=...)` under
        another name), or one that asks `torch.is_autocast_enabled()`."""
        for decorator in getattr(unit.node, "decorators", ()):
            expression = decorator.decorator.func if isinstance(decorator.decorator, cst.Call) else decorator.decorator
            if (dotted_name(expression) or "").rsplit(".", 1)[-1] not in _PLAIN_DECORATORS:
                return True
        return any((dotted_name(record.node.func) or "").endswith("is_autocast_enabled") for record in unit.calls)

    def _called_with_autocast_off(self) -> Set[int]:
        """The file's functions it calls somewhere under autocast switched off
        (`with torch.autocast("cuda", enabled=False): freqs = self.rotary(pos)`)."""
        found: Set[int] = set()
        for unit in self.model.units:
            for record in unit.calls:
                if record.immediate and self.model.regions.context(record).autocast_off:
                    callee = self._callee(record)
                    if callee is not None:
                        found.add(id(callee))
        return found

    def runs_in_region(self, node: cst.CSTNode) -> bool:
        """Whether an op is evaluated inside an enabled autocast region (see `ops_in_regions`)."""
        if self._in_region is None:
            self._in_region = {id(op.node) for op in self.ops_in_regions()}
        return id(node) in self._in_region

    def _records(self, unit: CodeUnit) -> List[Union[CallRecord, ProductRecord]]:
        records: List[Union[CallRecord, ProductRecord]] = [r for r in unit.calls if r.immediate]
        records.extend(unit.products)
        return records

    def _context(self, record: Union[CallRecord, ProductRecord]):
        if isinstance(record, CallRecord):
            return self.model.regions.context(record)
        return self.model.regions.context_of(record.unit, record.frames)

    def _callee(self, record: Union[CallRecord, ProductRecord]) -> Optional[CodeUnit]:
        """The function of this file a call runs: a helper (`scores(q, k)`, `self._attend(x)`),
        or the `forward` of a module whose class the file defines (`self.block(x)` with
        `self.block = Block(...)`)."""
        if not isinstance(record, CallRecord):
            return None
        from amplint.semantic import HelperCall

        item = self.model.classify(record)
        if isinstance(item, HelperCall):
            return item.callee
        name = dotted_name(record.node.func)
        if name == "self":
            # `self(x)` in a module's method (a LightningModule's `training_step`): its `forward`.
            owner = self.model.resolver.owning_class(record.unit.scope)
            return self._forward(owner) if owner is not None else None
        if name is None or name == "super":
            return None
        owners = set()
        for value, _ in self.model.resolver.values(name, record.unit.scope):
            # `Net(...).to(device)`, `.cuda()`, `.train()` return the module itself.
            while (
                isinstance(value, cst.Call)
                and isinstance(value.func, cst.Attribute)
                and value.func.attr.value in _RETURNS_SELF
            ):
                if dotted_name(value.func.value) == name:
                    value = None  # `model = model.to(device)`: the same object, bound elsewhere
                    break
                value = value.func.value
            if value is None:
                continue
            if not isinstance(value, cst.Call) or dotted_name(value.func) not in self.model.index.classes:
                return None
            owners.add(dotted_name(value.func))
        if len(owners) != 1:
            return None
        return self._forward(self.model.index.classes[owners.pop()])

    def _forward(self, owner: Scope, depth: int = 0) -> Optional[CodeUnit]:
        """A class's `forward`, its own or a base class's of this file."""
        if depth > _MAX_DEPTH:
            return None
        if self._functions is None:
            self._functions = {id(u.node): u for u in self.model.units if not u.is_module}
        for binding in owner.bindings.get("forward", ()):
            if binding.kind == "def" and id(binding.node) in self._functions:
                return self._functions[id(binding.node)]
        for base in owner.bases:
            parent = self.model.index.classes.get(base.rsplit(".", 1)[-1])
            if parent is not None and parent is not owner:
                found = self._forward(parent, depth + 1)
                if found is not None:
                    return found
        return None

    def _add(self, found, seen, record, unit, region, via) -> None:
        # Once per op and region: a helper called under a float16 and a bfloat16 region runs in both.
        key = (id(record.node), id(region))
        if key in seen:
            return
        op = self.torch_op(record.node, unit)
        if op is not None:
            seen.add(key)
            found.append(RegionOp(op, unit, region, via))

    # ---------------------------------------------------------------- what a call is
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
            if name == "einsum" and not (positional and self._contracts(positional[0], unit.scope)):
                return None  # no `bmm`: an outer or elementwise product, or an equation we cannot read
            if name in ("einsum", "chain_matmul", "linalg_multi_dot"):
                operands = positional[1:] if name == "einsum" else positional
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

    def _contracts(self, equation: cst.BaseExpression, scope: Scope, depth: int = 0) -> bool:
        """Whether an einsum's equation, as written (`"bid,bjd->bij"`, implicitly concatenated,
        an f-string without fields) or as every value a name is given (`EQ = "bid,bjd->bij"`),
        contracts an index (`einsum_contracts`); False when it cannot be read."""
        if isinstance(equation, (cst.SimpleString, cst.ConcatenatedString)):
            text = equation.evaluated_value
            return isinstance(text, str) and einsum_contracts(text)
        if isinstance(equation, cst.FormattedString) and all(isinstance(part, cst.FormattedStringText) for part in equation.parts):
            return einsum_contracts("".join(part.value for part in equation.parts))  # type: ignore[union-attr]
        if isinstance(equation, cst.Name) and depth < 4:
            values = self.model.resolver.values(equation.value, scope)
            return bool(values) and all(value is not None and self._contracts(value, where, depth + 1) for value, where in values)
        return False

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

    # ---------------------------------------------------------------- float32 casts
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
                if method == "to" and node.args and all(self._device_like(arg, unit) for arg in node.args):
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
        if isinstance(node, cst.BinaryOperation) and isinstance(node.operator, _ARITHMETIC):
            # float32 with float16, bfloat16, float32 or a Python number is float32.
            left = self.float32_cast(node.left, unit, depth + 1)
            right = self.float32_cast(node.right, unit, depth + 1)
            if (left or right) and not (self._float64(node.left, unit) or self._float64(node.right, unit)):
                return left or right
            return None
        if isinstance(node, cst.Name):
            value = self.value_at(node, unit)
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
        if name is None or name.count(".") > 1 or (isinstance(expression, cst.Name) and self.value_at(expression, unit) is not None):
            return False  # a straight-line value was already followed by float32_cast
        values = [(value, where) for value, where in self.model.values(unit, name)]
        if name.startswith("self."):
            values += self._buffers(name[len("self."):], unit)
        if not values or any(value is None for value, _ in values):
            return False
        for value, where in values:
            home = next((u for u in self.model.units if u.scope is where), None)
            if home is None or value is expression or not self.evidently_float32(value, home, depth + 1):
                return False
        return True

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

    def _device_like(self, arg: cst.Arg, unit: CodeUnit) -> bool:
        """`.to(device)`, `.to(x.device)`, `.to("cuda")`, `non_blocking=True`: no dtype change."""
        if arg.keyword is not None:
            return arg.keyword.value in ("device", "non_blocking", "copy", "memory_format")
        if self.model.resolver.devices(arg.value, unit.scope):
            return True
        name = dotted_name(arg.value)
        return name is not None and name.rsplit(".", 1)[-1].lower().endswith("device")

    def _float64(self, expression: cst.BaseExpression, unit: CodeUnit) -> bool:
        if isinstance(expression, cst.Call) and isinstance(expression.func, cst.Attribute):
            if expression.func.attr.value == "double":
                return True
            if expression.func.attr.value in ("to", "type"):
                return "float64" in self._cast_dtypes(expression, unit)
        return False

    # ---------------------------------------------------------------- probabilities
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
            op = self.torch_op(node, unit)
            if op is not None:
                return frozenset(d for d in ("cuda", "cpu") if autocast_policy(op.name, d) == FLOAT32)
            selected = _selection_of(node)
            return self.float32_devices(selected, unit, depth + 1) if selected is not None else frozenset()
        if isinstance(node, cst.BinaryOperation) and isinstance(node.operator, _ARITHMETIC):
            return self.float32_devices(node.left, unit, depth + 1) | self.float32_devices(node.right, unit, depth + 1)
        if isinstance(node, cst.UnaryOperation):
            return self.float32_devices(node.expression, unit, depth + 1)
        selected = _selection_of(node)
        return self.float32_devices(selected, unit, depth + 1) if selected is not None else frozenset()

    def _resolved(self, expression: cst.BaseExpression, unit: CodeUnit) -> cst.BaseExpression:
        for _ in range(_MAX_DEPTH):
            if not isinstance(expression, cst.Name):
                break
            value = self.value_at(expression, unit)
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
        op = self.torch_op(node, unit)
        if op is None or op.name != kind or not op.inputs:
            return None
        if self.float32_cast(op.inputs[0], unit) is not None:
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
        op = self.torch_op(node, unit)
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

    # ---------------------------------------------------------------- straight-line values
    def value_at(self, name: cst.Name, unit: CodeUnit) -> Optional[cst.BaseExpression]:
        """The value the variable `name` holds where it is read, when the code on the way
        there makes it certain: the nearest earlier `name = value` of the unit with no other
        binding of it in between, none in a branch, loop or `with` target on the way, and no
        rebinding in a loop around the read. None for parameters, globals and anything
        assigned in only some branches."""
        parents = self._parent_map(unit)
        wanted = name.value
        current: cst.CSTNode = name
        while True:
            parent = parents.get(id(current))
            if parent is None:
                return None
            if isinstance(parent, (cst.For, cst.While)):
                if _binds(parent, wanted):
                    return None  # an iteration variable, or rebound on an earlier iteration
            elif isinstance(parent, cst.With):
                if any(item.asname is not None and wanted in names_bound(item.asname.name) for item in parent.items):
                    return None
            elif isinstance(parent, cst.ExceptHandler):
                if parent.name is not None and wanted in names_bound(parent.name.name):
                    return None
            body = _statements(parent)
            if body is not None:
                position = next((i for i, statement in enumerate(body) if statement is current), None)
                if position is not None:
                    for statement in reversed(body[:position]):
                        found = _binding_in(statement, wanted)
                        if found is _UNKNOWN:
                            return None
                        if found is not _NOT_BOUND:
                            return found  # type: ignore[return-value]
            if parent is unit.node:
                return None
            current = parent

    def _parent_map(self, unit: CodeUnit) -> Dict[int, cst.CSTNode]:
        key = id(unit)
        if key not in self._parents:
            parents: Dict[int, cst.CSTNode] = {}
            stack: List[cst.CSTNode] = [unit.node]
            while stack:
                node = stack.pop()
                for child in children(node):
                    parents[id(child)] = node
                    if not isinstance(child, (cst.FunctionDef, cst.ClassDef, cst.Lambda)):
                        stack.append(child)
            self._parents[key] = parents
        return self._parents[key]


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


def _input_keywords(call: cst.Call) -> Tuple[cst.BaseExpression, ...]:
    """Tensor inputs passed by keyword (`torch.matmul(input=a, other=b)`), in signature order."""
    keywords = {arg.keyword.value: arg.value for arg in call.args if arg.keyword is not None}
    return tuple(keywords[k] for k in ("input", "other", "mat1", "mat2", "batch1", "batch2", "weight") if k in keywords)


def _statements(node: cst.CSTNode) -> Optional[List[cst.CSTNode]]:
    if isinstance(node, (cst.Module, cst.IndentedBlock, cst.SimpleStatementSuite, cst.SimpleStatementLine)):
        return list(node.body)
    return None


def _binding_in(statement: cst.CSTNode, name: str) -> object:
    """What `statement` assigns `name`: the value of a plain `name = value`; _UNKNOWN for
    any other binding of it (in a branch, a loop, an augmented assignment, an unpacking);
    _NOT_BOUND when it does not bind it."""
    if isinstance(statement, cst.SimpleStatementLine):
        for small in reversed(statement.body):
            found = _binding_in(small, name)
            if found is not _NOT_BOUND:
                return found
        return _NOT_BOUND
    if isinstance(statement, cst.Assign):
        if not any(name in names_bound(target.target) for target in statement.targets):
            return _NOT_BOUND if not _binds(statement.value, name) else _UNKNOWN
        if all(isinstance(target.target, cst.Name) for target in statement.targets):
            return statement.value
        return _UNKNOWN
    if isinstance(statement, cst.AnnAssign):
        if name in names_bound(statement.target):
            return statement.value if statement.value is not None and isinstance(statement.target, cst.Name) else _UNKNOWN
        return _NOT_BOUND
    return _UNKNOWN if _binds(statement, name) else _NOT_BOUND


def _binds(node: cst.CSTNode, name: str) -> bool:
    """Whether anything in `node` (not in nested functions' bodies) binds `name`."""

    def descend(current: cst.CSTNode) -> bool:
        return current is node or not isinstance(current, (cst.FunctionDef, cst.ClassDef, cst.Lambda))

    for current in iter_tree(node, descend):
        targets: List[cst.CSTNode] = []
        if isinstance(current, cst.Assign):
            targets = [t.target for t in current.targets]
        elif isinstance(current, (cst.AugAssign, cst.AnnAssign, cst.For, cst.NamedExpr)):
            targets = [current.target]
        elif isinstance(current, cst.WithItem) and current.asname is not None:
            targets = [current.asname.name]
        elif isinstance(current, cst.ExceptHandler) and current.name is not None:
            targets = [current.name.name]
        elif isinstance(current, cst.Del):
            targets = [current.target]
        elif isinstance(current, (cst.FunctionDef, cst.ClassDef)) and current is not node:
            if current.name.value == name:
                return True
        elif isinstance(current, (cst.Import, cst.ImportFrom)) and not isinstance(getattr(current, "names", None), cst.ImportStar):
            for alias in current.names:  # type: ignore[union-attr]
                local = alias.asname.name if alias.asname is not None else alias.name
                if (dotted_name(local) or "").split(".")[0] == name:  # type: ignore[arg-type]
                    return True
        for target in targets:
            if isinstance(target, cst.BaseExpression) and name in names_bound(target):
                return True
    return False


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


__all__ = [
    "Guard",
    "Probability",
    "RegionOps",
    "RegionOp",
    "TorchOp",
    "region_devices",
    "region_words",
    "rounds_to_one",
    "rounds_to_zero",
]
