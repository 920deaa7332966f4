from __future__ import annotations

from typing import Iterator, Optional, Set, Tuple

import libcst as cst

from amplint.lint.evidence import AUTOCAST_OBJECT
from amplint.lint.rule import Flagged, Message, Prediction, Report, Rule
from amplint.semantic import Analysis, CodeUnit, SemanticModel, dotted_name, iter_tree, source_text
from amplint.semantic.pytorch.api import AUTOCAST as AUTOCAST_CLASSES
from amplint.semantic.pytorch.api import LEGACY_AUTOCAST_DEVICE


class AutocastNeverEntered(Rule):
    """`torch.autocast(...)` built and never entered: nothing runs under it.

    ## What it does
    Flags a call of `torch.autocast`, `torch.amp.autocast`, `torch.cuda.amp.autocast` or
    `torch.cpu.amp.autocast` (however imported) whose object is thrown away:
    - a call written as a statement of its own (`torch.autocast("cuda")`, also as a branch of a
      conditional expression: `torch.autocast("cuda") if amp else nullcontext()`);
    - an object stored in a function's local variable that the function never reads again
      (not in a `with`, not entered with `__enter__()`, not passed on, returned or kept), or in
      a module variable of a script that the file never reads;
    - an object stored in an attribute (`self._amp_ctx = torch.autocast(...)`, or a class
      attribute) whose name the file reads nowhere else, under no spelling (`x._amp_ctx`,
      `getattr(x, "_amp_ctx")`), when the attribute is private or the file is a script;
    - an object yielded by a `@contextlib.contextmanager` generator (`yield torch.autocast(...)`):
      `with amp_context():` enters the generator and binds the autocast to its `as` name, which
      nothing enters. Not flagged when a `with` of the file binds it (`with amp_context() as
      ctx:`), since the code may enter `ctx` next.

    Anything that lets the object out is taken as a use: `with ctx:`, `ctx.__enter__()`,
    `stack.enter_context(ctx)`, passing it to any function, returning or yielding it, putting
    it in a list or a dict, a decorator (`@torch.autocast("cuda")`), calling it on a function
    (`torch.autocast("cuda")(model.forward)`), a `global` or `nonlocal` name, a module
    variable or public attribute of a library module (another module may read it), and a
    function that calls
    `locals()`, `vars()`, `eval()` or `exec()`. A call written directly in a `try` block
    with an `except` is a probe of what the machine supports (`try: torch.autocast("cuda")`,
    `except RuntimeError: amp = False`), not flagged. `functools.partial(torch.autocast, ...)`
    builds no autocast, and an `autocast` that is not torch's is not followed.

    ## Why is this bad?
    An autocast object does nothing until it is entered. Building one and not entering it is
    a no-op: the forward pass that was meant to run in float16 or bfloat16 runs in float32,
    and nothing says so. The run trains, and trains correctly, but without mixed precision's
    speed and memory savings, while the author believes it is on (and a GradScaler beside it
    scales float32 gradients for nothing). An `autocast(enabled=False)` built this way does not
    switch autocast off either: the code after it still runs under the outer region.

    ## What goes wrong at runtime
    Measured by `amplint verify` (CPU, 20 steps, float16 and bfloat16): none of the buggy
    run's forward passes returns a float16 or bfloat16 output, all of the fixed run's do. The
    buggy run trains, in float32. Nothing is damaged (float32 is mixed precision's
    reference), so the rule is a warning: what is lost is what autocast was for, speed and
    memory. The mechanism is torch's: `torch.autocast.__init__` only records its arguments,
    and the autocast state (`torch.is_autocast_enabled()`) is switched on by `__enter__` (a
    `with` statement, or a decorated function's call) and off by `__exit__`.

    ## Example
    ```python
    for x, y in loader:
        torch.autocast("cuda", dtype=torch.float16)
        loss = loss_fn(model(x), y)
        scaler.scale(loss).backward()
    ```

    ## Use instead
    ```python
    for x, y in loader:
        with torch.autocast("cuda", dtype=torch.float16):
            loss = loss_fn(model(x), y)
        scaler.scale(loss).backward()
    ```

    ## Fix safety
    No fix. Which statements belong under the region is for the author to say.
    """

    code = "AMP016"
    name = "autocast-never-entered"
    severity = "warning"
    triggers = ("autocast",)
    PREDICTIONS = (
        Prediction(
            "sgd",
            "low_precision_forwards",
            "None of the buggy run's 20 forward passes returns an output in the autocast dtype (they run in "
            "float32); every one of the fixed run's does.",
            compare="buggy",
            at_most=0,
            happened="fixed.low_precision_forwards",
        ),
    )
    # An autocast call outside a `with` header and a decorator: the only kind it can flag.
    needs = ({AUTOCAST_OBJECT},)

    def check(self, model: SemanticModel) -> Iterator[Report]:
        class_bodies, probes = _blocks(model.module)
        for record in model.index.calls:
            if not record.immediate or not _is_autocast(model, record.node):
                continue
            statement = model.statement_of(record.node)
            if not isinstance(statement, cst.SimpleStatementLine):
                continue  # a `with` item, a decorator, a lambda's body, a line of several
            if id(statement) in probes:
                continue  # `try: torch.autocast("cuda")` / `except: amp = False`: a probe of what is supported
            small = statement.body[0]
            lost = _discarded(small, record.node, record.unit, model, in_class=id(statement) in class_bodies)
            if lost is not None:
                yield Report(record.node, _message(record.node, lost))

    VALID = (
        # Entered directly.
        """
import torch
with torch.autocast("cuda"):
    loss = model(x)
""",
        # Built first, entered later.
        """
import torch
def train(model, loader, amp):
    ctx = torch.autocast("cuda", enabled=amp)
    for x in loader:
        with ctx:
            loss = model(x)
""",
        # Stored on self in __init__, entered in another method.
        """
import torch
class Trainer:
    def __init__(self, dtype):
        self.autocast = torch.autocast("cuda", dtype=dtype)
    def step(self, x):
        with self.autocast:
            return self.model(x)
""",
        # Entered through an ExitStack, by hand, returned, passed on, kept in a list.
        """
import contextlib
import torch
def forward(model, x):
    with contextlib.ExitStack() as stack:
        ctx = torch.autocast("cuda")
        stack.enter_context(ctx)
        return model(x)
def manual(model, x):
    ctx = torch.cuda.amp.autocast()
    ctx.__enter__()
    out = model(x)
    ctx.__exit__(None, None, None)
    return out
def make_context(device):
    ctx = torch.autocast(device)
    return ctx
def run(model, x):
    ctx = torch.autocast("cuda")
    return helper(model, x, ctx)
def contexts():
    found = [torch.autocast("cuda")]
    ctx = torch.autocast("cpu")
    found.append(ctx)
    return found
""",
        # A decorator, a function wrapped by hand, a partial.
        """
import functools
import torch
@torch.autocast("cuda")
def forward(model, x):
    return model(x)
model.forward = torch.autocast("cuda", dtype=torch.float16)(model.forward)
amp = functools.partial(torch.autocast, "cuda", dtype=torch.bfloat16)
""",
        # Returned directly, or from a lambda.
        """
import torch
from contextlib import nullcontext
def autocast_context(enabled):
    return torch.autocast("cuda") if enabled else nullcontext()
make = lambda: torch.autocast("cuda")
""",
        # An `autocast` that is not torch's.
        """
from mylib import autocast
autocast("cuda")
""",
        # A module variable of a library module: another module may import it.
        """
import torch
AMP_CONTEXT = torch.autocast("cuda", dtype=torch.bfloat16)
def helper():
    pass
""",
        # An attribute read elsewhere in the file, by another object's name or by getattr.
        """
import torch
class Config:
    def __init__(self):
        self.amp_ctx = torch.autocast("cuda")
        self.other_ctx = torch.autocast("cuda")
def train(cfg, model, x):
    with cfg.amp_ctx:
        loss = model(x)
    with getattr(cfg, "other_ctx"):
        loss = model(x)
""",
        # A public attribute, or a class attribute, of a library module: other modules may read it.
        """
import torch
class Precision:
    autocast_context = torch.autocast("cuda", dtype=torch.bfloat16)
    def __init__(self):
        self.amp_context = torch.autocast("cuda", dtype=torch.bfloat16)
""",
        # A class attribute read through the instance.
        """
import torch
class Trainer:
    _amp = torch.autocast("cuda")
    def step(self, x):
        with self._amp:
            return self.model(x)
if __name__ == "__main__":
    Trainer().step(x)
""",
        # A probe: can this machine build an autocast at all?
        """
import torch
def check_amp_available():
    try:
        torch.cuda.amp.autocast(enabled=True)
        return True
    except Exception:
        return False
""",
        # A context manager that enters the autocast around its `yield`, or whose object a
        # `with` binds (and may enter).
        """
import contextlib
import torch
@contextlib.contextmanager
def amp_context():
    with torch.autocast("cuda", dtype=torch.float16):
        yield
@contextlib.contextmanager
def amp_object():
    yield torch.autocast("cuda", dtype=torch.float16)
def train(model, x):
    with amp_context():
        loss = model(x)
    with amp_object() as ctx, ctx:
        loss = model(x)
def numbers():
    yield torch.autocast("cuda")
""",
        # A global set in a function, read in another.
        """
import torch
CTX = None
def setup():
    global CTX
    CTX = torch.autocast("cuda")
""",
    )
    INVALID = (
        # A bare call statement.
        Flagged(
            """
import torch
for x, y in loader:
    torch.autocast("cuda", dtype=torch.float16)
    loss = loss_fn(model(x), y)
    scaler.scale(loss).backward()
""",
            at=((4, 5),),
        ),
        # The legacy spelling, under an alias.
        Flagged(
            """
from torch.cuda.amp import autocast
def train_step(model, x):
    autocast()
    return model(x).sum()
""",
            at=((4, 5),),
        ),
        # Stored in a local the function never reads again.
        Flagged(
            """
import torch
def train_step(model, optimizer, x, amp):
    ctx = torch.amp.autocast("cuda", enabled=amp)
    loss = model(x).sum()
    loss.backward()
    optimizer.step()
""",
            at=((4, 11),),
        ),
        # A conditional expression as a statement.
        Flagged(
            """
import contextlib
import torch
def forward(model, x, amp):
    torch.autocast("cuda") if amp else contextlib.nullcontext()
    return model(x)
""",
            at=((5, 5),),
        ),
        # Stored on self and never read.
        Flagged(
            """
import torch
class Trainer:
    def __init__(self, model):
        self.model = model
        self._amp_context = torch.autocast("cuda", dtype=torch.bfloat16)
    def step(self, x):
        return self.model(x).sum()
""",
            at=((6, 29),),
        ),
        # Yielded by a context manager: `with amp_ctx():` enters the generator only.
        Flagged(
            """
from contextlib import contextmanager
import torch
@contextmanager
def amp_ctx():
    yield torch.autocast("cuda", dtype=torch.float16)
def train(model, opt, scaler, loader):
    for x, y in loader:
        with amp_ctx():
            loss = model(x).sum()
        scaler.scale(loss).backward()
""",
            at=((6, 11),),
        ),
        # A script's module variable the file never reads.
        Flagged(
            """
import torch
ctx = torch.autocast("cuda")
for x in loader:
    loss = model(x).sum()
    loss.backward()
    optimizer.step()
""",
            at=((3, 7),),
        ),
    )


