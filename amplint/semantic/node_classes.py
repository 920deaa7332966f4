"""`isinstance` against LibCST's node classes at the price of a plain class's check.

Every LibCST node class is an ABC (`CSTNode` derives from `abc.ABC`), so each
`isinstance(node, cst.Name)` goes through `ABCMeta.__instancecheck__`: a call into Python that
looks for virtual subclasses LibCST never registers. The analysis makes millions of those
checks, from hundreds of places (13.6 million on the bench corpus); answered in C, a lint is
3-5% faster (measured in one process, switched on and off between lints).

`plain_checks()` gives the node classes a metaclass whose instance and subclass checks are
`type`'s: the class's own hierarchy, checked in C. The answers are the same as ABCMeta's as
long as no node class has a virtual subclass or a `__subclasshook__` of its own, so:
- it changes nothing where one does (another library in the process registered one);
- `register` on a node class afterwards puts ABCMeta back on every node class first, and
  ABCMeta answers from then on, as before;
- a class LibCST adds later (a subclass of a node class) gets the metaclass by inheritance.
"""

from __future__ import annotations

import abc
from typing import List, Type

import libcst as cst


class _PlainChecks(abc.ABCMeta):
    """ABCMeta with `type`'s instance and subclass checks."""

    __instancecheck__ = type.__instancecheck__
    __subclasscheck__ = type.__subclasscheck__

    def register(cls, subclass):  # type: ignore[override]
        _restore()
        return abc.ABCMeta.register(cls, subclass)


def _node_classes() -> List[Type[cst.CSTNode]]:
    found: List[Type[cst.CSTNode]] = []
    waiting: List[type] = [cst.CSTNode]
    seen = set()
    while waiting:
        cls = waiting.pop()
        if cls in seen:
            continue
        seen.add(cls)
        found.append(cls)
        waiting.extend(cls.__subclasses__())
    return found


def _answers_alike(classes: List[Type[cst.CSTNode]]) -> bool:
    """Whether `type`'s checks answer as ABCMeta's do for these classes: no virtual
    subclasses registered, no `__subclasshook__` of their own, ABCMeta itself (nothing else
    overrides the checks)."""
    dump = getattr(abc, "_get_dump", None)
    if dump is None:
        return False
    for cls in classes:
        if type(cls) not in (abc.ABCMeta, _PlainChecks) or "__subclasshook__" in vars(cls):
            return False
        registry = dump(cls)[0]
        if any(reference() is not None for reference in registry):
            return False
    return True


def plain_checks() -> bool:
    """Give LibCST's node classes `type`'s checks, where that answers alike; whether it did."""
    classes = _node_classes()
    if not _answers_alike(classes):
        return False
    for cls in classes:
        if type(cls) is abc.ABCMeta:
            cls.__class__ = _PlainChecks  # type: ignore[assignment]
    return True


def _restore() -> None:
    for cls in _node_classes():
        if type(cls) is _PlainChecks:
            cls.__class__ = abc.ABCMeta  # type: ignore[assignment]
