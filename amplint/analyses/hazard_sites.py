"""The places in a function where a value autocast lowered meets a float16 hazard (the parts
of `amplint.analyses.float16_hazards`), each found only on a value `LoweredValues` says was
lowered in the context asked about, and only where the hazard is real for that dtype:

- `OVERFLOWING_FILL` (AMP020): a finite constant outside the dtype's range written into the
  lowered tensor by an op that checks it and raises: `masked_fill(mask, -1e9)`,
  `masked_fill_`, `fill_`, `index_fill_`, `torch.full_like`, `new_full`,
  `torch.full(..., dtype=x.dtype)`, `clamp(min=-1e9)`. float16 only, in practice: bfloat16's
  range is float32's;
- `OVERFLOWING_WHERE` (AMP021): such a constant written where it is rounded, not checked:
  `torch.where(mask, x, -1e9)`, `x.where(mask, -1e9)`, `x[mask] = -1e9` store -inf;
- `ROUNDED_EPSILON` (AMP022): an epsilon or a clamp bound the dtype rounds away, guarding a
  division, a log, a square root or a reciprocal: `x / (s + 1e-8)`, `torch.log(s.clamp(min=1e-8))`
  (1e-8 is 0 in float16), `torch.log(1 - p.clamp(max=1 - 1e-4))` (1 - 1e-4 is 1.0 in
  float16 and bfloat16). A log of a sigmoid or softmax probability is AMP013's;
- `WRITE_INTO_FLOAT32` (AMP023): the lowered value written in place into a tensor that is
  float32 by what the code shows (`torch.zeros(n, d)`, `.float()`, `dtype=torch.float32`):
  `index_add_`, `scatter_add_`, `scatter_`, `scatter_reduce_`, `index_copy_`, `index_put_`,
  `buf[idx] = value` (with a tensor or list index; a slice or an integer copies and casts),
  `masked_scatter_`, `put_`, `index_reduce_`, `lerp_` require one dtype and
  raise (measured on torch 2.13's CPU; CUDA's autocast promotes only the out-of-place
  `scatter_add` and `index_put`).
- `BANNED_LOSS` (AMP013's): `F.binary_cross_entropy` or an `nn.BCELoss` called where CUDA's
  autocast is on (in a loss module a training script's region reaches): PyTorch raises
  ("unsafe to autocast"). AMP013 reports it in a region of the file's own; these sites let
  the project's ambient pass report it in another file's loss code.

`sites(unit)` lists the candidates of a unit once (most units have none); `check(site, unit,
context)` answers for one context.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, List, Optional, Tuple

import libcst as cst

from amplint.analyses.lowered_values import Lowered, LoweredValues
from amplint.analyses.region_ops import RegionOps
from amplint.semantic import CodeUnit, SemanticModel, dotted_name, iter_tree, keyword_argument, source_text
from amplint.semantic.pytorch.autocast_ops import BANNED, BANNED_LOSS_NAMES, FORMATS, HAZARD_CALLS, LOG_OPS, autocast_policy

OVERFLOWING_FILL = "AMP020"
OVERFLOWING_WHERE = "AMP021"
ROUNDED_EPSILON = "AMP022"
WRITE_INTO_FLOAT32 = "AMP023"
BANNED_LOSS = "AMP013"

# Fills that check their value: (position of the value among the arguments, its keyword).
_FILLS = {"masked_fill": (1, "value"), "masked_fill_": (1, "value"), "fill_": (0, "value"), "fill_diagonal_": (0, "fill_value"), "index_fill_": (2, "value"), "new_full": (1, "fill_value")}
_CLAMPS = frozenset({"clamp", "clip", "clamp_", "clip_", "clamp_min", "clamp_min_", "clamp_max", "clamp_max_"})
# In-place writes that require the source's dtype to be the destination's: (position of the
# source among the arguments, its keyword, PyTorch's words when they differ).
_WRITES = {
    "index_add_": (2, "source", "index_add_(): self (Float) and source (Half) must have the same scalar type"),
    "index_add": (2, "source", "index_add_(): self (Float) and source (Half) must have the same scalar type"),
    "scatter_add_": (2, "src", "scatter(): Expected self.dtype to be equal to src.dtype"),
    "scatter_add": (2, "src", "scatter(): Expected self.dtype to be equal to src.dtype"),
    "scatter_": (2, "src", "scatter(): Expected self.dtype to be equal to src.dtype"),
    "scatter": (2, "src", "scatter(): Expected self.dtype to be equal to src.dtype"),
    "scatter_reduce_": (2, "src", "scatter(): Expected self.dtype to be equal to src.dtype"),
    "scatter_reduce": (2, "src", "scatter(): Expected self.dtype to be equal to src.dtype"),
    "index_copy_": (2, "source", "index_copy_(): self and source expected to have the same dtype"),
    "index_copy": (2, "source", "index_copy_(): self and source expected to have the same dtype"),
    "index_put_": (1, "values", "Index put requires the source and destination dtypes match"),
    "index_put": (1, "values", "Index put requires the source and destination dtypes match"),
    "masked_scatter_": (1, "source", "masked_scatter: expected self and source to have same dtypes"),
    "put_": (1, "source", "put_(): self and source expected to have the same dtype"),
    "index_reduce_": (2, "source", "index_reduce_(): self (Float) and source (Half) must have the same scalar type"),
    "lerp_": (0, "end", "expected dtype float for `end` but got dtype c10::Half"),
}
# CUDA's autocast promotes these (out of place): the source is cast up to the destination's dtype.
_PROMOTED_ON_CUDA = frozenset({"scatter_add", "index_put"})
_SETITEM = "Index put requires the source and destination dtypes match"
_SQRT_LIKE = frozenset({"sqrt", "rsqrt", "reciprocal"})
# Their gradient is infinite at +-1: a clamp that keeps the input inside (-1, 1) guards them.
_ARC = frozenset({"acos", "asin", "arccos", "arcsin"})
# The creation functions that make float32 tensors by default (the default dtype).
_DEFAULT_FLOAT = frozenset({"torch.zeros", "torch.ones", "torch.empty", "torch.rand", "torch.randn"})
# Calls that make index tensors (or tuples of them).
_INDEX_CALLS = frozenset({"nonzero", "where", "argsort", "topk", "sort", "argmax", "argmin", "arange", "randperm", "multinomial", "bool"})
_VIEWS = frozenset({"view", "reshape", "unsqueeze", "squeeze", "expand", "expand_as", "transpose", "permute", "contiguous", "flatten", "t", "clone", "detach"})




@dataclass(frozen=True)
class Site:
    """A candidate: `kind` is "fill", "where", "setitem", "divide", "sink" (a log, square root,
    reciprocal or negative power) or "write"."""

    kind: str
    node: cst.CSTNode
    name: str = ""  # the method or function


# Where a message names the dtype: the hazard's every dtype fills it in (`dtype_words`).
DTYPE = "\x00dtype\x00"


@dataclass(frozen=True)
class Found:
    """A hazard at a site, for one context: its rule's code, what to say (with `DTYPE` where
    the dtype goes), the lowered value."""

    code: str
    node: cst.CSTNode
    message: str
    help: str
    lowered: Lowered


def dtype_words(text: str, dtypes) -> str:
    """A message with its dtypes: "float16", "float16 or bfloat16"."""
    return text.replace(DTYPE, " or ".join(d for d in ("float16", "bfloat16") if d in dtypes))


class HazardSites:
    """The sites of each unit, and what each is in a context."""

    def __init__(self, model: SemanticModel, lowered: LoweredValues) -> None:
        self.model = model
        self.values = lowered
        self.region_ops = model.facts(RegionOps)
        self._sites: Dict[int, List[Site]] = {}
        self._default_dtype_set: Optional[bool] = None
        self._names_banned: Optional[bool] = None

    def sites(self, unit: CodeUnit) -> List[Site]:
        """The unit's candidates, in source order: calls named like a hazard, divisions and
        powers, and subscript assignments, in its own code."""
        key = id(unit)
        if key in self._sites:
            return self._sites[key]
        found: List[Site] = []

        def descend(node: cst.CSTNode) -> bool:
            return node is unit.node or not isinstance(node, (cst.FunctionDef, cst.ClassDef, cst.Lambda))

        losses = self._banned_losses()
        for node in iter_tree(unit.node, descend):
            if isinstance(node, cst.Call):
                name = (dotted_name(node.func) or "").rsplit(".", 1)[-1] if not isinstance(node.func, cst.Attribute) else node.func.attr.value
                if name in HAZARD_CALLS:
                    found.append(Site(_call_kind(name), node, name))
                elif losses and name not in BANNED_LOSS_NAMES:
                    op = self.region_ops.torch_ops.torch_op(node, unit)  # `self.criterion(p, y)`, `nn.BCELoss()(p, y)`
                    if op is not None and op.name == "binary_cross_entropy":
                        found.append(Site("banned", node, op.name))
                elif losses:
                    found.append(Site("banned", node, name))
            elif isinstance(node, cst.BinaryOperation) and isinstance(node.operator, (cst.Divide, cst.Power)):
                found.append(Site("divide", node))
            elif isinstance(node, cst.Assign) and any(isinstance(t.target, cst.Subscript) for t in node.targets):
                found.append(Site("setitem", node))
        self._sites[key] = found
        return found

    def check(self, site: Site, unit: CodeUnit, device: str, dtype: str, ambient: bool) -> Optional[Found]:
        """The hazard at `site` when `unit` runs in the context, if there is one."""
        context = (device, dtype, ambient)
        if site.kind == "fill":
            return self._fill(site, unit, context)
        if site.kind in ("where", "setitem"):
            found = self._where(site, unit, context)
            if found is None and site.kind == "setitem":
                return self._write(site, unit, context)
            return found
        if site.kind in ("divide", "sink"):
            return self._epsilon(site, unit, context)
        if site.kind == "write":
            return self._write(site, unit, context)
        if site.kind == "banned":
            return self._banned(site, unit, context)
        return None

    def _banned_losses(self) -> bool:
        """Whether the file names the binary cross-entropy autocast refuses (once per file)."""
        if self._names_banned is None:
            self._names_banned = any((dotted_name(r.node.func) or "").rsplit(".", 1)[-1] in BANNED_LOSS_NAMES for r in self.model.index.calls)
        return self._names_banned

    def _banned(self, site: Site, unit: CodeUnit, context) -> Optional[Found]:
        """`F.binary_cross_entropy(p, y)`, `self.criterion(p, y)` with an `nn.BCELoss`, where
        the context's autocast is on: refused on CUDA, whatever the inputs' dtype."""
        call: cst.Call = site.node  # type: ignore[assignment]
        device = context[0]
        op = self.region_ops.torch_ops.torch_op(call, unit)
        if op is None or op.name != "binary_cross_entropy" or autocast_policy(op.name, device) != BANNED:
            return None
        if self.values.autocast_on(call, unit, *context) is not True:
            return None
        return Found(
            BANNED_LOSS,
            call,
            f"`{source_text(call)}` raises under {DTYPE} autocast on CUDA: binary cross-entropy is unsafe to autocast",
            'PyTorch refuses it ("torch.nn.functional.binary_cross_entropy and torch.nn.BCELoss are unsafe to autocast"): '
            "a sigmoid rounded to 0 or 1 in low precision makes its log infinite. Return logits and use "
            "`F.binary_cross_entropy_with_logits` (or `nn.BCEWithLogitsLoss`), which autocast runs in float32.",
            Lowered(call, unit),
        )

    # ---------------------------------------------------------------- constants out of range
    def _fill(self, site: Site, unit: CodeUnit, context) -> Optional[Found]:
        call: cst.Call = site.node  # type: ignore[assignment]
        dtype = context[1]
        target: Optional[cst.BaseExpression] = None
        values: List[cst.BaseExpression] = []
        if isinstance(call.func, cst.Attribute) and self.model.qualified(call.func) is None:
            target = call.func.value
            if site.name in _FILLS:
                position, keyword = _FILLS[site.name]
                value = _argument(call, position, keyword)
                values = [value] if value is not None else []
            else:  # a clamp's bounds
                values = [a.value for a in call.args if a.keyword is None or a.keyword.value in ("min", "max")]
        elif self.model.qualified(call.func) == "torch.full_like" and keyword_argument(call, "dtype") is None:
            target, value = _argument(call, 0, "input"), _argument(call, 1, "fill_value")
            values = [value] if value is not None else []
        elif self.model.qualified(call.func) == "torch.full":
            wanted = keyword_argument(call, "dtype")
            if isinstance(wanted, cst.Attribute) and wanted.attr.value == "dtype":
                target = wanted.value  # `torch.full(shape, -1e9, dtype=scores.dtype)`
                value = _argument(call, 1, "fill_value")
                values = [value] if value is not None else []
        elif self.model.qualified(call.func) in ("torch.clamp", "torch.clip"):
            target = _argument(call, 0, "input")
            values = [a.value for a in call.args[1:] if a.keyword is None or a.keyword.value in ("min", "max")]
        if target is None:
            return None
        for value in values:
            number = self.region_ops.probabilities.constant(value, unit)
            if number is None or not FORMATS[dtype].overflows(number):
                continue
            lowered = self.values.lowered(target, unit, *context)
            if lowered is None:
                return None
            what = source_text(call)
            return Found(
                OVERFLOWING_FILL,
                call,
                f"`{what}` raises under {DTYPE} autocast: {_holds(target, lowered, unit)}, and "
                f"`{source_text(value)}` does not fit in {DTYPE} (float16 stops at ±65504)",
                f'PyTorch refuses to write it ("value cannot be converted to type {_c10(dtype)} without overflow"). '
                + _range_fix(target, site.name),
                lowered,
            )
        return None

    def _where(self, site: Site, unit: CodeUnit, context) -> Optional[Found]:
        dtype = context[1]
        pairs: List[Tuple[cst.BaseExpression, cst.BaseExpression]] = []
        node = site.node
        if isinstance(node, cst.Assign):
            pairs = [(t.target.value, node.value) for t in node.targets if isinstance(t.target, cst.Subscript)]
            where = node.targets[0].target
        else:
            call: cst.Call = node  # type: ignore[assignment]
            where = call
            positional = [a.value for a in call.args if a.keyword is None and not a.star]
            if self.model.qualified(call.func) == "torch.where" and len(positional) == 3:
                pairs = [(positional[1], positional[2]), (positional[2], positional[1])]
            elif isinstance(call.func, cst.Attribute) and self.model.qualified(call.func) is None and len(positional) == 2:
                pairs = [(call.func.value, positional[1])]  # `x.where(mask, -1e9)`
        for target, value in pairs:
            number = self.region_ops.probabilities.constant(value, unit)
            if number is None or not FORMATS[dtype].rounds_to_infinity(number):
                continue
            lowered = self.values.lowered(target, unit, *context)
            if lowered is None:
                continue
            sign = "-inf" if number < 0 else "inf"
            return Found(
                OVERFLOWING_WHERE,
                where,
                f"`{source_text(node if isinstance(node, cst.Call) else node.targets[0].target)}{'' if isinstance(node, cst.Call) else ' = ' + source_text(value)}` "
                f"writes {sign}, not `{source_text(value)}`, under {DTYPE} autocast: {_holds(target, lowered, unit)}, and "
                f"`{source_text(value)}` does not fit in {DTYPE} (float16 stops at ±65504)",
                f"{DTYPE} rounds it to {sign} without a word: a row that is masked entirely is then NaN after a softmax "
                f"(with `{source_text(value)}` in float32 it is uniform), and `{sign} * 0` is NaN. "
                + _range_fix(target, "where"),
                lowered,
            )
        return None

    # ---------------------------------------------------------------- epsilons rounded away
    def _epsilon(self, site: Site, unit: CodeUnit, context) -> Optional[Found]:
        dtype = context[1]
        node = site.node
        guarded: Optional[cst.BaseExpression] = None
        sink = ""
        if isinstance(node, cst.BinaryOperation):
            if isinstance(node.operator, cst.Divide):
                guarded, sink = node.right, "division"
            else:
                exponent = self.region_ops.probabilities.constant(node.right, unit)
                if exponent is None or exponent >= 1 or exponent == 0:
                    return None
                guarded, sink = node.left, "power" if exponent < 0 else "root"
        elif isinstance(node, cst.Call):
            op = self.region_ops.torch_ops.torch_op(node, unit)
            if op is None or not op.inputs or (op.name not in LOG_OPS and op.name not in _SQRT_LIKE and op.name not in _ARC):
                return None
            if op.name in LOG_OPS and self.region_ops.probability(op.inputs[0], unit, op.name) is not None:
                return None  # a log of a sigmoid or softmax probability: AMP013's
            guarded, sink = op.inputs[0], op.name
        if guarded is None:
            return None
        guard = self._arc_guard(guarded, unit) if sink in _ARC else self._guard(guarded, unit)
        if guard is None:
            return None
        kind, protected, bound, number = guard
        if kind == "floor" and not FORMATS[dtype].rounds_to_zero(number):
            return None
        if kind == "ceiling" and (sink not in LOG_OPS and sink not in _ARC and sink != "division" or not FORMATS[dtype].rounds_to_one(number)):
            return None
        lowered = self.values.lowered(protected, unit, *context)
        if lowered is None:
            return None
        written = source_text(bound)
        if kind == "floor":
            return Found(
                ROUNDED_EPSILON,
                bound,
                f"`{written}` is 0 in {DTYPE}: it does not keep `{source_text(node)}` finite under {DTYPE} autocast, "
                f"where {_holds(protected, lowered, unit)}",
                f"{DTYPE}'s smallest positive value is {_tiny(dtype)}, so `{written}` adds or clamps to nothing: where "
                f"`{source_text(protected)}` is 0, the {_sink_words(sink)} is inf or NaN as if there were no epsilon. "
                f"Upcast before the guard (`{_atom(protected)}.float()`), or use an epsilon {DTYPE} holds "
                f"(1e-6 or more, where the result stays in range).",
                lowered,
            )
        return Found(
            ROUNDED_EPSILON,
            bound,
            f"`{written}` is {'-1.0' if (self.region_ops.probabilities.constant(bound, unit) or 0) < 0 else '1.0'} in {DTYPE}: the clamp does not keep `{source_text(node)}` finite "
            f"under {DTYPE} autocast, where {_holds(protected, lowered, unit)}",
            f"Just below 1, float16 is spaced 2**-11 and bfloat16 2**-8, so the clamped value still reaches 1.0"
            + (f", where the {_sink_words(sink)} is infinite" if sink in _ARC else f" and `1 - p` reaches 0: the {_sink_words(sink)} is inf or NaN")
            + f". Clamp in float32 (`{_atom(protected)}.float()`), or use a bound {DTYPE} keeps below 1 "
            f"(1 - 1e-3 holds in float16, 1 - 1e-2 in bfloat16).",
            lowered,
        )

    def _guard(self, expression: cst.BaseExpression, unit: CodeUnit, depth: int = 0):
        """What guards a sink's operand, seen through names, views and `1 - ...`: ("floor", the
        tensor guarded, the epsilon, its value) for `t + eps`, `t.clamp(min=eps)`,
        `t.clamp_min(eps)`; ("ceiling", the tensor, the bound, its value) for `1 - t.clamp(max=c)`."""
        if depth > 6:
            return None
        constant = self.region_ops.probabilities.constant
        node = expression
        if isinstance(node, cst.Name):
            value = self.region_ops.values.value_at(node, unit)
            return self._guard(value, unit, depth + 1) if value is not None else None
        if isinstance(node, cst.Subscript):
            return self._guard(node.value, unit, depth + 1)
        if isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute) and node.func.attr.value in _VIEWS:
            return self._guard(node.func.value, unit, depth + 1)
        if isinstance(node, cst.BinaryOperation) and isinstance(node.operator, cst.Add):
            for eps, other in ((node.right, node.left), (node.left, node.right)):
                number = constant(eps, unit)
                if number is not None and number > 0:
                    return ("floor", other, eps, number)
            return None
        if isinstance(node, cst.BinaryOperation) and isinstance(node.operator, cst.Subtract) and constant(node.left, unit) == 1.0:
            inner = self._clamp(node.right, unit, depth + 1)
            if inner is not None and inner[2] is not None:
                number = constant(inner[2], unit)
                if number is not None:
                    return ("ceiling", inner[0], inner[2], number)
            return None
        clamp = self._clamp(node, unit, depth)
        if clamp is not None and clamp[1] is not None:
            number = constant(clamp[1], unit)
            if number is not None and number > 0:
                return ("floor", clamp[0], clamp[1], number)
        return None

    def _arc_guard(self, expression: cst.BaseExpression, unit: CodeUnit):
        """("ceiling", the tensor, the bound, the bound's distance below 1 read as `1 - d`) of
        the clamp that keeps an arccosine's or arcsine's input inside (-1, 1), where a bound
        is a constant: `cos.clamp(-1 + eps, 1 - eps)`, the side nearer to +-1."""
        constant = self.region_ops.probabilities.constant
        clamp = self._clamp(expression, unit, 0)
        if clamp is None:
            return None
        tensor, low, high = clamp
        found = None
        for bound, sign in ((high, 1.0), (low, -1.0)):
            number = constant(bound, unit) if bound is not None else None
            if number is not None and 0 < sign * number < 1 and (found is None or sign * number > found[3]):
                found = ("ceiling", tensor, bound, sign * number)
        return found

    def _clamp(self, node: cst.BaseExpression, unit: CodeUnit, depth: int):
        """(the tensor clamped, its lower bound, its upper bound) of a clamp, through names."""
        if isinstance(node, cst.Name) and depth <= 6:
            value = self.region_ops.values.value_at(node, unit)
            return self._clamp(value, unit, depth + 1) if value is not None else None
        if not isinstance(node, cst.Call):
            return None
        name = node.func.attr.value if isinstance(node.func, cst.Attribute) else None
        qualified = self.model.qualified(node.func)
        if qualified in ("torch.clamp", "torch.clip", "torch.clamp_min"):
            tensor, rest, name = _argument(node, 0, "input"), node.args[1:], qualified.rsplit(".", 1)[-1]
        elif qualified is None and name in _CLAMPS:
            tensor, rest = node.func.value, node.args  # type: ignore[union-attr]
        else:
            return None
        low = next((a.value for a in rest if a.keyword is not None and a.keyword.value == "min"), None)
        high = next((a.value for a in rest if a.keyword is not None and a.keyword.value == "max"), None)
        positional = [a.value for a in rest if a.keyword is None]
        if name.startswith("clamp_max"):
            high = high or (positional[0] if positional else None)
        else:
            if low is None and positional:
                low = positional.pop(0)
            if high is None and positional and not name.startswith("clamp_min"):
                high = positional.pop(0)
        if tensor is None:
            return None
        return tensor, (low if low is not None and not _is_none(low) else None), (high if high is not None and not _is_none(high) else None)

    # ---------------------------------------------------------------- writes into float32
    def _write(self, site: Site, unit: CodeUnit, context) -> Optional[Found]:
        device = context[0]
        node = site.node
        if isinstance(node, cst.Assign):
            # Only an index that is a tensor or a list goes through `index_put_`; a slice or an
            # integer copies, casting (`buf[:n] = y`).
            targets = [t.target for t in node.targets if isinstance(t.target, cst.Subscript) and self._advanced_index(t.target, unit)]
            if not targets:
                return None
            buffer, source, quoted, where = targets[0].value, node.value, _SETITEM, targets[0]
            text = f"{source_text(targets[0])} = {source_text(node.value)}"
        else:
            call: cst.Call = node  # type: ignore[assignment]
            if not isinstance(call.func, cst.Attribute) or site.name not in _WRITES:
                return None
            if device == "cuda" and site.name in _PROMOTED_ON_CUDA and self.values.autocast_on(call, unit, *context):
                return None  # CUDA's autocast casts the source up to the destination's dtype
            qualified = self.model.qualified(call.func)
            position, keyword, quoted = _WRITES[site.name]
            if qualified is None:
                buffer, source = call.func.value, _argument(call, position, keyword)
            elif qualified == f"torch.{site.name}":
                buffer, source = _argument(call, 0, "input"), _argument(call, position + 1, keyword)
            else:
                return None
            where, text = call, source_text(call)
        if buffer is None or source is None or not self._float32(buffer, unit):
            return None
        lowered = self.values.lowered(source, unit, *context)
        if lowered is None:
            return None
        return Found(
            WRITE_INTO_FLOAT32,
            where,
            f"`{text}` raises under {DTYPE} autocast: {_holds(source, lowered, unit)}, and `{source_text(buffer)}` is float32",
            f'PyTorch requires one dtype there and raises ("{quoted}"; BFloat16 alike). '
            f"Cast the value to the destination's dtype (`{_atom(source)}.to({source_text(buffer)}.dtype)`), "
            f"which also keeps the accumulation in float32.",
            lowered,
        )

    def _advanced_index(self, target: cst.Subscript, unit: CodeUnit) -> bool:
        """Whether a subscript indexes with a tensor or a list, by what the code shows: a list
        written out, a comparison or a mask (`x > 0`, `~keep`), `torch.nonzero`, `torch.where`,
        `argsort`, `topk(...).indices`, or a name assigned one on the straight-line way."""
        return any(
            isinstance(element.slice, cst.Index) and self._tensor_like(element.slice.value, unit, 0) for element in target.slice
        )

    def _tensor_like(self, node: cst.BaseExpression, unit: CodeUnit, depth: int) -> bool:
        if depth > 4:
            return False
        if isinstance(node, cst.List) or isinstance(node, cst.Comparison):
            return True
        if isinstance(node, cst.UnaryOperation) and isinstance(node.operator, cst.BitInvert):
            return True
        if isinstance(node, cst.Name):
            value = self.region_ops.values.value_at(node, unit)
            return value is not None and self._tensor_like(value, unit, depth + 1)
        if isinstance(node, (cst.Subscript, cst.Attribute)):
            inner = node.value
            return isinstance(inner, cst.Call) and self._index_call(inner)
        if isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute) and node.func.attr.value in _VIEWS:
            return self._tensor_like(node.func.value, unit, depth + 1)  # `torch.nonzero(m).squeeze(-1)`
        return isinstance(node, cst.Call) and self._index_call(node)

    def _index_call(self, call: cst.Call) -> bool:
        name = call.func.attr.value if isinstance(call.func, cst.Attribute) else (dotted_name(call.func) or "").rsplit(".", 1)[-1]
        return name in _INDEX_CALLS

    def _float32(self, buffer: cst.BaseExpression, unit: CodeUnit, depth: int = 0) -> bool:
        """Whether a tensor is float32 by what the code shows: an explicit float32 tensor
        (`Float32Casts.evidently_float32`), or one built by `torch.zeros`, `ones`, `empty`,
        `rand` or `randn` without a dtype, in a file that does not change the default dtype."""
        if self.region_ops.evidently_float32(buffer, unit):
            return True
        if depth > 4:
            return False
        node = buffer
        if isinstance(node, cst.Subscript):
            return self._float32(node.value, unit, depth + 1)
        if isinstance(node, cst.Name):
            value = self.region_ops.values.value_at(node, unit)
            return value is not None and self._float32(value, unit, depth + 1)
        name = dotted_name(node)
        if isinstance(node, cst.Attribute) and name is not None and name.startswith("self.") and name.count(".") == 1:
            # `self.embed_avg`: every value the class gives it (assigned, or a buffer registered) is
            values = self.region_ops.casts.values_of(name, unit)
            return bool(values) and all(value is not node and self._float32(value, home, depth + 1) for value, home in values)
        if isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute) and node.func.attr.value in _VIEWS | {"to", "cuda"}:
            if node.func.attr.value == "to" and not all(self.region_ops.casts.device_like(a, unit) for a in node.args):
                return False
            return self._float32(node.func.value, unit, depth + 1)
        if isinstance(node, cst.Call) and self.model.qualified(node.func) in _DEFAULT_FLOAT:
            return keyword_argument(node, "dtype") is None and keyword_argument(node, "out") is None and not self._default_dtype_changed()
        return False

    def _default_dtype_changed(self) -> bool:
        if self._default_dtype_set is None:
            self._default_dtype_set = any(
                (dotted_name(record.node.func) or "").endswith(("set_default_dtype", "set_default_tensor_type")) for record in self.model.index.calls
            )
        return self._default_dtype_set


def _call_kind(name: str) -> str:
    if name in _FILLS or name in _CLAMPS or name in ("full_like", "full"):
        return "fill"
    if name == "where":
        return "where"
    if name in _WRITES:
        return "write"
    return "sink"


def _argument(call: cst.Call, position: int, keyword: str) -> Optional[cst.BaseExpression]:
    found = keyword_argument(call, keyword)
    if found is not None:
        return found
    positional = [a.value for a in call.args if a.keyword is None and not a.star]
    return positional[position] if position < len(positional) else None


def _is_none(node: cst.BaseExpression) -> bool:
    return isinstance(node, cst.Name) and node.value == "None"


def _holds(expression: cst.BaseExpression, lowered: Lowered, unit: CodeUnit) -> str:
    """How a message says a value is lowered: `` `scores` holds the float16 output of `q @ k.T` ``."""
    if expression is lowered.source:
        return f"`{source_text(expression)}` runs in {DTYPE}"
    where = "" if lowered.unit is unit else f" (in `{lowered.unit.name}`)"
    if isinstance(expression, (cst.Name, cst.Attribute)):
        return f"`{source_text(expression)}` holds the {DTYPE} output of `{source_text(lowered.source)}`{where}"
    return f"`{source_text(expression)}` is computed in {DTYPE} from `{source_text(lowered.source)}`{where}"


def _atom(expression: cst.BaseExpression) -> str:
    """An expression as code a method can be called on: `(attn @ v)`, `scores`."""
    text = source_text(expression)
    simple = isinstance(expression, (cst.Name, cst.Attribute, cst.Subscript, cst.Call)) or (isinstance(expression, cst.BaseExpression) and expression.lpar)
    return text if simple else f"({text})"


def _tiny(dtype: str) -> str:
    return f"{FORMATS[dtype].smallest_subnormal:.2g}"


def _c10(dtype: str) -> str:
    return "c10::Half" if dtype == "float16" else "c10::BFloat16"


def _range_fix(target: cst.BaseExpression, name: str) -> str:
    bound = "min" if name not in ("clamp_max", "clamp_max_") else "max"
    return (
        f"Write `torch.finfo({source_text(target)}.dtype).{bound}`, which fits whatever dtype autocast picks "
        f"(or a constant within float16's range, such as -1e4)."
    )


def _sink_words(sink: str) -> str:
    return {"division": "division", "power": "power", "root": "root's gradient", "sqrt": "square root's gradient",
            "rsqrt": "reciprocal square root", "reciprocal": "reciprocal", "acos": "arccosine's gradient",
            "asin": "arcsine's gradient"}.get(sink, "log")