def _blocks(module: cst.Module) -> Tuple[Set[int], Set[int]]:
    """The statements (ids) written directly in a class body, and those directly in the
    body of a `try` that has an `except`."""
    class_bodies: Set[int] = set()
    probes: Set[int] = set()
    # Both are statements: the walk does not go into expressions or small statements.
    for node in iter_tree(module, lambda node: not isinstance(node, (cst.BaseExpression, cst.BaseSmallStatement))):
        if isinstance(node, cst.ClassDef) and isinstance(node.body, cst.IndentedBlock):
            class_bodies.update(id(statement) for statement in node.body.body)
        elif isinstance(node, (cst.Try, cst.TryStar)) and node.handlers and isinstance(node.body, cst.IndentedBlock):
            probes.update(id(statement) for statement in node.body.body)
    return class_bodies, probes


def _is_autocast(model: SemanticModel, call: cst.Call) -> bool:
    qualified = model.qualified(call.func)
    return qualified in AUTOCAST_CLASSES or qualified in LEGACY_AUTOCAST_DEVICE


def _holds(value: cst.BaseExpression, call: cst.Call) -> bool:
    """Whether evaluating `value` may give the object `call` builds itself: the call, or a
    branch of a conditional (`ctx if a else b`) or boolean expression (`amp and ctx`)."""
    if value is call:
        return True
    if isinstance(value, cst.IfExp):
        return _holds(value.body, call) or _holds(value.orelse, call)
    if isinstance(value, cst.BooleanOperation):
        return _holds(value.left, call) or _holds(value.right, call)
    return False


