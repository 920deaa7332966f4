"""What a file's code may do to mixed precision, read from the CPython tree the syntax check
already built: the second, finer pre-check before a LibCST parse.

The first pre-check (`engine.might_use_amp`) looks for words in the text; it lets through
every inference pipeline whose docstring says `torch.autocast` and every module that mentions
`GradScaler`. Most of those cannot hold a finding: every rule needs two things at once (a
plain `backward()` and a scaler's `step()`; an autocast region and an optimizer step) and
those files have one. This module lists what the code shows, as a set of *marks*, each one
a thing the semantic layer could find (`amplint.semantic.calls` classifies calls the same
way, with far more care), and each rule names the marks its findings need (`Rule.needs`).

Every mark errs on the side of "may": a call the semantic layer might classify as an event
gives its mark whatever it turns out to be, so a file without a mark cannot have the event.
Names decide nothing that the semantic layer would decide otherwise: `sched.step()` is not
a step there either (`vocabulary.named_like_a_non_optimizer`). A test checks that every
example and case a rule flags carries the rule's marks (tests/test_evidence.py).

A file that a rule could match by text but not by marks is *deferred*, not dropped: its
imports are kept, and it is analysed after all when a linted module imports it or when it
imports one with a summary (`amplint.project.link`), since then another file's code decides.
"""

from __future__ import annotations

import ast
import bisect
from typing import Dict, FrozenSet, Iterator, List, Optional, Set, Tuple, Union

from amplint.semantic.pytorch import frameworks, vocabulary
from amplint.semantic.pytorch.api import DECAY_METHODS, PARAMETER_METHODS, SAME_DTYPE_ATTRIBUTES, SAME_DTYPE_METHODS, STATE_METHODS
from amplint.semantic.pytorch.autocast_ops import BANNED_LOSS_NAMES, HAZARD_CALLS, LOG_OPS, LOWER_PRECISION_OPS, names_of

# The marks. Each names what the semantic layer could build from such code.
AUTOCAST = "autocast"  # an autocast region may be entered: the name `autocast` is used
GRAD_SCALER = "GradScaler"  # a GradScaler may be built
BACKWARD = "backward"  # a plain `x.backward()` / `torch.autograd.backward()`
FRAMEWORK_BACKWARD = "framework backward"  # `accelerator.backward(loss)`, `self.manual_backward(loss)`
STEP = "step"  # an optimizer's or a scaler's `step()`
SCALE = "scale"  # a loss may be scaled: a call named like scaling (`scaler.scale`, `scale_loss`)
SCALE_CALL = "scale call"  # a `.scale(...)` call: all a scaler's scale event can be (SCALE is wider)
SCALED_VALUE = "scaled value"  # a `.scale(...)` call whose value is kept, not `.backward()`-ed where it is made
UNSCALE = "unscale"  # `scaler.unscale_(opt)`, a framework's unscaling clip
CLIP = "clip"  # `clip_grad_norm_` and friends
GRADIENT = "gradient"  # `p.grad` read, `torch.autograd.grad(...)`
FLOAT32_CAST = "float32 cast"  # `.float()`, `torch.float32`, `torch.float`
PRODUCT = "product"  # `@`, `matmul`, `F.linear`, `conv2d`: an op autocast runs in low precision
LOG = "log"  # `torch.log`, `.log1p()`
PROBABILITY = "probability"  # `sigmoid`, `softmax`
BCE = "bce"  # `binary_cross_entropy`, `BCELoss`
ZERO_GRAD = "zero_grad"  # `optimizer.zero_grad()`
SCALER_UPDATE = "scaler update"  # `scaler.update()`
HALF = "half"  # `.half()`, `torch.float16`, `torch.half`
OPTIMIZER = "optimizer"  # an optimizer may be built: `torch.optim.*`, `AdamW(...)`, `opt = OPTS[n](m.parameters())`
AVERAGE = "average"  # a loop over parameters or a state dict decays them in place: `e.mul_(d)`, `v *= d`
AUTOCAST_OBJECT = "autocast object"  # an `autocast(...)` call that is no `with` item or decorator of its own
FRAMEWORK_OBJECT = "framework object"  # `Accelerator(...)`, `TrainingArguments(...)`: a function may return one
# A function a `forward` runs (an `nn.Module`'s may be one) has a matrix product with an operand
# that may be a float32 cast (`x.float()`, `x.to(torch.float32)`, `t.type_as(self.inv_freq)`):
# a float32 island its caller's autocast may undo (`RegionOps.ops_under_callers_autocast`).
MODULE_ISLAND = "module island"
# A value autocast lowers (a product) may meet a float16 hazard: a call of `HAZARD_CALLS`
# (`masked_fill`, `where`, `sqrt`, `index_add_`), a division or a subscript assignment
# (`amplint.analyses.hazard_sites`).
FLOAT16_HAZARD = "float16 hazard"  # ... or a binary cross-entropy CUDA's autocast refuses

