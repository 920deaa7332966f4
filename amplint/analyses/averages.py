"""In-place averages: loops over a module's parameters or state dict that decay them in place
(`e.mul_(d).add_(p, alpha=1 - d)`, `v *= d`, `e.lerp_(p, 1 - d)`, timm's `ema_v.copy_(ema_v *
d + (1. - d) * model_v)`): an EMA's update, of a module some cast casts. And loops that assign
each parameter of a module anew (`p.data = p.data.float()`), after which its parameters may
have any dtype.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Collection, Iterator, List, Optional, Tuple

import libcst as cst

from amplint.analyses.module_casts import ModuleCast
from amplint.analyses.module_paths import ModulePath, ModulePaths, listed_owners, state_calls
from amplint.semantic import CodeUnit, Scope, dotted_name, drawn_from, iter_tree, names_bound
from amplint.semantic.pytorch.api import DECAY_METHODS


@dataclass(frozen=True, eq=False)
class InPlaceAverage:
    """A loop that decays a module's parameters in place: `for e, p in zip(ema.parameters(),
    model.parameters()): e.mul_(d).add_(p, alpha=1 - d)`."""

    loop: cst.For
    unit: CodeUnit
    module: ModulePath
    update: cst.CSTNode  # the decaying call or `*=`


def in_place_averages(finder: ModulePaths, casts: List[ModuleCast]) -> List[InPlaceAverage]:
    """The loops that decay in place the parameters of a module one of `casts` casts."""
    found: List[InPlaceAverage] = []
    # The containers of copied tensors (`ema_params`), last part of their names.
    copies = {cast.name.rsplit(".", 1)[-1] for cast in casts if cast.inherits is not None}
    for unit, loop, _ in finder.index.loops:
        # What a decayed variable is drawn from is part of the iterable: a loop over no
        # module's parameters or state (a data loader, a range) nor a container of copies
        # (`ema_params.items()`) averages nothing, and its body is not walked (nested loops
        # would walk it again and again).
        if not isinstance(loop, cst.For) or not (iterates_state(loop.iter) or _container(loop.iter) in copies):
            continue
        decay = decaying_update(loop.body)
        if decay is None:
            continue
        update, decayed = decay
        # Every module it can be (a helper's parameter is what each caller passes).
        for path in sorted(set(decayed_paths(finder, loop, decayed, unit.scope))):
            if any(cast.covers(path) for cast in casts):
                found.append(InPlaceAverage(loop, unit, path, update))
    return found


def reassigned(finder: ModulePaths) -> List[Tuple[cst.For, ModulePath]]:
    """The loops that assign each parameter of a module anew (`for p in ema.parameters():
    p.data = p.data.float()`), each with the module."""
    found: List[Tuple[cst.For, ModulePath]] = []
    for unit, loop, _ in finder.index.loops:
        if not isinstance(loop, cst.For) or not iterates_state(loop.iter):
            continue
        bound = names_bound(loop.target)
        if any(assigns_data_of(node, bound) for node in iter_tree(loop.body)):
            for path in sorted(set(finder.state_owners(loop.iter, unit.scope)) | listed_owners(finder, loop.iter, unit.scope)):
                found.append((loop, path))
    return found


def decayed_paths(finder: ModulePaths, loop: cst.For, decayed: cst.BaseExpression, scope: Scope) -> Iterator[ModulePath]:
    """What the tensor a loop decays belongs to: the module whose parameters or state the
    loop draws it from (`for e, p in zip(ema.parameters(), model.parameters())`), or the
    container it is taken from (`ema_params[name]`, `for e, p in zip(ema_list, ...)`, through
    a local alias `e = ema_params[name]`); nothing when it comes from elsewhere."""
    for _ in range(3):
        if isinstance(decayed, cst.Subscript):
            container = dotted_name(decayed.value)
            if container is not None:
                yield from finder.paths(container, scope)
            return
        name = dotted_name(decayed)
        if name is None:
            return
        root = name.split(".")[0]
        if root in names_bound(loop.target):
            source = drawn_from(loop, root)
            container = _container(source, full=True)
            if iterates_state(source):
                yield from finder.state_owners(source, scope)
            elif container is not None:
                yield from finder.paths(container, scope)  # `ema_list`, `ema_params.values()`
            return
        aliases = [b.value for b in finder.resolver.bindings(root, scope) if b.value is not None and b.value_scope is scope and b.kind == "assign"]
        if len(aliases) != 1 or root != name:
            return
        decayed = aliases[0]  # `e = ema_params[name]`, then `e.mul_(d)`


def _container(iterable: cst.BaseExpression, full: bool = False) -> Optional[str]:
    """The container a loop draws from: `ema_list`, `self.shadow`, `ema.values()`,
    `ema.items()` -> its name (the last part of it unless `full`)."""
    if isinstance(iterable, cst.Call) and isinstance(iterable.func, cst.Attribute) and iterable.func.attr.value in ("values", "items") and not iterable.args:
        iterable = iterable.func.value
    name = dotted_name(iterable)
    if name is None:
        return None
    return name if full else name.rsplit(".", 1)[-1]


def assigns_data_of(node: cst.CSTNode, names: Collection[str]) -> bool:
    """Whether `node` assigns a new tensor to one of `names`' `.data` (`p.data = p.data.float()`)."""
    if not isinstance(node, cst.Assign):
        return False
    for target in node.targets:
        name = dotted_name(target.target)
        if name is not None and name.endswith(".data") and name[: -len(".data")] in names:
            return True
    return False


def iterates_state(iterable: cst.BaseExpression) -> bool:
    return next(state_calls(iterable), None) is not None


def decaying_update(body: cst.CSTNode) -> Optional[Tuple[cst.CSTNode, cst.BaseExpression]]:
    """The first in-place decay in a loop body (`e.mul_(d)`, `v *= d`, `e.lerp_(p, w)`,
    `ema_params[name].mul_(d).add_(p, alpha=1 - d)`) and the tensor it decays (`e`,
    `ema_params[name]`; `.data`, `.detach()` left out)."""

    def descend(node: cst.CSTNode) -> bool:
        return not isinstance(node, (cst.FunctionDef, cst.ClassDef))

    for node in iter_tree(body, descend):
        if isinstance(node, cst.AugAssign) and isinstance(node.operator, cst.MultiplyAssign):
            return node, _decayed_tensor(node.target)
        if isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute) and node.func.attr.value in DECAY_METHODS:
            return node, _decayed_tensor(node.func.value)
        if isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute) and node.func.attr.value == "copy_" and len(node.args) == 1:
            # timm's `ema_v.copy_(ema_v * self.decay + (1. - self.decay) * model_v)`
            decayed = _decayed_tensor(node.func.value)
            if _scales(node.args[0].value, decayed):
                return node, decayed
    return None


def _scales(value: cst.BaseExpression, tensor: cst.BaseExpression) -> bool:
    """Whether `value` multiplies `tensor` by something: `ema_v * d + (1 - d) * model_v`."""
    name = dotted_name(tensor)
    if name is None:
        return False
    for node in iter_tree(value, lambda n: not isinstance(n, cst.Lambda)):
        if isinstance(node, cst.BinaryOperation) and isinstance(node.operator, cst.Multiply):
            if name in (dotted_name(node.left), dotted_name(node.right)):
                return True
    return False


def _decayed_tensor(receiver: cst.BaseExpression) -> cst.BaseExpression:
    """`e.data`, `e.detach()`, `ema[k].data` -> `e`, `ema[k]`."""
    while True:
        if isinstance(receiver, cst.Call) and isinstance(receiver.func, cst.Attribute):
            receiver = receiver.func.value  # `e.detach().mul_(d)`, `e.to(x).mul_(d)`
        elif isinstance(receiver, cst.Attribute) and receiver.attr.value == "data":
            receiver = receiver.value
        else:
            return receiver

