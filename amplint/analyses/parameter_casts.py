"""Functions that leave a module they are handed cast to a half dtype: a fact `Precision`
exports for the modules that call them.

yolov5's `val.run(model=ema.ema)` validates the EMA copy in float16: `run` does `model.half()
if half else model.float()` and returns with the copy still cast, so the training loop's next
`ema.update(model)` decays float16 weights (AMP010). The cast is in `val.py`, the copy and its
decay in `train.py` and `utils/torch_utils.py`. A module's summary says, per top-level function
(`precision` facts, beside the averaging classes): the parameter it casts, its position, the
half dtypes it may leave it in, and the parameter that switches the cast (`half`, with its
default), when there is one. The calling module reads `run(model=ema.ema)` as a cast of what
it passes, at the call (`Precision`'s finder, `call_casts`).

Only what the function leaves: the last statement of it that casts the parameter decides (a
function that casts it back, `model.float()  # for training`, exports nothing). Not exported:
a parameter it binds anew other than to a call made after its last cast, a cast of unknown
dtype, a cast under a condition that reads a parameter other than as a plain switch (`if not
half:`, `if half and cuda:`), a method. A call that unpacks arguments (`**val_cfg`) where the
switch may be is no cast.
"""

from __future__ import annotations

from typing import Any, Dict, FrozenSet, List, Optional, Sequence, Set, Tuple

import libcst as cst

from amplint.analyses.module_casts import ModuleCast
from amplint.semantic import (
    CallRecord,
    CodeUnit,
    GuardFrame,
    SemanticModel,
    iter_tree,
    names_read,
    passed_for,
    source_text,
)

_HALF = frozenset({"float16", "bfloat16"})
# The code an importing module's rules look for (AMP010's words), quoted by the fact.
_WORDS = [".half(", "float16"]


def exported_parameter_casts(model: SemanticModel, casts: Sequence[ModuleCast]) -> Dict[str, Any]:
    """The module's top-level functions that return with a parameter cast to a half dtype:
    each -> `casts`, one entry per such parameter (see the module's docstring), and `words`."""
    by_parameter: Dict[Tuple[int, str], List[ModuleCast]] = {}
    units: Dict[int, CodeUnit] = {}
    for cast in casts:
        unit = cast.unit
        if not isinstance(unit.node, cst.FunctionDef) or unit.scope.parent is not model.index.module_scope:
            continue
        name = cast.name
        if name not in unit.parameters or name in ("self", "cls") or cast.inherits is not None:
            continue
        by_parameter.setdefault((id(unit), name), []).append(cast)
        units[id(unit)] = unit
    exported: Dict[str, Any] = {}
    for (key, parameter), found in by_parameter.items():
        unit = units[key]
        last = _last_statement(unit, found, model)
        if not last or any(not cast.dtypes for cast in last) or not _rebound_only_after(unit, parameter, last):
            continue
        half = [cast for cast in last if cast.dtypes & _HALF]
        if not half:
            continue  # it leaves the module in float32
        known, when = _switch(half, unit)
        if not known:
            continue
        entry = {
            "param": parameter,
            "position": unit.parameters.index(parameter),
            "dtypes": sorted(frozenset().union(*(cast.dtypes & _HALF for cast in half))),
            "when": when,
            "when_position": unit.parameters.index(when) if when is not None else None,
            "when_default": model.resolver.default_boolean(when, unit.scope) if when is not None else None,
            "cast": source_text(half[0].node),
        }
        name = unit.node.name.value  # type: ignore[union-attr]
        exported.setdefault(name, {"line": model.index.top_level_line(unit.node), "casts": [], "words": _WORDS})["casts"].append(entry)
    return exported


