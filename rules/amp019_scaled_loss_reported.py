from __future__ import annotations

from typing import Dict, Iterator, List, Optional, Tuple

import libcst as cst

from amplint.lint.evidence import BACKWARD, SCALED_VALUE
from amplint.lint.rule import Flagged, Message, Prediction, Report, Rule
from amplint.semantic import AmpEvent, EventKind, HelperCall, SemanticModel, children, dotted_name, iter_tree, names_bound, source_text


class ScaledLossReported(Rule):
    """The value of `scaler.scale(loss)` used for something else than its backward: logged, accumulated, compared or returned.

    ## What it does
    Flags a use of what `scaler.scale(loss)` returns, other than calling `backward()` on it
    (also through `/ accum`, `.mean()`), for an enabled GradScaler: its value read
    (`.item()`, `.tolist()`, `float(...)`), handed to a call (a logger, `print`, a list's
    `append`, a metric's `update`), added to a running total (`total += scaled`, `total =
    total + scaled`), compared (`if scaled < best:`), formatted into a string, or returned by
    a function that has already run its backward. Typically `loss = scaler.scale(loss)`,
    `loss.backward()`, then `running_loss += loss.item()`. Calls that handle the backward
    (`accelerator.backward(scaled)`, a helper of the file that runs it, `torch.autograd.grad`),
    finiteness checks (`torch.isfinite(scaled)`, unchanged by the scale) and a function that
    returns the scaled loss for its caller's backward (`def scale(loss): return
    scaler.scale(loss)`) are not flagged.

    ## Why is this bad?
    `scaler.scale(loss)` is the loss times the loss scale: 65536 at the start, then whatever
    the scaler has grown or halved it to. It exists for `backward()` only. Logged, it reports
    a loss thousands of times too large that jumps whenever the scale changes (halving on an
    overflow, doubling every `growth_interval` steps), so curves, early stopping and "best
    checkpoint" comparisons follow the scale, not the model.

    ## What goes wrong at runtime
    Training itself is unchanged; what the run reports is wrong. Measured by `amplint verify`
    (CPU, SGD, a small MLP, 20 steps, float16 and bfloat16 alike): the logged loss was the
    true loss times the loss scale, 65536x at the first step (0.118 reported as 7,754), and
    the float32 loss after 20 steps was the same as the fixed run's.

    ## Example
    ```python
    loss = scaler.scale(loss)
    loss.backward()
    scaler.step(optimizer)
    scaler.update()
    running_loss += loss.item()
    ```

    ## Use instead
    ```python
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
    running_loss += loss.item()
    ```

    ## Fix safety
    No fix. Whether to keep the unscaled loss under another name or to divide by
    `scaler.get_scale()` is for the author to say.
    """

    code = "AMP019"
    name = "scaled-loss-reported"
    severity = "warning"
    # A scaler's `.scale(...)` whose value is kept, and a backward on it.
    needs = ({SCALED_VALUE}, {BACKWARD})

    PREDICTIONS = (
        Prediction(
            "sgd",
            "logged_loss",
            "The logged loss at the first step is the true loss times the loss scale, within 1%.",
            compare="buggy/fixed",
            at_least=0.99,
            at_most=1.01,
            expected="buggy.loss_scale",
            happened="buggy.loss_scale - 1",
            quotes=(("buggy", "reported as 7,754"), ("fixed", "0.118")),
        ),
        Prediction(
            "sgd",
            "logged_loss",
            "The logged loss is at least 1000x the true one.",
            compare="buggy/fixed",
            at_least=1000,
            quotes=(("value", "65536x"),),
        ),
        Prediction(
            "sgd",
            "true_loss",
            "Training is unchanged: the float32 loss after 20 steps is within 0.1% of the fixed run's.",
            compare="buggy/fixed",
            at_least=0.999,
            at_most=1.001,
            kind="control",
        ),
    )

    def check(self, model: SemanticModel) -> Iterator[Report]:
        reported = set()
        for unit in model.units:
            for scale in model.occurrences_in(unit):
                if scale.kind is not EventKind.SCALE or scale.via or not isinstance(scale.node, cst.Call):
                    continue
                key = scale.receiver.key if scale.receiver is not None else None
                info = model.scalers.get(key) if key is not None else None
                if info is None or info.framework is not None or not model.is_live(key):
                    continue
                for node, how in _uses(scale.node, unit.node, model):
                    if id(node) not in reported:
                        reported.add(id(node))
                        yield Report(node, _message(node, how, scale.node, model.scaler_name(key)))

    VALID = (
        # The AMP recipe: the scaled loss goes straight into backward, the loss is logged.
        """
import torch
scaler = torch.amp.GradScaler("cuda")
for x in loader:
    loss = model(x)
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
    running_loss += loss.item()
""",
        # Divided for accumulation, then backward; the finiteness check is scale-invariant.
        """
import torch
scaler = torch.amp.GradScaler("cuda")
def step(loss):
    scaled = scaler.scale(loss)
    if not torch.isfinite(scaled):
        return
    (scaled / accum).backward()
    print(loss.item())
""",
        # A helper that returns the scaled loss for its caller's backward.
        """
import torch
scaler = torch.amp.GradScaler("cuda")
def scale(loss):
    return scaler.scale(loss)
def step(loss):
    scale(loss).backward()
""",
        # A disabled scaler returns the loss itself.
        """
import torch
scaler = torch.amp.GradScaler("cuda", enabled=False)
loss = scaler.scale(loss)
loss.backward()
print(loss.item())
""",
        # The variable holds the loss again before it is logged.
        """
import torch
scaler = torch.amp.GradScaler("cuda")
for x in loader:
    loss = scaler.scale(model(x))
    loss.backward()
    loss = model(x).detach()
    print(loss.item())
""",
    )
    INVALID = (
        Flagged(
            """
import torch
scaler = torch.amp.GradScaler("cuda")
for x in loader:
    loss = scaler.scale(model(x))
    loss.backward()
    scaler.step(optimizer)
    scaler.update()
    running_loss += loss.item()
""",
            at=((9, 21),),
        ),
        # Returned after its backward: the caller logs 65536x the loss.
        Flagged(
            """
import torch
class Trainer:
    def __init__(self):
        self.scaler = torch.amp.GradScaler("cuda")
    def train_step(self, batch):
        loss = self.scaler.scale(self.model(batch))
        loss.backward()
        self.scaler.step(self.optimizer)
        self.scaler.update()
        return loss
""",
            at=((11, 9),),
        ),
        # Logged without a variable.
        Flagged(
            """
import torch
scaler = torch.amp.GradScaler("cuda")
scaled = scaler.scale(loss)
scaled.backward()
writer.add_scalar("loss", scaled, step)
""",
            at=((6, 1),),
        ),
    )


