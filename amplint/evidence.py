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
example and case a rule flags carries the rule's marks (tests/test_precheck.py).

A file that a rule could match by text but not by marks is *deferred*, not dropped: its
imports are kept, and it is analysed after all when a linted module imports it or when it
imports one with a summary (`amplint.project`), since then another file's code decides.
"""

from __future__ import annotations

import ast
from typing import FrozenSet, Iterator, Optional, Set, Tuple

from amplint.semantic import vocabulary
from amplint.semantic.expressions import LOG_OPS, LOWER_PRECISION_OPS, names_of
from amplint.semantic.precision import DECAY_METHODS, STATE_METHODS

# The marks. Each names what the semantic layer could build from such code.
AUTOCAST = "autocast"  # an autocast region may be entered: the name `autocast` is used
GRAD_SCALER = "GradScaler"  # a GradScaler may be built
BACKWARD = "backward"  # a plain `x.backward()` / `torch.autograd.backward()`
FRAMEWORK_BACKWARD = "framework backward"  # `accelerator.backward(loss)`, `self.manual_backward(loss)`
STEP = "step"  # an optimizer's or a scaler's `step()`
SCALE = "scale"  # a loss may be scaled: a call named like scaling (`scaler.scale`, `scale_loss`)
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
OPTIMIZER = "optimizer"  # an optimizer may be built: `torch.optim.*`, `AdamW(...)`, `optimizer = ...`
AVERAGE = "average"  # an in-place decay: `e.mul_(d)`, `e.lerp_(p, w)`, `v *= d`

_CLIPS = frozenset({"clip_grad_norm_", "clip_grad_norm", "clip_grad_value_", "clip_grads_with_norm_"})
_UNSCALES = frozenset({"unscale_", "clip_gradients", "unscale_gradients"})
_GRAD_SCALERS = frozenset({"GradScaler", "ShardedGradScaler"})
# Parts of AVERAGE, not marks of their own.
_DECAY, _STATE = "decay", "parameters or state"
_PARTS = frozenset({_DECAY, _STATE})
_STATE_CALLS = frozenset({_STATE})
# The names the ops of `amplint.semantic.expressions` go by.
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
# (`amplint.semantic.exports`): a file with none of these exports no summary.
EVENTS = frozenset({BACKWARD, FRAMEWORK_BACKWARD, STEP, SCALE, UNSCALE, CLIP, GRADIENT, ZERO_GRAD, SCALER_UPDATE, GRAD_SCALER})


def marks(tree: ast.AST) -> FrozenSet[str]:
    """The marks of a module's CPython tree."""
    found: Set[str] = set()
    names: Set[str] = set()  # every name, attribute and imported name, once
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            _call(node, found)
        elif isinstance(node, ast.Attribute):
            names.add(node.attr)
        elif isinstance(node, ast.Name):
            names.add(node.id)
        elif isinstance(node, ast.alias):
            names.update(node.name.split("."))
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.update(node.module.split("."))
        elif isinstance(node, (ast.BinOp, ast.AugAssign)):
            if isinstance(node.op, ast.MatMult):
                found.add(PRODUCT)
            elif isinstance(node, ast.AugAssign) and isinstance(node.op, ast.Mult):
                found.add(_DECAY)  # `v *= decay`
    for name in names:
        mark = _NAMED.get(name)
        if mark is not None:
            found.add(mark)
        elif name == "optim" or name in vocabulary.OPTIMIZER_CLASSES or name.lower() in vocabulary.OPTIMIZER_FACTORIES:
            found.add(OPTIMIZER)
        elif vocabulary.looks_like_optimizer(name):
            found.add(OPTIMIZER)  # `optimizer = OPTIMIZERS[name](model.parameters())`
    if "grad" in names:
        found.add(GRADIENT)
    # An average decays what a loop over a module's parameters or state dict yields.
    if _DECAY in found and found & _STATE_CALLS:
        found.add(AVERAGE)
    return frozenset(found - _PARTS)


def _call(call: ast.Call, found: Set[str]) -> None:
    func = call.func
    if isinstance(func, ast.Attribute):
        method, receiver = func.attr, _dotted(func.value)
    elif isinstance(func, ast.Name):
        method, receiver = func.id, None
    else:
        return
    if "scale" in method.lower():
        found.add(SCALE)
    if method in _CLIPS:
        found.add(CLIP)
    if method in _UNSCALES or (method in ("clip_grad_norm_", "clip_grad_value_") and _framework_clip(receiver)):
        found.add(UNSCALE)
    if method == "grad":
        found.add(GRADIENT)
    if method in DECAY_METHODS:
        found.add(_DECAY)
    if method in STATE_METHODS:
        found.add(_STATE)
    if method == "zero_grad":
        found.add(ZERO_GRAD)
    elif method == "update" and receiver is not None and vocabulary.named_like_a_scaler(receiver):
        found.add(SCALER_UPDATE)  # a GradScaler built in the file gives GRAD_SCALER too
    if method == "manual_backward":
        found.add(FRAMEWORK_BACKWARD)
    elif method == "backward":
        # The semantic layer calls it a framework's backward when the receiver is named like
        # a framework or an optimizer, or when it takes a loss; anything else may be plain.
        if receiver is not None and (vocabulary.is_framework_receiver(receiver) or vocabulary.looks_like_optimizer(receiver)):
            found.add(FRAMEWORK_BACKWARD)
        else:
            found.add(BACKWARD)
            if call.args:
                found.add(FRAMEWORK_BACKWARD)  # `engine.backward(loss)` under another name
    elif method == "step" and isinstance(func, ast.Attribute):
        # A scheduler, an EMA or a progress bar never steps an optimizer; a scaler does.
        if receiver is None or not vocabulary.named_like_a_non_optimizer(receiver) or vocabulary.named_like_a_scaler(receiver):
            found.add(STEP)


def _framework_clip(receiver: Optional[str]) -> bool:
    """`accelerator.clip_grad_norm_(...)` may unscale; `torch.nn.utils.clip_grad_norm_` clips."""
    return receiver is not None and receiver.split(".")[0] not in ("torch", "nn") and receiver.rsplit(".", 1)[-1] != "utils"


def _dotted(node: ast.expr) -> Optional[str]:
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
    """Every module the file imports from, as `amplint.semantic.exports.imports_of` lists them
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