# With the wrappers of one the user's code owns (timm's NativeScaler).
_GRAD_SCALERS = frozenset({"GradScaler", "ShardedGradScaler"}) | frameworks.OWNED_SCALER_CLASSES
# Parts of OPTIMIZER, not marks of their own: a name like an optimizer's, and a module's parameters.
_NAMED_LIKE_OPTIMIZER, _PARAMETERS = "named like an optimizer", "parameters"
_PARTS = frozenset({_NAMED_LIKE_OPTIMIZER, _PARAMETERS})
# What calling a name gives, whatever it is called on.
_CALLED = {
    **{name: (CLIP,) for name in ("clip_grad_norm_", "clip_grad_norm", "clip_grad_value_", "clip_grads_with_norm_")},
    **{name: (UNSCALE,) for name in ("unscale_", "clip_gradients", "unscale_gradients")},
    **{name: (_PARAMETERS,) for name in PARAMETER_METHODS},
    "grad": (GRADIENT,),
    "scale": (SCALE_CALL,),
    "zero_grad": (ZERO_GRAD,),
    "manual_backward": (FRAMEWORK_BACKWARD,),
    # A training loop the framework runs itself: its autocast and its backward.
    **{name: (AUTOCAST, BACKWARD) for name in frameworks.LOOP_BUILDERS},
    **{name: (FRAMEWORK_OBJECT,) for name in frameworks.FACTORY_CONSTRUCTORS},
}
# Calls whose marks depend on what they are called on.
_BY_RECEIVER = frozenset({"backward", "step", "update", "clip_grad_norm_", "clip_grad_value_"})
# The names the ops of `amplint.analyses.region_ops` go by.
_NAMED = {
    **{name: PRODUCT for name in names_of(LOWER_PRECISION_OPS)},
    **{name: LOG for name in names_of(LOG_OPS)},
    **{name: PROBABILITY for name in names_of({"sigmoid", "softmax"})},
    **{name: BCE for name in names_of({"binary_cross_entropy"})},
    "autocast": AUTOCAST,
    **{name: GRAD_SCALER for name in _GRAD_SCALERS},
    "float": FLOAT32_CAST,
    "float32": FLOAT32_CAST,
    "half": HALF,
    "float16": HALF,
}

Needs = Tuple[FrozenSet[str], ...]
# What a function may do that the semantic layer exports for the modules that import it
# (`amplint.semantic.foreign`): a file with none of these exports no summary.
# (`scale_lora_layers(...)` in every diffusers pipeline is SCALE, never an event.)
# A framework object a function builds may be what it returns (`build_accelerator(cfg)`).
EVENTS = frozenset({BACKWARD, FRAMEWORK_BACKWARD, STEP, SCALE_CALL, UNSCALE, CLIP, GRADIENT, ZERO_GRAD, SCALER_UPDATE, GRAD_SCALER, FRAMEWORK_OBJECT})
# ... and what a fact family exports (`amplint.analyses.EXPORTING`): a class whose method
# decays a copy in place (`Precision.export`), and a function with a float16 hazard
# (`Float16Hazards.export`, for the project's ambient pass). A file with none of these exports no summary
# but its constants (`project.summary._constants`: `AMP_DTYPE = torch.float16`), for which it is
# analysed only where an importer names one (`project.imported_deferred`).
EXPORTS = EVENTS | frozenset({AVERAGE, FLOAT16_HAZARD})