# Methods that read the value out of the tensor.
_READS = frozenset({"item", "tolist", "numpy"})
# Methods whose result is the same scaled value, as far as the scale goes.
_PASS_THROUGH = frozenset({"detach", "cpu", "clone", "float", "double", "half", "to", "mean", "sum", "squeeze", "view", "reshape", "contiguous", "data"})
# Calls whose answer the scale does not change.
_SCALE_INVARIANT = frozenset({"isfinite", "isnan", "isinf", "isneginf", "isposinf", "is_tensor", "len", "type", "id", "hasattr", "getattr", "isinstance"})


def _uses(scale: cst.Call, function: cst.CSTNode, model: SemanticModel) -> List[Tuple[cst.CSTNode, str]]:
    """The uses of what `scale` returns that are not its backward: `(node to report, how)`."""
    statement = model.statement_of(scale)
    if statement is None:
        return []
    small = statement.body[0] if isinstance(statement, cst.SimpleStatementLine) and len(statement.body) == 1 else None
    target = None
    value = small.value if isinstance(small, cst.Assign) else None
    if isinstance(value, cst.Call) and _callee(value) == "cast" and len(value.args) == 2 and value.args[1].value is scale:
        value = scale  # `loss = cast(torch.Tensor, scaler.scale(loss))`
    if isinstance(small, cst.Assign) and value is scale and len(small.targets) == 1 and isinstance(small.targets[0].target, cst.Name):
        target = small.targets[0].target.value
    if target is None:
        found = _use(scale, _parents(statement), model, None)
        return [found] if found is not None and found[1] not in ("returned", "backward") else []
    found: List[Tuple[cst.CSTNode, str]] = []
    backward = False
    started = False
    for node in iter_tree(function, lambda part: not isinstance(part, (cst.FunctionDef, cst.ClassDef, cst.Lambda)) or part is function):
        if node is statement:
            started = True
            continue
        if not started or not isinstance(node, cst.BaseStatement):
            continue
        if isinstance(node, cst.SimpleStatementLine) or isinstance(node, cst.BaseCompoundStatement):
            header = node if isinstance(node, cst.SimpleStatementLine) else _header(node)
            if header is None:
                continue
            parents = _parents(header)
            for read in iter_tree(header, lambda part: not isinstance(part, (cst.IndentedBlock, cst.SimpleStatementSuite, cst.Lambda))):
                if isinstance(read, cst.Name) and read.value == target and isinstance(parents.get(id(read)), (cst.BaseExpression, cst.Arg, cst.BaseSmallStatement, cst.Element, cst.BaseDictElement, cst.FormattedStringExpression)) and not _binds(parents.get(id(read)), read):
                    use = _use(read, parents, model, target)
                    if use is None:
                        continue
                    if use[1] == "backward":
                        backward = True
                    elif use[1] != "returned" or backward:
                        found.append(use)
            if _rebinds(node, target):
                break
    return found


def _header(node: cst.CSTNode) -> Optional[cst.CSTNode]:
    """What a compound statement evaluates itself: an `if`'s or `while`'s test, a `for`'s iterable."""
    if isinstance(node, (cst.If, cst.While)):
        return node.test
    if isinstance(node, cst.For):
        return node.iter
    return None


def _binds(parent: Optional[cst.CSTNode], read: cst.Name) -> bool:
    """The name is no read of the variable there: bound, an attribute's name, a keyword."""
    if isinstance(parent, cst.AssignTarget) or (isinstance(parent, (cst.AugAssign, cst.AnnAssign)) and parent.target is read):
        return True
    return (isinstance(parent, cst.Attribute) and parent.attr is read) or (isinstance(parent, cst.Arg) and parent.keyword is read)