def call_casts(model: SemanticModel, record: CallRecord, family: str) -> List[Tuple[cst.BaseExpression, FrozenSet[str], str]]:
    """What a call of another linted module's function leaves cast (its summary's facts of
    the family keyed `family`, `Precision`'s): each module the call passes for a parameter
    it casts, the dtypes, and the cast as quoted there with its file (`model.half()` in
    val.py); none where the call switches the cast off (`half=False`, or a default of False
    it keeps) or may (`**val_cfg`)."""
    if model.external is None or not isinstance(record.node.func, (cst.Name, cst.Attribute)):
        return []
    found = model.exported_facts(record.node.func, record.unit.scope, family)
    facts = found[2] if found is not None else None
    if not isinstance(facts, dict) or not facts.get("casts"):
        return []
    out = []
    unpacked = any(arg.star for arg in record.node.args)
    for entry in facts["casts"]:
        passed = passed_for(record.node, entry.get("param"), entry.get("position"))
        if passed is None:
            continue
        when = entry.get("when")
        if when:
            switch = passed_for(record.node, when, entry.get("when_position"))
            if switch is None and unpacked:
                continue  # `**val_cfg` may switch it off: not known
            on = entry.get("when_default") if switch is None else model.resolver.boolean(switch, record.unit.scope)
            if on is False:
                continue
        out.append((passed, frozenset(entry.get("dtypes", ())), f"`{entry.get('cast')}` in {found[1]}"))  # type: ignore[index]
    return out


def _last_statement(unit: CodeUnit, casts: List[ModuleCast], model: SemanticModel) -> List[ModuleCast]:
    """The casts in the last statement of `unit` (in its order of calls) that casts the
    parameter: `model.half() if half else model.float()` is one statement, two casts."""
    order = {id(record.node): position for position, record in enumerate(unit.calls)}
    last = max(casts, key=lambda cast: order.get(id(cast.node), -1))
    statement = model.statement_of(last.node) if isinstance(last.node, cst.Call) else None
    if statement is None:
        return [last]
    return [cast for cast in casts if isinstance(cast.node, cst.Call) and model.statement_of(cast.node) is statement]


def _rebound_only_after(unit: CodeUnit, parameter: str, last: List[ModuleCast]) -> bool:
    """Whether every cast of the parameter casts what the caller passed: the function binds
    the name anew, if at all, only to a call made after its last cast (yolov5's `run` loads
    `model = DetectMultiBackend(...)` on the branch where none is passed)."""
    order = {id(record.node): position for position, record in enumerate(unit.calls)}
    cast_at = max(order.get(id(cast.node), -1) for cast in last)
    for binding in unit.scope.bindings.get(parameter, ()):
        if binding.kind == "param":
            continue
        if not isinstance(binding.value, cst.Call) or order.get(id(binding.value), -1) <= cast_at:
            return False
    return True


def _switch(half: List[ModuleCast], unit: CodeUnit) -> Tuple[bool, Optional[str]]:
    """(whether it is known, the parameter) that switches every half cast: `if half:` around
    it, or `model.half() if half else model.float()`; (True, None) when no condition on a
    parameter is around it (it casts whenever it runs). Not known when a condition around it
    reads a parameter in any other way (`if not half: ... else: model.half()`, `if half and
    cuda:`), or the casts have different switches."""
    found: Set[str] = set()
    for cast in half:
        conditions = [(frame.test, frame.outcome) for frame in cast.record.frames if isinstance(frame, GuardFrame)]
        conditions += _if_expression_tests(cast.node, unit)
        switches = set()
        for test, outcome in conditions:
            read = {name for name in names_read(test) if name.split(".")[0] in unit.parameters}
            if not read:
                continue  # (`if training:`: a condition on no parameter)
            if not (outcome and isinstance(test, cst.Name)):
                return False, None
            switches.add(test.value)
        if len(switches) > 1 or (found and switches != found):
            return False, None
        found |= switches
    return True, (found.pop() if found else None)


def _if_expression_tests(node: cst.BaseExpression, unit: CodeUnit) -> List[Tuple[cst.BaseExpression, bool]]:
    """The tests of the conditional expressions `node` is a value of, each with the outcome
    that chooses it (`node if test else ...`: True)."""
    found = []
    for n in iter_tree(unit.node):
        if isinstance(n, cst.IfExp) and (n.body is node or n.orelse is node):
            found.append((n.test, n.body is node))
    return found