def _discarded(small: cst.BaseSmallStatement, call: cst.Call, unit: CodeUnit, model: SemanticModel, in_class: bool) -> Optional[str]:
    """How the object `call` builds is lost in `small`, its statement: "statement" (never
    stored), "local" or "attribute" (stored and never read); None when it may be used."""
    if isinstance(small, cst.Expr):
        if isinstance(small.value, cst.Yield) and isinstance(small.value.value, cst.BaseExpression):
            return "yielded" if _holds(small.value.value, call) and _yields_to_with(unit, model) else None
        return "statement" if _holds(small.value, call) else None
    if isinstance(small, cst.Assign) and small.value is not None and _holds(small.value, call):
        targets = [target.target for target in small.targets]
    elif isinstance(small, cst.AnnAssign) and small.value is not None and _holds(small.value, call):
        targets = [small.target]
    else:
        return None
    kinds = {_target_unused(target, unit, model, in_class) for target in targets}
    return kinds.pop() if len(kinds) == 1 else None


_CONTEXT_MANAGERS = frozenset({"contextlib.contextmanager", "contextlib.asynccontextmanager"})


def _yields_to_with(unit: CodeUnit, model: SemanticModel) -> bool:
    """Whether what `unit` yields goes to a `with` statement that does not enter it: `unit` is
    a `@contextmanager` generator, and no `with` of this file binds what it yields (`with
    amp_context() as ctx:`, which may enter it next)."""
    function = unit.node
    if not isinstance(function, cst.FunctionDef):
        return False
    if not any(model.qualified(decorator.decorator) in _CONTEXT_MANAGERS for decorator in function.decorators):
        return False
    name = function.name.value
    for node in iter_tree(model.module):
        if isinstance(node, cst.WithItem) and node.asname is not None and isinstance(node.item, cst.Call):
            called = dotted_name(node.item.func)
            if called is not None and called.split(".")[-1] == name:
                return False
    return True


