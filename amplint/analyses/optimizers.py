"""Optimizers and what they train: every construction of an optimizer (`torch.optim.*`, the
classes of `vocabulary.OPTIMIZER_CLASSES`, an `optimizer_class` variable bound to them, or a
call named like an optimizer that is handed `.parameters()`), the modules whose parameters it
holds (`Adam(model.parameters())`, param groups, a `params` list filled in a loop over
`model.named_parameters()`, `chain(unet.parameters(), te.parameters()) if train_te else
unet.parameters()`), each with the branch conditions under which it holds them, and the call
that may keep float32 master weights for it, if any (apex's `FP16_Optimizer(opt)`, `model, opt
= amp.initialize(...)`, `deepspeed.initialize`; not accelerate's `prepare`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, FrozenSet, List, Optional, Set, Tuple

import libcst as cst

from amplint.analyses.module_paths import ModulePath, ModulePaths, guard_facts
from amplint.semantic import Assumption, Binding, CallRecord, CodeUnit, Scope, assumptions, children, dotted_name, iter_tree, split_args
from amplint.semantic.pytorch import vocabulary
from amplint.semantic.pytorch.api import OPTIMIZER_MODULE_PREFIXES, PARAMETER_METHODS

_MAX_DEPTH = 10
# `accelerator.prepare(...)`, `fabric.setup(...)`: frameworks that keep no float32 master copy.
_FRAMEWORK_PREPARE = frozenset({"prepare", "setup", "setup_optimizers"})


@dataclass(frozen=True, eq=False)
class OptimizerBuild:
    """One construction of an optimizer and the modules whose parameters it holds."""

    node: cst.Call
    record: CallRecord
    name: Optional[str]  # the variable it is bound to, as written; None when not bound
    # Each module path whose parameters it holds, with the conditions under which it holds
    # them (a branch of `chain(a, b) if train_b else a`).
    trains: Dict[ModulePath, Tuple[FrozenSet[Assumption], ...]]
    facts: FrozenSet[Assumption]  # the branch conditions it is built under
    # A call that may keep float32 master weights for it (apex, DeepSpeed), if any.
    wrapped_by: Optional[cst.Call] = None

    @property
    def unit(self) -> CodeUnit:
        return self.record.unit


def optimizer_built(finder: ModulePaths, record: CallRecord) -> Optional[OptimizerBuild]:
    """The optimizer a call builds, if it builds one, with what it trains."""
    node = record.node
    binding = finder.assigned.get(id(node))
    bound = binding if binding is not None and binding.value is node else None
    if not _builds_optimizer(finder, node, record.unit.scope, bound):
        return None
    positional, keywords = split_args(node.args)
    params = keywords.get("params", positional[0] if positional else None)
    if params is None:
        return None
    trains: Dict[ModulePath, List[FrozenSet[Assumption]]] = {}
    _modules_in(finder, params, record.unit.scope, frozenset(), trains, 0, set())
    if bound is not None:  # `optimizer.add_param_group({"params": head.parameters()})`
        for group, where, when in finder.appended().get(finder.resolver.identity(bound.name, bound.value_scope), []):
            _modules_in(finder, group, where, when, trains, 0, set())
    return OptimizerBuild(
        node,
        record,
        bound.name if bound is not None else None,
        {path: tuple(facts) for path, facts in trains.items()},
        guard_facts(record),
        _master_weights(finder, node, bound),
    )


def _builds_optimizer(finder: ModulePaths, call: cst.Call, scope: Scope, bound: Optional[Binding]) -> bool:
    if vocabulary.named_like_master_weights(dotted_name(call.func) or ""):
        return False  # fairseq's `FP16Optimizer.build_optimizer(cfg, params)` keeps them
    if _optimizer_class(finder, call.func, scope):
        return True
    # `optimizer = getattr(torch.optim, name)(model.parameters(), lr=lr)`, `OPTIMIZERS[name](...)`,
    # `optimizer_cls(...)`; not `param_optimizer = list(model.named_parameters())`.
    func = call.func
    return (
        bound is not None
        and (isinstance(func, (cst.Call, cst.Subscript)) or vocabulary.looks_like_optimizer(dotted_name(func) or ""))
        and vocabulary.looks_like_optimizer(bound.name)
        and not vocabulary.named_like_master_weights(bound.name)
        and any(isinstance(n, cst.Attribute) and n.attr.value in PARAMETER_METHODS for n in iter_tree(call))
    )


def _optimizer_class(finder: ModulePaths, func: cst.BaseExpression, scope: Scope, depth: int = 0) -> bool:
    if isinstance(func, cst.IfExp):
        return _optimizer_class(finder, func.body, scope, depth + 1) or _optimizer_class(finder, func.orelse, scope, depth + 1)
    qualified = finder.resolver.qualified(func) or ""
    name = dotted_name(func)
    if name is None:
        return False
    last = name.rsplit(".", 1)[-1]
    if qualified.startswith(OPTIMIZER_MODULE_PREFIXES):
        return last[:1].isupper() and "lr_scheduler" not in qualified and "swa_utils" not in qualified
    if last in vocabulary.OPTIMIZER_CLASSES or last.lower() in vocabulary.OPTIMIZER_FACTORIES:
        return True
    if depth < 2 and not qualified:
        # `optimizer_class = bnb.optim.AdamW8bit if args.use_8bit_adam else torch.optim.AdamW`
        return any(
            value is not None and _optimizer_class(finder, value, where, depth + 1)
            for value, where in finder.resolver.values(name, scope)
        )
    return False


def _modules_in(
    finder: ModulePaths,
    expression: cst.BaseExpression,
    scope: Scope,
    facts: FrozenSet[Assumption],
    found: Dict[ModulePath, List[FrozenSet[Assumption]]],
    depth: int,
    seen: Set[Tuple[str, int]],
) -> None:
    """The modules whose parameters `expression` holds, each with the conditions under
    which it does (into `found`)."""
    if depth > _MAX_DEPTH:
        return
    if isinstance(expression, cst.IfExp):
        for branch, outcome in ((expression.body, True), (expression.orelse, False)):
            branch_facts = facts | frozenset(assumptions(expression.test, outcome))
            _modules_in(finder, branch, scope, branch_facts, found, depth + 1, seen)
        return
    if isinstance(expression, cst.Call):
        func = expression.func
        if isinstance(func, cst.Attribute) and func.attr.value in PARAMETER_METHODS:
            module = finder.module_source(func.value)
            if module is not None:
                for path in finder.paths(module, scope):
                    found.setdefault(path, []).append(facts)
            return
        for arg in expression.args:
            _modules_in(finder, arg.value, scope, facts, found, depth + 1, seen)
        return
    if isinstance(expression, cst.Lambda):
        return  # `filter(lambda p: p.requires_grad, model.parameters())`: the filter, not a module
    name = dotted_name(expression)
    if name is not None:
        marker = (name, id(scope))
        if marker in seen:
            return
        seen.add(marker)
        sources: List[Tuple[cst.BaseExpression, Scope, FrozenSet[Assumption]]] = []
        for binding in finder.resolver.bindings(name, scope):
            source = binding.value if binding.value is not None else binding.source
            if source is not None:
                sources.append((source, binding.value_scope, facts))
        sources += [(value, where, facts) for value, where in finder.resolver.arguments_for(name, scope)]
        # `if args.train_te: groups.append({"params": te.parameters()})`: held on that branch only
        sources += [(value, where, facts | when) for value, where, when in finder.appended().get(finder.resolver.identity(name, scope), [])]
        root = name if name.startswith("self.") and name.count(".") == 1 else name.rsplit(".", 1)[0]
        if not sources and root != name:
            # `v.weight` for `v in model.modules()`: what its owner is drawn from
            sources.append((cst.parse_expression(root), scope, facts))
        for source, where, held in sources:
            _modules_in(finder, source, where, held, found, depth + 1, seen)
        if not sources:
            # A module handed over whole: `create_optimizer_v2(model, "adamw")`.
            for path in finder.paths(name, scope):
                found.setdefault(path, []).append(facts)
        return
    for child in children(expression):
        # list and dict displays, comprehensions (their `for ... in` too), subscripts
        for inner in [child] if isinstance(child, cst.BaseExpression) else children(child):
            if isinstance(inner, cst.BaseExpression):
                _modules_in(finder, inner, scope, facts, found, depth + 1, seen)
            elif isinstance(inner, cst.CompFor):
                _modules_in(finder, inner.iter, scope, facts, found, depth + 1, seen)


def _master_weights(finder: ModulePaths, node: cst.Call, bound: Optional[Binding], depth: int = 0) -> Optional[cst.Call]:
    """A call that takes the optimizer and may keep float32 master weights for it: one
    built around it (`FP16_Optimizer(torch.optim.SGD(...))`), one named like such a
    wrapper (`amp.initialize`, `deepspeed.initialize`), or an unknown one whose result
    rebinds the optimizer (`optimizer = Lookahead(optimizer)`). accelerate's `prepare` and
    Fabric's `setup` are none: they step the parameters they are given."""
    parent = finder.parent_call.get(id(node))
    if parent is not None and not vocabulary.named_like_a_schedule(dotted_name(parent.func) or ""):
        return parent
    if bound is None:
        return None
    key = finder.resolver.identity(bound.name, bound.value_scope)
    for record in finder.calls_passing().get(key, ()):
        call = record.node
        callee = dotted_name(call.func) or ""
        owner, _, method = callee.rpartition(".")
        if method in _FRAMEWORK_PREPARE and vocabulary.is_framework_receiver(owner):
            continue  # accelerate and Fabric step the parameters as they are: no master copy
        if vocabulary.named_like_master_weights(callee):
            return call
        binding = finder.bound_from().get(id(call))
        if binding is not None and finder.resolver.identity(binding.name, binding.value_scope) == key:
            return call  # `optimizer = Wrapper(optimizer)`: an unknown wrapper may keep them
    # An optimizer a helper returns: what its callers wrap the result in (DeepSpeed's
    # `basic_optimizer = self._configure_basic_optimizer(params)`, then
    # `self._configure_fp16_optimizer(basic_optimizer)`).
    scope = bound.value_scope
    if depth < 2 and scope.kind == "function" and bound.name in finder.returned(scope.node):
        for record in finder.index.calls_to(scope.name.rsplit(".", 1)[-1]):
            outer = finder.bound_from().get(id(record.node))
            wrapper = _master_weights(finder, record.node, outer, depth + 1)
            if wrapper is not None:
                return wrapper
    return None