def marks(tree: ast.AST) -> FrozenSet[str]:
    """The marks of a module's CPython tree."""
    found: Set[str] = set()
    names: Set[str] = set()  # every name, attribute and imported name, once
    methods: Set[str] = set()  # every name called, once
    receivers: List[Tuple[str, Optional[str], ast.Call]] = []  # calls whose receiver decides
    autocasts: List[ast.Call] = []  # `autocast(...)` calls
    entered: Set[int] = set()  # `with` items and decorators: entered where they are written
    hooks = False  # a method named like a hook a framework runs under its own autocast
    forward = False  # a function named `forward` (a module's, at any depth)
    functions: List[ast.AST] = []  # every function, for `_island`
    products: List[int] = []  # the lines of `a @ b` and of calls named like a product
    builds = False  # a call that builds that framework and sets its precision
    scale_calls: List[int] = []  # `x.scale(...)` calls
    backwarded: Set[int] = set()  # calls whose value `.backward()` is called on where they are made
    writes = False  # a division or a subscript assignment: where a float16 hazard may be
    for node in _walk(tree):
        kind = type(node)
        if kind is ast.Name:
            names.add(node.id)  # type: ignore[attr-defined]
        elif kind is ast.Attribute:
            names.add(node.attr)  # type: ignore[attr-defined]
        elif kind is ast.Call:
            called = _called(node, methods, receivers)  # type: ignore[arg-type]
            func = node.func  # type: ignore[attr-defined]
            if type(func) is ast.Attribute and func.attr == "scale":
                scale_calls.append(id(node))
            elif type(func) is ast.Attribute and func.attr == "backward" and type(func.value) is ast.Call:
                backwarded.add(id(func.value))
            if called == "autocast":
                autocasts.append(node)  # type: ignore[arg-type]
            elif called in _PRODUCT_NAMES:
                products.append(node.lineno)  # type: ignore[attr-defined]
            elif called in frameworks.AUTOCAST_HOOK_BUILDERS:
                keyword = frameworks.AUTOCAST_HOOK_BUILDERS[called]
                # `L.Trainer(precision=...)`: a precision the file may resolve.
                builds = builds or any(k.arg == keyword for k in node.keywords)  # type: ignore[attr-defined]
        elif kind is ast.With or kind is ast.AsyncWith:
            entered.update(id(item.context_expr) for item in node.items)  # type: ignore[attr-defined]
        elif kind is ast.FunctionDef or kind is ast.AsyncFunctionDef or kind is ast.ClassDef:
            entered.update(id(decorator) for decorator in node.decorator_list)  # type: ignore[attr-defined]
            if kind is not ast.ClassDef:
                functions.append(node)
                forward = forward or node.name == "forward"  # type: ignore[attr-defined]
            if node.name in frameworks.SCALED_GRADIENT_HOOKS:  # type: ignore[attr-defined]
                found.add(FRAMEWORK_BACKWARD)  # Lightning's `on_after_backward`: after its scaled backward
            elif node.name in frameworks.STEPPED_AFTER_HOOKS:  # type: ignore[attr-defined]
                found.add(STEP)  # a Trainer's `training_step`: the Trainer steps after it
            if node.name in frameworks.AUTOCAST_HOOKS:  # type: ignore[attr-defined]
                hooks = True  # a LightningModule's `training_step`: may run under the Trainer's autocast
        elif kind is ast.alias:
            names.update(node.name.split("."))  # type: ignore[attr-defined]
            if node.asname is not None and node.name.endswith("autocast"):  # type: ignore[attr-defined]
                found.add(AUTOCAST_OBJECT)  # `from torch.cuda.amp import autocast as ac`: its calls go by another name
        elif kind is ast.ImportFrom and node.module:  # type: ignore[attr-defined]
            names.update(node.module.split("."))  # type: ignore[attr-defined]
        elif kind is ast.BinOp:
            if type(node.op) is ast.MatMult:  # type: ignore[attr-defined]
                found.add(PRODUCT)
                products.append(node.lineno)  # type: ignore[attr-defined]
            elif type(node.op) is ast.Div or type(node.op) is ast.Pow:  # type: ignore[attr-defined]
                writes = True
        elif kind is ast.Assign:
            writes = writes or any(type(target) is ast.Subscript for target in node.targets)  # type: ignore[attr-defined]
        elif kind is ast.For or kind is ast.AsyncFor:
            if _averages(node):  # type: ignore[arg-type]
                found.add(AVERAGE)
    for name in names:
        mark = _NAMED.get(name)
        if mark is not None:
            found.add(mark)
        elif name == "optim" or name in vocabulary.OPTIMIZER_CLASSES or name.lower() in vocabulary.OPTIMIZER_FACTORIES:
            found.add(OPTIMIZER)
        elif "opt" in name.lower() and _NAMED_LIKE_OPTIMIZER not in found and vocabulary.looks_like_optimizer(name):
            found.add(_NAMED_LIKE_OPTIMIZER)  # (every optimizer-like name has "opt" in it)
    if "grad" in names:
        found.add(GRADIENT)
    if hooks and builds and names & frameworks.AUTOCAST_HOOK_BASES:
        found.add(AUTOCAST)  # the class, its hook and the framework that runs it, in one file
    for method in methods:
        found.update(_CALLED.get(method, ()))
        if "scale" in method.lower():
            found.add(SCALE)  # `scaler.scale(loss)`, `self.scale_loss(loss)`: named like scaling
            if vocabulary.named_like_a_scaler(method):
                found.update((STEP, FRAMEWORK_BACKWARD))  # timm's `loss_scaler(loss, optimizer)`: backward and step
    for method, receiver, call in receivers:
        _by_receiver(method, receiver, call, found)
    if any(call not in backwarded for call in scale_calls):
        found.add(SCALED_VALUE)  # `loss = scaler.scale(loss)`, `print(scaler.scale(loss))`
    if PRODUCT in found and (writes or not methods.isdisjoint(HAZARD_CALLS)) or not methods.isdisjoint(BANNED_LOSS_NAMES):
        found.add(FLOAT16_HAZARD)
    if forward and products and FLOAT32_CAST in found and _island(functions, products):
        found.add(MODULE_ISLAND)
    if any(id(call) not in entered for call in autocasts):
        found.add(AUTOCAST_OBJECT)
    # `optimizer = OPTIMIZERS[name](model.parameters())`: built by a call the file does not name.
    if _NAMED_LIKE_OPTIMIZER in found and _PARAMETERS in found:
        found.add(OPTIMIZER)
    return frozenset(found - _PARTS)


_FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef)
# Calls that cast to a dtype or a tensor's dtype they are given (`_Island.casts`).
_DTYPE_CASTS = frozenset({"to", "type"})
_PRODUCT_NAMES = frozenset(name for name, mark in _NAMED.items() if mark == PRODUCT)


def _island(functions: List[ast.AST], products: List[int]) -> bool:
    """Whether a function that a `forward` runs (itself, or one it calls by name, transitively:
    `self._attn(...)`, `rope(...)`) has a matrix product (`@`, or a call of one: `matmul`,
    `einsum`, `F.linear`) with an operand that may be a float32 cast (`_Island`). Only the
    functions whose lines hold one of `products` (the lines of the file's products) are read,
    and not one an autocast decorates (`@torch.autocast("cuda", enabled=False)`)."""
    lines = sorted(products)
    islands = []
    for function in functions:
        first = bisect.bisect_left(lines, function.lineno)  # type: ignore[attr-defined]
        if first == len(lines) or lines[first] > function.end_lineno:  # type: ignore[attr-defined]
            continue
        if any(_names_autocast(decorator) for decorator in function.decorator_list):  # type: ignore[attr-defined]
            continue
        if _Island(function).block(function.body, frozenset()):  # type: ignore[attr-defined]
            islands.append(function)
    if not islands:
        return False
    by_name: Dict[str, List[ast.AST]] = {}
    for function in functions:
        by_name.setdefault(function.name, []).append(function)  # type: ignore[attr-defined]
    pending = list(by_name.get("forward", ()))
    reached = {id(function) for function in pending}
    while pending:
        for node in _walk(pending.pop()):
            if type(node) is ast.Call:
                for callee in by_name.get(_method(node) or "", ()):  # type: ignore[arg-type]
                    if id(callee) not in reached:
                        reached.add(id(callee))
                        pending.append(callee)
    return any(id(function) in reached for function in islands)


_BLOCKS = ("body", "orelse", "finalbody", "handlers", "cases")