def _rebinds(statement: cst.CSTNode, name: str) -> bool:
    if isinstance(statement, cst.For):
        return name in names_bound(statement.target)
    if not isinstance(statement, cst.SimpleStatementLine):
        return False
    for small in statement.body:
        if isinstance(small, cst.Assign) and any(name in names_bound(t.target) for t in small.targets):
            return True
        if isinstance(small, cst.AnnAssign) and name in names_bound(small.target):
            return True
    return False


def _parents(root: cst.CSTNode) -> Dict[int, cst.CSTNode]:
    found: Dict[int, cst.CSTNode] = {}
    pending = [root]
    while pending:
        node = pending.pop()
        for child in children(node):
            found[id(child)] = node
            pending.append(child)
    return found


def _use(start: cst.CSTNode, parents: Dict[int, cst.CSTNode], model: SemanticModel, name: Optional[str]) -> Optional[Tuple[cst.CSTNode, str]]:
    """What the expression around `start` (a scaled value) does with it, following what
    keeps the value scaled (arithmetic, `.detach()`, a list or dict around it): `backward`,
    a use to report with how, or None for anything else."""
    node = start
    for _ in range(12):
        parent = parents.get(id(node))
        if parent is None:
            return None
        if isinstance(parent, cst.Attribute) and parent.value is node:
            call = parents.get(id(parent))
            method = parent.attr.value
            if method == "backward":
                return (parent, "backward")
            if method in _READS and isinstance(call, cst.Call) and call.func is parent:
                return (call, "read")
            if method in _PASS_THROUGH:
                node = call if isinstance(call, cst.Call) and call.func is parent else parent
                continue
            return None
        if isinstance(parent, (cst.BinaryOperation, cst.UnaryOperation, cst.Element, cst.DictElement, cst.List, cst.Tuple, cst.Dict, cst.Subscript, cst.SubscriptElement, cst.Index)):
            if isinstance(parent, cst.Subscript) and parent.value is not node:
                return None  # `values[scaled]`
            node = parent
            continue
        if isinstance(parent, cst.Arg):
            call = parents.get(id(parent))
            if not isinstance(call, cst.Call):
                return None
            if _callee(call) == "cast":
                node = call  # `typing.cast(torch.Tensor, scaled)` is the value itself
                continue
            return _passed(call, model)
        if isinstance(parent, (cst.Return, cst.Yield)):
            return (parent, "returned")
        if isinstance(parent, cst.Comparison) or isinstance(parent, cst.ComparisonTarget):
            top = parent if isinstance(parent, cst.Comparison) else parents.get(id(parent))
            return (top, "compared") if top is not None else None
        if isinstance(parent, cst.AugAssign) and parent.value is node:
            return (parent, "accumulated")
        if isinstance(parent, cst.Assign) and parent.value is node and node is not start:
            # `total = total + scaled`: added to what the target held.
            targets = {n for t in parent.targets for n in names_bound(t.target)}
            reads = {n.value for n in iter_tree(node) if isinstance(n, cst.Name)}
            return (parent, "accumulated") if targets & reads - {name} else None
        if isinstance(parent, cst.FormattedStringExpression):
            return (parent, "formatted")
        return None
    return None


def _passed(call: cst.Call, model: SemanticModel) -> Optional[Tuple[cst.CSTNode, str]]:
    """A scaled value handed to `call`: reported unless the call runs the backward or asks
    what the scale does not change."""
    last = _callee(call)
    if "backward" in last.lower() or "scale" in last.lower() or last in _SCALE_INVARIANT or last == "grad":
        return None
    record = model.call_record(call)
    if record is not None and isinstance(model.classify(record), (AmpEvent, HelperCall)):
        return None  # a call the model follows: a framework's backward, a helper of the file
    if last in ("float", "int"):
        return (call, "read")
    return (call, "passed")


def _callee(call: cst.Call) -> str:
    """The last name of what `call` calls: `pre_backward` of `super().pre_backward(...)`."""
    func = call.func
    if isinstance(func, cst.Attribute):
        return func.attr.value
    return (dotted_name(func) or "").rsplit(".", 1)[-1]


def _message(node: cst.CSTNode, how: str, scale: cst.Call, scaler: str) -> Message:
    what = {
        "read": "reads the value of",
        "passed": "hands on",
        "accumulated": "adds to a running total",
        "compared": "compares",
        "returned": "returns, after its backward,",
        "formatted": "formats",
    }[how]
    text = source_text(node).strip().splitlines()[0]
    return Message(
        f"`{text}` {what} the loss that `{source_text(scale)}` scaled: {scaler}'s loss scale (65536 at the start) times the loss",
        help=(
            f"`{scaler}.scale(loss)` is for `backward()` only: what is logged, accumulated or compared from it is "
            f"thousands of times the loss and jumps whenever the scale changes. Call `{scaler}.scale(loss).backward()` "
            "and keep using the unscaled loss."
        ),
    )
