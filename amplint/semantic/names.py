"""Names as written in source: `self.scaler`, the names an expression reads, the names a target binds."""

from __future__ import annotations

from typing import Dict, List, Optional

import libcst as cst

from amplint import work
from amplint.semantic.walk import iter_tree

_EMPTY_MODULE = cst.Module(body=[])


def dotted_name(node: cst.BaseExpression) -> Optional[str]:
    """`self.scaler` for an attribute chain of plain names; None for anything else."""
    kind = type(node)
    if kind is cst.Name:  # most of the calls: nothing to join
        return node.value  # type: ignore[attr-defined]
    if kind is not cst.Attribute:
        return None
    parts = []
    while type(node) is cst.Attribute:
        parts.append(node.attr.value)  # type: ignore[attr-defined]
        node = node.value  # type: ignore[attr-defined]
    if type(node) is not cst.Name:
        return None
    parts.append(node.value)
    return ".".join(reversed(parts))


def names_read(node: cst.CSTNode) -> List[str]:
    """The longest dotted names an expression reads: `(self.x + y.z).mean()` -> self.x, y.z.

    A keyword argument's own name (`f(dtype=x)`) is not read; lambdas are included (their
    body reads names when it runs).
    """
    found: List[str] = []

    def descend(current: cst.CSTNode) -> bool:
        if isinstance(current, cst.Attribute):
            name = dotted_name(current)
            if name is not None:
                found.append(name)
                return False
        elif isinstance(current, cst.Name):
            found.append(current.value)
        elif isinstance(current, cst.Arg) and current.keyword is not None:
            found.extend(names_read(current.value))
            return False
        return True

    for _ in iter_tree(node, descend):
        pass
    return found


def roots(names) -> List[str]:
    """The variables dotted names start from: `out.float`, `self.x` -> out, self.x.

    A method or attribute read off a value (`out.float()`, `out.shape`) reads that value;
    `self.x` is its own variable, an attribute of the instance.
    """
    found = []
    for name in names:
        head, _, rest = name.partition(".")
        if head == "self" and rest:
            found.append("self." + rest.split(".")[0])
        else:
            found.append(head)
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
        try:
            node = node.with_changes(lpar=[], rpar=[])
        except cst.CSTValidationError:
            pass  # `()`: an empty tuple is its parentheses
    text = ""
    code = _EMPTY_MODULE.code_for_node(node)
    work.charge(len(code) // work.PRINT_CHARACTERS_PER_STEP)  # LibCST's printing: counted by what it wrote
    for line in code.splitlines():
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


def names_used(module: cst.Module) -> Dict[str, int]:
    """How many times each name is read or written outside import statements (attribute
    names after a dot are not names: `x.autocast` uses `x`)."""
    counts: Dict[str, int] = {}
    nodes = list(iter_tree(module, descend=lambda node: not isinstance(node, (cst.Import, cst.ImportFrom))))
    attributes = {id(node.attr) for node in nodes if isinstance(node, cst.Attribute)}
    for node in nodes:
        if isinstance(node, cst.Name) and id(node) not in attributes:
            counts[node.value] = counts.get(node.value, 0) + 1
    return counts