class _Island:
    """One function's float32 islands, as `Float32Casts.float32_cast` could see them, erring on
    "may": an operand that is a call that may cast (`.float()`, `.to(torch.float32)`, `.type_as(t)`
    of a tensor that may be float32), or a name a statement of a block around the product
    assigns one (`inv = self.inv_freq.float()`, then `inv @ pos`; not `if upcast: q =
    q.float()`, which `StraightLineValues.value_at` does not take as certain either), seen through
    views (`.transpose()`, `[...]`, `.T`), `.to(device)`, signs and arithmetic."""

    def __init__(self, function: ast.AST) -> None:
        # What the function assigns each name: a dtype or tensor named in a cast is known
        # by it (`dtype = x.dtype` is no float32).
        self.assigned: Dict[str, List[ast.AST]] = {}
        for node in _walk(function):
            if type(node) is ast.Assign:
                for target in node.targets:  # type: ignore[attr-defined]
                    if type(target) is ast.Name:
                        self.assigned.setdefault(target.id, []).append(node.value)  # type: ignore[attr-defined]
            elif type(node) is ast.AnnAssign and node.value is not None and type(node.target) is ast.Name:  # type: ignore[attr-defined]
                self.assigned.setdefault(node.target.id, []).append(node.value)  # type: ignore[attr-defined]

    def block(self, statements: List[ast.stmt], visible: FrozenSet[str]) -> bool:
        cast = set(visible)
        for _ in range(2):  # `a = x.float()`, `b = a.transpose(1, 2)`: two steps of names
            for statement in statements:
                kind = type(statement)
                if kind is ast.Assign and self.holds(statement.value, cast):  # type: ignore[attr-defined]
                    cast.update(t.id for t in statement.targets if type(t) is ast.Name)  # type: ignore[attr-defined]
                elif kind is ast.AnnAssign and statement.value is not None and type(statement.target) is ast.Name and self.holds(statement.value, cast):  # type: ignore[attr-defined]
                    cast.add(statement.target.id)  # type: ignore[attr-defined]
        seen = frozenset(cast)
        for statement in statements:
            kind = type(statement)
            if kind in _FUNCTIONS or kind is ast.ClassDef:
                continue  # a function of its own
            if (kind is ast.With or kind is ast.AsyncWith) and any(_names_autocast(item.context_expr) for item in statement.items):  # type: ignore[attr-defined]
                continue  # an autocast of the file's own: the AUTOCAST mark's, on or off
            nested: List[ast.AST] = []
            for name, value in ast.iter_fields(statement):
                if name in _BLOCKS and type(value) is list:
                    nested.extend(value)
                elif isinstance(value, ast.AST):
                    if self.product(value, seen):
                        return True
                elif type(value) is list:
                    if any(isinstance(item, ast.AST) and self.product(item, seen) for item in value):
                        return True
            for inner in nested:
                body = inner.body if type(inner) in (ast.ExceptHandler, ast.match_case) else [inner]  # type: ignore[attr-defined]
                if self.block(body, seen):
                    return True
        return False

    def product(self, expression: ast.AST, cast: FrozenSet[str]) -> bool:
        for node in _walk(expression):
            kind = type(node)
            if kind is ast.BinOp and type(node.op) is ast.MatMult:  # type: ignore[attr-defined]
                operands: List[ast.AST] = [node.left, node.right]  # type: ignore[attr-defined]
            elif kind is ast.Call and _method(node) in _PRODUCT_NAMES:  # type: ignore[arg-type]
                operands = [*node.args, *(k.value for k in node.keywords)]  # type: ignore[attr-defined]
                if type(node.func) is ast.Attribute:  # type: ignore[attr-defined]
                    operands.append(node.func.value)  # `a.float().matmul(b)`  # type: ignore[attr-defined]
            else:
                continue
            if any(self.holds(operand, cast) for operand in operands):
                return True
        return False

    def holds(self, node: ast.AST, cast: Union[Set[str], FrozenSet[str]], depth: int = 0) -> bool:
        kind = type(node)
        if depth > 8:
            return False
        if kind is ast.Name:
            return node.id in cast  # type: ignore[attr-defined]
        if kind is ast.Call:
            if self.casts(node, cast):  # type: ignore[arg-type]
                return True
            func = node.func  # type: ignore[attr-defined]
            method = _method(node)  # type: ignore[arg-type]
            return type(func) is ast.Attribute and (method in SAME_DTYPE_METHODS or method in _DTYPE_CASTS) and self.holds(func.value, cast, depth + 1)
        if kind is ast.Subscript:
            return self.holds(node.value, cast, depth + 1)  # type: ignore[attr-defined]
        if kind is ast.Attribute:
            return node.attr in SAME_DTYPE_ATTRIBUTES and self.holds(node.value, cast, depth + 1)  # type: ignore[attr-defined]
        if kind is ast.UnaryOp:
            return self.holds(node.operand, cast, depth + 1)  # type: ignore[attr-defined]
        if kind is ast.BinOp:
            return self.holds(node.left, cast, depth + 1) or self.holds(node.right, cast, depth + 1)  # type: ignore[attr-defined]
        if kind is ast.List or kind is ast.Tuple:  # `einsum("ij,jk->ik", [a.float(), b.float()])`
            return any(self.holds(element, cast, depth + 1) for element in node.elts)  # type: ignore[attr-defined]
        return False

    def casts(self, call: ast.Call, cast: Union[Set[str], FrozenSet[str]]) -> bool:
        """Whether a call may cast to float32: `.float()`; `.type_as(t)`, `.to(t)`, `.type(t)`
        and `.to(dtype=t)` for a `t` that may be float32 (not `x.dtype`, not a device)."""
        method = _method(call)
        if method == "float":
            return True
        if method == "type_as":
            return any(self._may_be_float32(arg, cast) for arg in call.args)
        if method not in _DTYPE_CASTS:
            return False
        return any(self._may_be_float32(value, cast) for value in [*call.args, *(k.value for k in call.keywords if k.arg == "dtype")])

    def _may_be_float32(self, value: ast.AST, cast: Union[Set[str], FrozenSet[str]]) -> bool:
        kind = type(value)
        if kind is ast.Attribute:
            # `torch.float32`, and `self.inv_freq`: a buffer may have been built float32.
            return value.attr in ("float32", "float") or (type(value.value) is ast.Name and value.value.id == "self")  # type: ignore[attr-defined]
        if kind is ast.Name:
            name = value.id  # type: ignore[attr-defined]
            if name in cast:
                return True
            values = self.assigned.get(name)
            if values is None:  # a parameter, a module's name (`F32 = torch.float32`)
                return "device" not in name
            return any(_mentions_float32(v) for v in values)
        return _mentions_float32(value)


