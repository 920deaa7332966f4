"""What a loss is computed from: the modules whose outputs a tensor is derived from in its
function (`out, aux = model(x)`, then `aux_loss = crit(aux, y)`), leaving out what
`.detach()`/`.item()` cut off, and whether an optimizer variable holds one of them (AMP001: a
plain backward beside a scaled one).
"""

from __future__ import annotations

from typing import FrozenSet, List, Set, Tuple

import libcst as cst

from amplint.analyses.module_paths import ModulePath
from amplint.analyses.precision_facts import FoundPrecision
from amplint.semantic import CodeUnit, children, dotted_name, roots


def trained_by(precision: FoundPrecision, optimizer: str) -> FrozenSet[ModulePath]:
    """The module paths whose parameters the optimizer variable with identity key
    `optimizer` holds, over every construction bound to it; empty when none is known
    (built by a helper, handed in, or holding nothing this analysis can name)."""
    found: Set[ModulePath] = set()
    for build in precision.optimizers:
        if build.name is not None and precision.model.resolver.identity(build.name, build.unit.scope) == optimizer:
            found.update(build.trains)
    return frozenset(found)


def modules_feeding(precision: FoundPrecision, tensor: cst.BaseExpression, unit: CodeUnit) -> FrozenSet[ModulePath]:
    """The module paths whose outputs `tensor`, read in `unit`, is computed from with
    gradients: the callees of the calls in it and in the values of the unit's variables it
    is derived from (`out, aux = model(x)`; `aux_loss = crit(aux, y)`) and the modules
    handed to them whole (`compute_loss(model, batch)`), through the aliases `paths` follows. What `.detach()`, `.item()` or `.data` cut off is not followed
    (`D(G(z).detach())` feeds D, not G); a call of a helper is its own path and names no
    module inside it."""
    found: Set[ModulePath] = set()
    seen: Set[str] = set()
    pending: List[cst.BaseExpression] = [tensor]
    while pending and len(seen) < 64:
        expression = pending.pop()
        calls, names, receivers = _graph_reads(expression)
        for func in calls:
            name = dotted_name(func)
            if name is not None:
                if name.endswith(".forward"):
                    name = name[: -len(".forward")]
                found |= precision.finder.paths(name, unit.scope)
        for name in names:
            if name != "self":
                # A module handed over whole: `compute_loss(model, batch)`, `l2(model)`.
                found |= precision.finder.paths(name, unit.scope)
        for name in names | receivers:
            if name in seen or name == "self":
                continue
            seen.add(name)
            for binding in precision.model.resolver.bindings(name, unit.scope):
                if binding.value_scope is not unit.scope:
                    continue
                value = binding.value if binding.value is not None else binding.source
                if binding.kind == "augassign" and isinstance(binding.node, cst.AugAssign):
                    value = binding.node.value
                if value is not None and binding.kind in ("assign", "augassign", "walrus"):
                    pending.append(value)
    return frozenset(found)


def trained_module_feeds(precision: FoundPrecision, tensor: cst.BaseExpression, unit: CodeUnit, optimizer: str) -> bool:
    """Whether `tensor` is computed from the outputs of a module whose parameters the
    optimizer `optimizer` (an identity key) holds: the optimizer's construction and the
    module's call must both be known. A module feeds a path it contains or sits in
    (`model.encoder(x)` for an optimizer of `model`, `model(x)` for one of `model.head`)."""
    trained = trained_by(precision, optimizer)
    if not trained:
        return False
    for root, rest in modules_feeding(precision, tensor, unit):
        for other_root, other_rest in trained:
            if root == other_root and (rest[: len(other_rest)] == other_rest or other_rest[: len(rest)] == rest):
                return True
    return False


# What cuts a tensor off the graph: `x.detach()`, `x.item()`, `x.data`.
_DETACHING = frozenset({"detach", "item", "tolist", "numpy"})


def _graph_reads(expression: cst.BaseExpression) -> Tuple[List[cst.BaseExpression], Set[str], Set[str]]:
    """The callees of the calls in `expression`, the variables it reads as values, and those
    it reads only as the receiver of a method (`h` of `h.pow(2)`, `model` of
    `model.encoder(x)`), leaving out what `.detach()` / `.item()` / `.data` take off the graph."""
    calls: List[cst.BaseExpression] = []
    names: Set[str] = set()
    receivers: Set[str] = set()

    def visit(node: cst.CSTNode, receiver: bool = False) -> None:
        if isinstance(node, cst.Call):
            func = node.func
            if isinstance(func, cst.Attribute) and func.attr.value in _DETACHING:
                return
            calls.append(func)
            if isinstance(func, cst.Attribute):
                visit(func.value, receiver=True)  # `model(x).logits.mean()`: the chain's receiver
            for arg in node.args:
                visit(arg.value)
            return
        if isinstance(node, cst.Attribute) and node.attr.value == "data":
            return
        if isinstance(node, (cst.Name, cst.Attribute)):
            name = dotted_name(node)
            if name is not None:
                (receivers if receiver else names).update(roots([name]))
                return
        if isinstance(node, cst.Lambda):
            return
        for child in children(node):
            visit(child)

    visit(expression)
    return calls, names, receivers - names
