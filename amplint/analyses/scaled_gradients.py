"""What the loss scale corrupts where gradients are read before they are unscaled (AMP003,
AMP009, and the summaries of helper modules that read gradients for their callers).

A clip at an infinite norm (`clip_grad_norm_(params, float("inf"))`) clips nothing: it is
there for the norm it returns, which the scale inflates like any other norm. A norm or
gradient divided by the scaler's `get_scale()` (the AMP docs' `[g * inv_scale for g in
scaled_grads]`, `norm / scaler.get_scale()`) is unscaled by hand: nothing is corrupted.
"""

from __future__ import annotations

from typing import Optional, Set

import libcst as cst

from amplint.semantic import (
    AmpEvent,
    Analysis,
    EventKind,
    Occurrence,
    argument,
    is_infinity,
    iter_tree,
    names_bound,
    names_read,
    roots,
    values_derived_from,
)


class ScaledGradients(Analysis):
    def clip_only_measures(self, clip: Occurrence) -> bool:
        """A clip at an infinite norm: it clips nothing and is there for the norm it returns."""
        return self._only_measures(clip.event)

    def threshold_scaled(self, clip: Occurrence) -> bool:
        """A clip whose threshold is multiplied by a scaler's `get_scale()`
        (`clip_grad_norm_(params, max_norm * scaler.get_scale())`, or a local so computed): it
        clips the scaled gradients at the scaled threshold, which is clipping them right."""
        node = clip.event.node
        if not isinstance(node, cst.Call) or clip.event.foreign is not None:
            return False
        method = isinstance(node.func, cst.Attribute) and self.model.qualified(node.func) is None
        threshold = argument(node, 0 if method else 1, "max_norm")
        if threshold is None:
            threshold = argument(node, 0 if method else 1, "clip_value")
        pending = [threshold] if threshold is not None else []
        for _ in range(4):
            if not pending:
                return False
            value = pending.pop()
            if any(isinstance(part, cst.Call) and _calls_get_scale(part) for part in iter_tree(value)):
                return True
            for name in roots(names_read(value)):
                pending.extend(self.model.resolver.local_values(name, clip.event.unit.scope))
        return False

    def corrupts(self, event: AmpEvent) -> Optional[str]:
        """How a gradient read's use is corrupted by the loss scale, if it is: "norm" or
        "noise" (`amplint.semantic.gradient_use`), unless the result is divided by the
        scaler's `get_scale()`. A clip at an infinite norm is a norm read."""
        if event.kind is EventKind.CLIP:
            measures = self._only_measures(event)
            return "norm" if measures and not self.divided_by_loss_scale(event) else None
        if event.kind is not EventKind.GRADIENT_READ or event.gradient_use is None:
            return None
        if event.foreign is None and event.gradient_use == "norm" and self.divided_by_loss_scale(event):
            return None  # `norm / scaler.get_scale()`
        return event.gradient_use

    def _only_measures(self, event: AmpEvent) -> bool:
        node = event.node
        if not isinstance(node, cst.Call) or event.foreign is not None:
            return event.gradient_use == "norm"  # another module's: as its summary says
        # FSDP's `model.clip_grad_norm_(max_norm)` takes the norm first.
        method = isinstance(node.func, cst.Attribute) and self.model.qualified(node.func) is None
        return is_infinity(argument(node, 0 if method else 1, "max_norm"))

    def divided_by_loss_scale(self, event: AmpEvent) -> bool:
        """Whether what `event` computes (gradients from `autograd.grad` of a scaled loss, a
        norm of scaled gradients) is divided by, or multiplied with the inverse of, a
        scaler's `get_scale()` in its unit: the AMP docs' `[g * inv_scale for g in
        scaled_grads]`, or `norm / scaler.get_scale()`."""
        unit = event.unit
        node = event.node
        bound: Set[str] = set()
        scale: Set[str] = set()
        for statement, record in self.model.index.statement_records(unit):
            if any(_calls_get_scale(r.node) for r in record.calls):
                scale |= _assigned(statement)
            if statement is event.statement or any(r.node is node for r in record.calls):
                bound |= _assigned(statement)
        grads = values_derived_from(unit, bound)
        scales = values_derived_from(unit, scale)

        def is_gradient(side: cst.CSTNode, names: Set[str]) -> bool:
            return any(n is node for n in iter_tree(side)) or bool(set(roots(names_read(side))) & names)

        def is_scale(side: cst.CSTNode) -> bool:
            return any(isinstance(n, cst.Call) and _calls_get_scale(n) for n in iter_tree(side)) or bool(
                set(roots(names_read(side))) & scales
            )

        def not_nested(part: cst.CSTNode) -> bool:
            return not isinstance(part, (cst.FunctionDef, cst.ClassDef, cst.Lambda))

        statements = [
            part
            for top in unit.body
            for part in iter_tree(top, not_nested)
            if isinstance(part, (cst.SimpleStatementLine, cst.SimpleStatementSuite))
        ]
        for statement in statements:
            local = set(grads)
            for part in iter_tree(statement):
                # `[g * inv_scale for g in scaled_grads]`: g is one of the gradients.
                if isinstance(part, cst.CompFor) and set(roots(names_read(part.iter))) & local:
                    local.update(roots(names_bound(part.target)))
            for part in iter_tree(statement):
                if isinstance(part, cst.BinaryOperation) and isinstance(part.operator, (cst.Divide, cst.Multiply)):
                    if (is_gradient(part.left, local) and is_scale(part.right)) or (
                        is_scale(part.left) and is_gradient(part.right, local)
                    ):
                        return True
                if isinstance(part, cst.AugAssign) and isinstance(part.operator, (cst.DivideAssign, cst.MultiplyAssign)):
                    if is_gradient(part.target, local) and is_scale(part.value):
                        return True
        return False


def _calls_get_scale(call: cst.Call) -> bool:
    return isinstance(call.func, cst.Attribute) and call.func.attr.value == "get_scale"


def _assigned(statement: cst.CSTNode) -> Set[str]:
    if isinstance(statement, cst.Assign):
        return {name for target in statement.targets for name in roots(names_bound(target.target))}
    if isinstance(statement, (cst.AnnAssign, cst.AugAssign)):
        return set(roots(names_bound(statement.target)))
    return set()