def _mentions_float32(expression: ast.AST) -> bool:
    """`torch.float32`, `torch.float`, `x.float()`, `dtype=torch.float32` anywhere in it."""
    return any(
        (type(n) is ast.Attribute and n.attr in ("float32", "float")) or (type(n) is ast.Name and n.id == "float32")  # type: ignore[attr-defined]
        for n in _walk(expression)
    )


def _names_autocast(expression: ast.AST) -> bool:
    """`torch.autocast(...)`, `maybe_autocast(..., enabled=False)`: a call named like autocast."""
    return type(expression) is ast.Call and (_method(expression) or "").endswith("autocast")  # type: ignore[arg-type]


def _averages(loop: Union[ast.For, ast.AsyncFor]) -> bool:
    """A loop over a module's parameters or state dict (`for e, p in zip(ema.parameters(),
    ...)`) whose body decays in place (`e.mul_(d)`, `e.lerp_(p, w)`, `v *= d`)."""
    if not any(type(node) is ast.Call and _method(node) in STATE_METHODS for node in ast.walk(loop.iter)):
        return False
    return any(
        (type(node) is ast.AugAssign and type(node.op) is ast.Mult)
        or (type(node) is ast.Call and (_method(node) in DECAY_METHODS or _copies_a_decay(node)))  # type: ignore[arg-type]
        for statement in loop.body
        for node in ast.walk(statement)
    )


def _copies_a_decay(call: ast.Call) -> bool:
    """`ema_v.copy_(ema_v * d + (1 - d) * model_v)`: a copy of a product into a tensor (a "may":
    the analysis asks that the product be of the tensor itself)."""
    if _method(call) != "copy_" or len(call.args) != 1:
        return False
    return any(type(node) is ast.BinOp and type(node.op) is ast.Mult for node in ast.walk(call.args[0]))  # type: ignore[attr-defined]


def _method(call: ast.Call) -> Optional[str]:
    func = call.func
    return func.attr if type(func) is ast.Attribute else func.id if type(func) is ast.Name else None  # type: ignore[attr-defined]


def _walk(tree: ast.AST) -> Iterator[ast.AST]:
    """Every node, as `ast.walk` yields them (in another order), without the `Load`/`Store`
    context of each name and the literal fields: a third of the work on real code."""
    stack = [tree]
    fields = _CHILD_FIELDS
    while stack:
        node = stack.pop()
        yield node
        kind = type(node)
        names = fields.get(kind)
        if names is None:
            names = fields[kind] = tuple(name for name in kind._fields if name not in _NOT_CHILDREN)
        for name in names:
            value = getattr(node, name, None)
            if type(value) is list:
                stack.extend(item for item in value if isinstance(item, ast.AST))
            elif isinstance(value, ast.AST):
                stack.append(value)