def _target_unused(target: cst.BaseExpression, unit: CodeUnit, model: SemanticModel, in_class: bool) -> Optional[str]:
    if isinstance(target, cst.Name) and not in_class:
        return "local" if _variable_unused(target.value, unit, model) else None
    # A class attribute (`amp = torch.autocast(...)` in a class body) or an instance's.
    if isinstance(target, cst.Name) or (isinstance(target, cst.Attribute) and dotted_name(target) is not None):
        name = target.value if isinstance(target, cst.Name) else target.attr.value  # type: ignore[union-attr]
        return "attribute" if _attribute_unused(name, target, model) else None
    return None  # unpacking, a subscript: kept somewhere


def _variable_unused(name: str, unit: CodeUnit, model: SemanticModel) -> bool:
    """Whether no code that can see the variable `name`, bound in `unit`, reads it: the
    unit's body with its nested functions, lambdas and comprehensions (closures see it), and
    for a module variable the whole file, when the file is a script."""
    node = unit.node
    if isinstance(node, cst.Module):
        # A module variable: another module may import it, unless the file is a script.
        if not model.facts(_Program).script:
            return False
    return not _read_in(node, name)


def _read_in(root: cst.CSTNode, name: str) -> bool:
    """Whether `root` reads the plain name `name` anywhere (or may, through `locals()` and
    friends, or a `global`/`nonlocal` declaration)."""
    stores = set()
    for node in iter_tree(root):
        if isinstance(node, (cst.Global, cst.Nonlocal)) and any(n.name.value == name for n in node.names):
            return True
        if isinstance(node, cst.Call) and isinstance(node.func, cst.Name) and node.func.value in _INTROSPECTION:
            return True
        if isinstance(node, cst.Attribute):
            stores.add(id(node.attr))  # `x.name` is no read of `name`
        elif isinstance(node, cst.AssignTarget) and isinstance(node.target, cst.Name):
            stores.add(id(node.target))
        elif isinstance(node, cst.AnnAssign) and isinstance(node.target, cst.Name):
            stores.add(id(node.target))
        elif isinstance(node, cst.Arg) and node.keyword is not None:
            stores.add(id(node.keyword))
        elif isinstance(node, cst.Param):
            stores.add(id(node.name))
        elif isinstance(node, (cst.FunctionDef, cst.ClassDef)):
            stores.add(id(node.name))
        elif isinstance(node, cst.Name) and node.value == name and id(node) not in stores:
            return True
    return False


