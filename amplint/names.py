"""Names as written in source: `self.scaler`, the names an expression reads, the names a target binds."""

from __future__ import annotations

from typing import List, Optional

import libcst as cst

_EMPTY_MODULE = cst.Module(body=[])


def dotted_name(node: cst.BaseExpression) -> Optional[str]:
    """`self.scaler` for an attribute chain of plain names; None for anything else."""
    parts = []
    while isinstance(node, cst.Attribute):
        parts.append(node.attr.value)
        node = node.value
    if not isinstance(node, cst.Name):
        return None
    parts.append(node.value)
    return ".".join(reversed(parts))


def names_read(node: cst.CSTNode) -> List[str]:
    """The longest dotted names an expression reads: `(self.x + y.z).mean()` -> self.x, y.z."""
    found: List[str] = []

    class _Reads(cst.CSTVisitor):
        def visit_Attribute(self, node: cst.Attribute) -> bool:
            name = dotted_name(node)
            if name is not None:
                found.append(name)
                return False
            return True

        def visit_Name(self, node: cst.Name) -> None:
            found.append(node.value)

        def visit_Arg(self, node: cst.Arg) -> bool:
            node.value.visit(self)  # skip the keyword's own Name
            return False

    node.visit(_Reads())
    return found


def names_bound(target: cst.BaseExpression) -> List[str]:
    """What an assignment target rebinds: `a, self.b = ...` -> a, self.b; `d[k] = ...` -> d."""
    if isinstance(target, (cst.Tuple, cst.List)):
        bound: List[str] = []
        for element in target.elements:
            bound.extend(names_bound(element.value))
        return bound
    if isinstance(target, cst.StarredElement):
        return names_bound(target.value)
    if isinstance(target, cst.Subscript):
        return names_bound(target.value)
    name = dotted_name(target)
    return [name] if name is not None else []


def source_text(node: cst.CSTNode) -> str:
    """The node's code on one line, without outer parentheses: what messages quote.

    A call split over lines reads `f(a, b)`, not `f( a, b )`.
    """
    if isinstance(node, cst.BaseExpression) and (node.lpar or node.rpar):
        node = node.with_changes(lpar=[], rpar=[])
    text = ""
    for line in _EMPTY_MODULE.code_for_node(node).splitlines():
        line = line.strip()
        if not line:
            continue
        if line.startswith((")", "]", "}")):
            text = text.rstrip(",")  # a trailing comma before the closing bracket
        elif text and not text.endswith(("(", "[", "{")):
            text += " "
        text += line
    return text


def is_none(node: Optional[cst.BaseExpression]) -> bool:
    """The literal `None`."""
    return isinstance(node, cst.Name) and node.value == "None"