# Fields that never hold a node the marks need: a name's `Load`/`Store`, strings and numbers.
_NOT_CHILDREN = frozenset({"ctx", "id", "attr", "arg", "name", "asname", "module", "level", "type_comment", "kind", "conversion", "is_async", "simple"})
_CHILD_FIELDS: Dict[type, Tuple[str, ...]] = {ast.Constant: ()}


def _called(call: ast.Call, methods: Set[str], receivers: List[Tuple[str, Optional[str], ast.Call]]) -> Optional[str]:
    """Records the name a call calls (`scaler.step(...)` -> step), and returns it."""
    method = _method(call)
    if method is None:
        return None
    methods.add(method)
    if method in _BY_RECEIVER:
        func = call.func
        receivers.append((method, dotted(func.value) if type(func) is ast.Attribute else None, call))  # type: ignore[attr-defined]
    return method


def _by_receiver(method: str, receiver: Optional[str], call: ast.Call, found: Set[str]) -> None:
    """The marks of a call the semantic layer classifies by what it is called on."""
    if method in ("clip_grad_norm_", "clip_grad_value_"):
        if _framework_clip(receiver):
            found.add(UNSCALE)
    elif method == "update":
        if receiver is not None and vocabulary.named_like_a_scaler(receiver):
            found.add(SCALER_UPDATE)  # a GradScaler built in the file gives GRAD_SCALER too
    elif method == "backward":
        # The semantic layer calls it a framework's backward when the receiver is named like
        # a framework or an optimizer, or when it takes a loss; anything else may be plain.
        if receiver is not None and (vocabulary.is_framework_receiver(receiver) or vocabulary.looks_like_optimizer(receiver)):
            found.add(FRAMEWORK_BACKWARD)
        else:
            found.add(BACKWARD)
            if call.args:
                found.add(FRAMEWORK_BACKWARD)  # `engine.backward(loss)` under another name
    elif method == "step" and type(call.func) is ast.Attribute:
        # A scheduler, an EMA or a progress bar never steps an optimizer; a scaler does.
        if receiver is None or not vocabulary.named_like_a_non_optimizer(receiver) or vocabulary.named_like_a_scaler(receiver):
            found.add(STEP)


def _framework_clip(receiver: Optional[str]) -> bool:
    """`accelerator.clip_grad_norm_(...)` may unscale; `torch.nn.utils.clip_grad_norm_` clips."""
    return receiver is not None and receiver.split(".")[0] not in ("torch", "nn") and receiver.rsplit(".", 1)[-1] != "utils"


def dotted(node: ast.expr) -> Optional[str]:
    """`a.b.c` of a CPython name or attribute chain; None for anything else."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    parts.append(node.id)
    return ".".join(reversed(parts))


def satisfied(needs: Needs, found: FrozenSet[str]) -> bool:
    """Whether `found` has one mark of each group of `needs` (no groups: always)."""
    return all(group & found for group in needs)


def imports(tree: ast.AST) -> Tuple[Tuple[str, int], ...]:
    """Every module the file imports from, as `amplint.semantic.foreign.imports_of` lists them
    from the LibCST tree: (dotted name, relative level), and for `from pkg import utils`
    both `pkg` and `pkg.utils`."""
    found: Set[Tuple[str, int]] = set()
    for node in _statements(tree):
        if isinstance(node, ast.ImportFrom):
            if any(alias.name == "*" for alias in node.names):
                continue  # binds no name the semantic layer can follow into the module
            module = node.module or ""
            found.add((module, node.level))
            for alias in node.names:
                found.add((f"{module}.{alias.name}" if module else alias.name, node.level))
        elif isinstance(node, ast.Import):
            for alias in node.names:
                found.add((alias.name, 0))
    return tuple(sorted(found))


def _statements(tree: ast.AST) -> Iterator[ast.stmt]:
    """Every statement, at any depth, without walking expressions."""
    stack = list(getattr(tree, "body", ()))
    while stack:
        node = stack.pop()
        yield node
        for field in ("body", "orelse", "finalbody", "handlers", "cases"):
            stack.extend(getattr(node, field, ()) or ())