_INTROSPECTION = frozenset({"locals", "vars", "eval", "exec"})


class _Program(Analysis):
    """Whether the file is a script (`_is_script`), found once per file: asked for every
    autocast call stored at module level, a scan of the module each time was quadratic work
    the step meter did not count (reliability round 4, N4)."""

    def __init__(self, model: SemanticModel) -> None:
        super().__init__(model)
        self.script = _is_script(model.module)


def _is_script(module: cst.Module) -> bool:
    """A module run as a program: an `if __name__ == "__main__":` block, or a loop in its
    top-level code (a flat training script). A module of definitions and constants is a
    library, whose variables other modules may import."""
    for statement in module.body:
        if isinstance(statement, (cst.For, cst.While)):
            return True
        if isinstance(statement, cst.If) and "__name__" in source_text(statement.test) and "__main__" in source_text(statement.test):
            return True
    return False


def _attribute_unused(attribute: str, target: cst.BaseExpression, model: SemanticModel) -> bool:
    """Whether the attribute `attribute` (bound by `target`: `self.amp_ctx`, or `amp_ctx` in
    a class body) is surely never read: the file is a script or the name is private, and it
    appears nowhere else in the file, not as another attribute (`cfg.amp_ctx`), a name, or in
    a string (`getattr(cfg, "amp_ctx")`). A public attribute of a library module may be read
    by other modules."""
    if not attribute.startswith("_") and not model.facts(_Program).script:
        return False
    bound = target.attr if isinstance(target, cst.Attribute) else target
    for node in iter_tree(model.module):
        if isinstance(node, cst.Attribute) and node is not target and node.attr.value == attribute:
            return False
        if isinstance(node, cst.Name) and node.value == attribute and node is not bound:
            return False  # a keyword, a parameter, a local of that name: maybe the same object
        if isinstance(node, (cst.SimpleString, cst.FormattedStringText)) and attribute in node.value:
            return False
    return True


def _message(call: cst.Call, lost: str) -> Message:
    built = f"`{source_text(call)}`"
    enabled = next((arg.value for arg in call.args if arg.keyword is not None and arg.keyword.value == "enabled"), None)
    off = isinstance(enabled, cst.Name) and enabled.value == "False"
    if lost == "statement":
        title = f"{built} builds an autocast context and throws it away: nothing runs under it"
    elif lost == "yielded":
        title = f"{built} is yielded by a `@contextmanager` function, so a `with` of it enters the generator, not the autocast: nothing runs under it"
    elif lost == "local":
        title = f"{built} is stored and never entered: nothing runs under it"
    else:
        title = f"{built} is stored in an attribute that nothing reads: nothing runs under it"
    effect = (
        "It does not switch autocast off either: the code after it still runs under the outer region."
        if off
        else "The code meant to run in mixed precision runs in float32: correct, but without its speed and memory savings."
    )
    if lost == "yielded":
        return Message(title, help=f"{effect} Enter it around the `yield`: `with {source_text(call)}:` then `yield`.")
    return Message(title, help=f"{effect} Enter it: `with {source_text(call)}:` around the forward pass and the loss.")
