"""One walk over a module: its scopes and bindings, its code units, and every call with the
context it runs in.

Everything later stages need from the tree is collected here, in a single pass with the fast
walker (`amplint.semantic.walk`): which names each scope binds and to what, the imports, the
code units (the module's top level and each function), and for each call the unit it runs in
and the stack of frames around it (`with` items, loops, the branch of an `if`). The calls of
each statement are kept in evaluation order, so the flow analysis never walks an expression
again.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, FrozenSet, Iterator, List, Optional, Sequence, Set, Tuple, Union

import libcst as cst

from amplint.semantic.names import dotted_name, names_bound, names_read, roots
from amplint.semantic.pytorch.api import ImportAliases
from amplint.semantic.walk import children, post_order, top_level_lines

ScopeNode = Union[cst.Module, cst.ClassDef, cst.FunctionDef]


# --------------------------------------------------------------------------- scopes and bindings


@dataclass(eq=False)
class Binding:
    """One place a name is given a value: an assignment, a parameter, an import, a `for`."""

    name: str
    scope: "Scope"
    value: Optional[cst.BaseExpression]  # None when not a plain value (unpacking, a loop target)
    kind: str  # "assign", "param", "import", "for", "with", "def", "class", "augassign", "walrus", "except"
    node: cst.CSTNode
    # Where the statement runs, which is where its value's names are looked up: the method
    # for `self.ctx = torch.autocast(dtype=dt)`, whose binding lives in the class.
    home: Optional["Scope"] = None
    # The whole right-hand side, also when `value` is None for unpacking:
    # `model, optimizer = accelerator.prepare(model, optimizer)`.
    source: Optional[cst.BaseExpression] = None

    @property
    def value_scope(self) -> "Scope":
        return self.home or self.scope


@dataclass(eq=False)
class Scope:
    """A module, a class body or a function: where names are bound."""

    kind: str  # "module", "class", "function"
    node: ScopeNode
    name: str  # qualified within the module: "<module>", "Trainer", "Trainer.step", "main.inner"
    parent: Optional["Scope"]
    bindings: Dict[str, List[Binding]] = field(default_factory=dict)
    params: List[str] = field(default_factory=list)
    declared_global: Set[str] = field(default_factory=set)
    # Classes: what `self.x` is set to, in the class body or any of its methods.
    attributes: Dict[str, List[Binding]] = field(default_factory=dict)
    bases: List[str] = field(default_factory=list)

    @property
    def key(self) -> str:
        """A stable, readable identity for this scope within its module."""
        return {"module": "mod", "class": "cls", "function": "fn"}[self.kind] + ":" + self.name

    @property
    def class_scope(self) -> Optional["Scope"]:
        """For a method: the class it is defined in."""
        if self.kind == "function" and self.parent is not None and self.parent.kind == "class":
            return self.parent
        return None

    def bind(self, binding: Binding) -> None:
        self.bindings.setdefault(binding.name, []).append(binding)


# --------------------------------------------------------------------------- frames


@dataclass(frozen=True, eq=False)
class WithFrame:
    """Inside the body of `with item:` (an autocast, a no_grad, or anything else)."""

    item: cst.BaseExpression
    scope: Scope
    statement: cst.With


@dataclass(frozen=True, eq=False)
class LoopFrame:
    node: Union[cst.For, cst.While]


@dataclass(frozen=True, eq=False)
class GuardFrame:
    """Inside the branch of an `if` taken when `test` evaluates to `outcome`."""

    test: cst.BaseExpression
    outcome: bool


Frame = Union[WithFrame, LoopFrame, GuardFrame]
Frames = Tuple[Frame, ...]


# --------------------------------------------------------------------------- units and calls


@dataclass(eq=False)
class CodeUnit:
    """A module's top-level code or one function body: the scope of flow analysis."""

    node: Union[cst.Module, cst.FunctionDef]
    name: str
    scope: Scope
    enclosing: Optional["CodeUnit"] = None  # the function or module it is defined in
    class_name: Optional[str] = None  # for methods
    decorators: Tuple[cst.BaseExpression, ...] = ()
    calls: List["CallRecord"] = field(default_factory=list)
    # (variables bound, variables read) for each assignment, in source order: what flows into what.
    assignments: List[Tuple[FrozenSet[str], FrozenSet[str]]] = field(default_factory=list)
    grad_reads: List[cst.Attribute] = field(default_factory=list)  # `p.grad`, `x.grad`
    products: List["ProductRecord"] = field(default_factory=list)  # `a @ b`, in evaluation order

    @property
    def is_module(self) -> bool:
        return isinstance(self.node, cst.Module)

    @property
    def body(self) -> List[cst.BaseStatement]:
        body = self.node.body
        if isinstance(body, cst.IndentedBlock):
            return list(body.body)
        if isinstance(body, cst.SimpleStatementSuite):
            return [body]  # `def f(): a(); b()` on one line
        return list(body)

    @property
    def parameters(self) -> List[str]:
        return list(self.scope.params)


@dataclass(eq=False)
class CallRecord:
    node: cst.Call
    unit: CodeUnit
    frames: Frames
    # False inside a lambda: the call runs when the lambda is called, not here.
    immediate: bool = True


@dataclass(eq=False)
class ProductRecord:
    """An `a @ b`: a matrix product that is no call but that autocast recasts like `torch.matmul`."""

    node: cst.BinaryOperation
    unit: CodeUnit
    frames: Frames


@dataclass(eq=False)
class StatementRecord:
    """What evaluating one simple statement or compound-statement header does."""

    calls: List[CallRecord] = field(default_factory=list)  # in evaluation order
    walruses: List[cst.NamedExpr] = field(default_factory=list)
    grad_reads: List[cst.Attribute] = field(default_factory=list)  # `p.grad`


@dataclass(eq=False)
class ModuleIndex:
    module: cst.Module
    aliases: ImportAliases
    module_scope: Scope
    scopes: List[Scope]
    units: List[CodeUnit]
    calls: List[CallRecord]
    classes: Dict[str, Scope]  # class name -> its scope (the last one defined under that name)
    # `args.dtype = ...`, `cfg.scaler = ...`: dotted targets not rooted at self, file-wide.
    dotted: Dict[str, List[Binding]]
    statements: Dict[int, StatementRecord]  # id(statement or compound header node) -> record
    loops: List[Tuple[CodeUnit, Union[cst.For, cst.While], Frames]]
    withs: List[Tuple[CodeUnit, WithFrame, Frames]]  # every `with` item, with the frames around it
    unit_of_scope: Dict[int, CodeUnit]
    _owners: Dict[int, List[Tuple[cst.CSTNode, StatementRecord]]] = field(default_factory=dict)
    _lines: Dict[int, Union[cst.SimpleStatementLine, cst.SimpleStatementSuite]] = field(default_factory=dict)
    _owners_of_calls: Dict[int, cst.CSTNode] = field(default_factory=dict)
    _blocks: Dict[int, Sequence[cst.CSTNode]] = field(default_factory=dict)  # id(statement) -> its block's statements
    _with_of_item: Dict[int, cst.With] = field(default_factory=dict)  # id(with item's expression) -> the `with`
    _calls_by_last_name: Optional[Dict[str, List[CallRecord]]] = None
    _top_lines: Optional[Dict[int, int]] = None

    def statement_of(self, call: cst.Call) -> Optional[cst.BaseStatement]:
        """The statement a call is evaluated in, as it stands in its block: the line of a
        simple statement that is alone on its line, or the compound statement whose header
        holds it (`if`, `with`, `for`). None inside a lambda, or on a line of several."""
        owner = self._owners_of_calls.get(id(call))
        if owner is None:
            return None
        line = self._lines.get(id(owner))
        if line is None:
            return owner if isinstance(owner, cst.BaseCompoundStatement) else None
        if isinstance(line, cst.SimpleStatementLine) and len(line.body) == 1:
            return line
        return None

    def block_of(self, statement: cst.CSTNode) -> Optional[Sequence[cst.CSTNode]]:
        """The statements of the block `statement` stands in (by identity): a module's, an
        indented block's, or a one-line suite's small statements. None for an `elif`."""
        return self._blocks.get(id(statement))

    def with_of(self, item: cst.BaseExpression) -> Optional[cst.With]:
        """The `with` statement that enters `item` (by identity)."""
        return self._with_of_item.get(id(item))

    def top_level_line(self, statement: cst.CSTNode) -> Optional[int]:
        """The line a top-level class or function starts on (`walk.top_level_lines`); None for
        a node that is not a top-level statement."""
        if self._top_lines is None:  # asked only by what a summary exports: worked out on first use
            self._top_lines = top_level_lines(self.module)
        return self._top_lines.get(id(statement))

    def record(self, node: cst.CSTNode) -> Optional[StatementRecord]:
        return self.statements.get(id(node))

    def statement_records(self, unit: CodeUnit) -> List[Tuple[cst.CSTNode, "StatementRecord"]]:
        """(statement, record) for the statements of `unit` that hold calls or reads."""
        return [(node, record) for node, record in self._owners.get(id(unit), ())]

    def calls_to(self, last_name: str) -> Iterator[CallRecord]:
        """Calls whose callee's last dotted part is `last_name`: `train(...)`, `self.train(...)`."""
        if self._calls_by_last_name is None:  # asked once per parameter: indexed on first use
            self._calls_by_last_name = {}
            for record in self.calls:
                name = dotted_name(record.node.func)
                if name is not None:
                    self._calls_by_last_name.setdefault(name.rsplit(".", 1)[-1], []).append(record)
        return iter(self._calls_by_last_name.get(last_name, ()))


# --------------------------------------------------------------------------- the walk


def build_index(module: cst.Module) -> ModuleIndex:
    return _Indexer(module).index


class _Indexer:
    def __init__(self, module: cst.Module) -> None:
        self.aliases = ImportAliases()
        self.scopes: List[Scope] = []
        self.units: List[CodeUnit] = []
        self.calls: List[CallRecord] = []
        self.classes: Dict[str, Scope] = {}
        self.dotted: Dict[str, List[Binding]] = {}
        self.statements: Dict[int, StatementRecord] = {}
        self.loops: List[Tuple[CodeUnit, Union[cst.For, cst.While], Frames]] = []
        self.withs: List[Tuple[CodeUnit, WithFrame, Frames]] = []
        self.unit_of_scope: Dict[int, CodeUnit] = {}
        self.owners: Dict[int, List[Tuple[cst.CSTNode, StatementRecord]]] = {}
        self.lines: Dict[int, Union[cst.SimpleStatementLine, cst.SimpleStatementSuite]] = {}
        self.owners_of_calls: Dict[int, cst.CSTNode] = {}
        self.blocks: Dict[int, Sequence[cst.CSTNode]] = {}
        self.with_of_item: Dict[int, cst.With] = {}

        scope = self._scope("module", module, "<module>", None)
        unit = CodeUnit(module, "<module>", scope)
        self._add_unit(unit)
        self._block(module.body, scope, unit, ())
        self.index = ModuleIndex(
            module=module,
            aliases=self.aliases,
            module_scope=scope,
            scopes=self.scopes,
            units=self.units,
            calls=self.calls,
            classes=self.classes,
            dotted=self.dotted,
            statements=self.statements,
            loops=self.loops,
            withs=self.withs,
            unit_of_scope=self.unit_of_scope,
            _owners=self.owners,
            _lines=self.lines,
            _owners_of_calls=self.owners_of_calls,
            _blocks=self.blocks,
            _with_of_item=self.with_of_item,
        )

    def _scope(self, kind: str, node: ScopeNode, name: str, parent: Optional[Scope]) -> Scope:
        scope = Scope(kind, node, name, parent)
        self.scopes.append(scope)
        return scope

    def _add_unit(self, unit: CodeUnit) -> None:
        self.units.append(unit)
        self.unit_of_scope[id(unit.scope)] = unit

    # statements
    def _block(self, statements, scope: Scope, unit: CodeUnit, frames: Frames) -> None:
        for statement in statements:
            self.blocks[id(statement)] = statements
            self._statement(statement, scope, unit, frames)

    def _suite(self, suite: cst.BaseSuite, scope: Scope, unit: CodeUnit, frames: Frames) -> None:
        if isinstance(suite, cst.IndentedBlock):
            self._block(suite.body, scope, unit, frames)
        else:
            self._block(suite.body, scope, unit, frames)  # SimpleStatementSuite: small statements

    def _statement(self, node: cst.CSTNode, scope: Scope, unit: CodeUnit, frames: Frames) -> None:
        if isinstance(node, (cst.SimpleStatementLine, cst.SimpleStatementSuite)):
            for small in node.body:
                self.lines[id(small)] = node
                self._small(small, scope, unit, frames)
        elif isinstance(node, cst.If):
            self._expression(node.test, node, scope, unit, frames)
            self._suite(node.body, scope, unit, frames + (GuardFrame(node.test, True),))
            if node.orelse is not None:
                orelse_frames = frames + (GuardFrame(node.test, False),)
                if isinstance(node.orelse, cst.If):
                    self._statement(node.orelse, scope, unit, orelse_frames)
                else:
                    self._suite(node.orelse.body, scope, unit, orelse_frames)
        elif isinstance(node, cst.For):
            self._expression(node.iter, node, scope, unit, frames)
            self._flows(unit, self._bind_target(node.target, None, "for", node, scope, node.iter), node.iter)
            self.loops.append((unit, node, frames))
            inner = frames + (LoopFrame(node),)
            self._suite(node.body, scope, unit, inner)
            if node.orelse is not None:
                self._suite(node.orelse.body, scope, unit, frames)
        elif isinstance(node, cst.While):
            self._expression(node.test, node, scope, unit, frames)
            self.loops.append((unit, node, frames))
            self._suite(node.body, scope, unit, frames + (LoopFrame(node),))
            if node.orelse is not None:
                self._suite(node.orelse.body, scope, unit, frames)
        elif isinstance(node, cst.With):
            inner = frames
            for item in node.items:
                # Each item is entered under the ones before it.
                self._expression(item.item, node, scope, unit, inner)
                if item.asname is not None:
                    bound = self._bind_target(item.asname.name, None, "with", node, scope, item.item)
                    self._flows(unit, bound, item.item)
                frame = WithFrame(item.item, scope, node)
                self.with_of_item[id(item.item)] = node
                self.withs.append((unit, frame, inner))
                inner = inner + (frame,)
            self._suite(node.body, scope, unit, inner)
        elif isinstance(node, (cst.Try, cst.TryStar)):
            self._suite(node.body, scope, unit, frames)
            for handler in node.handlers:
                if handler.type is not None:
                    self._expression(handler.type, handler, scope, unit, frames)
                if handler.name is not None:
                    self._bind_target(handler.name.name, None, "except", handler, scope)
                self._suite(handler.body, scope, unit, frames)
            if node.orelse is not None:
                self._suite(node.orelse.body, scope, unit, frames)
            if node.finalbody is not None:
                self._suite(node.finalbody.body, scope, unit, frames)
        elif isinstance(node, cst.Match):
            self._expression(node.subject, node, scope, unit, frames)
            for case in node.cases:
                self._suite(case.body, scope, unit, frames)
        elif isinstance(node, cst.FunctionDef):
            self._function(node, scope, unit, frames)
        elif isinstance(node, cst.ClassDef):
            self._class(node, scope, unit, frames)

    def _small(self, node: cst.BaseSmallStatement, scope: Scope, unit: CodeUnit, frames: Frames) -> None:
        if isinstance(node, cst.Assign):
            self._expression(node.value, node, scope, unit, frames)
            single = len(node.targets) == 1 and not isinstance(node.targets[0].target, (cst.Tuple, cst.List))
            for target in node.targets:
                self._expression_in_target(target.target, node, scope, unit, frames)
                bound = self._bind_target(target.target, node.value if single else None, "assign", node, scope, node.value)
                self._flows(unit, bound, node.value)
        elif isinstance(node, cst.AnnAssign):
            if node.value is not None:
                self._expression(node.value, node, scope, unit, frames)
                self._flows(unit, self._bind_target(node.target, node.value, "assign", node, scope), node.value)
            else:
                self._bind_target(node.target, None, "assign", node, scope)
        elif isinstance(node, cst.AugAssign):
            self._expression(node.value, node, scope, unit, frames)
            self._expression_in_target(node.target, node, scope, unit, frames)
            if isinstance(node.target, cst.Attribute) and node.target.attr.value == "grad":
                # `p.grad += noise` reads the gradient it updates.
                self._record(node, unit).grad_reads.append(node.target)
                unit.grad_reads.append(node.target)
            bound = self._bind_target(node.target, None, "augassign", node, scope)
            self._flows(unit, bound, node.value, extra=bound)
        elif isinstance(node, cst.Import):
            self.aliases.add_import(node)
            for alias in node.names:
                local = alias.asname.name if alias.asname is not None else None
                name = dotted_name(local) if local is not None else (dotted_name(alias.name) or "").split(".")[0]
                if name:
                    scope.bind(Binding(name, scope, None, "import", node))
        elif isinstance(node, cst.ImportFrom):
            self.aliases.add_import_from(node)
            if not isinstance(node.names, cst.ImportStar):
                for alias in node.names:
                    local = alias.asname.name if alias.asname is not None else alias.name
                    name = dotted_name(local)
                    if name:
                        scope.bind(Binding(name, scope, None, "import", node))
        elif isinstance(node, (cst.Global, cst.Nonlocal)):
            if isinstance(node, cst.Global):
                scope.declared_global.update(item.name.value for item in node.names)
        else:
            # Expr, Return, Raise, Assert, Del, ...: whatever expressions they hold.
            for child in children(node):
                self._expression(child, node, scope, unit, frames)

    # definitions
    def _function(self, node: cst.FunctionDef, scope: Scope, unit: CodeUnit, frames: Frames) -> None:
        for decorator in node.decorators:
            self._expression(decorator.decorator, node, scope, unit, frames)
        for param in self._params(node.params):
            if param.default is not None:
                self._expression(param.default, node, scope, unit, frames)
        scope.bind(Binding(node.name.value, scope, None, "def", node))
        prefix = "" if scope.kind == "module" else scope.name + "."
        inner = self._scope("function", node, prefix + node.name.value, scope)
        for param in self._params(node.params):
            inner.params.append(param.name.value)
            inner.bind(Binding(param.name.value, inner, None, "param", param))
        for star in (node.params.star_arg, node.params.star_kwarg):
            if isinstance(star, cst.Param):
                inner.bind(Binding(star.name.value, inner, None, "param", star))
        class_scope = inner.class_scope
        child = CodeUnit(
            node,
            inner.name,
            inner,
            enclosing=unit,
            class_name=class_scope.name if class_scope is not None else None,
            decorators=tuple(d.decorator for d in node.decorators),
        )
        self._add_unit(child)
        body = node.body
        if isinstance(body, cst.IndentedBlock):
            self._block(body.body, inner, child, ())
        else:
            self._block(body.body, inner, child, ())

    @staticmethod
    def _params(params: cst.Parameters) -> List[cst.Param]:
        return [*params.posonly_params, *params.params, *params.kwonly_params]

    def _class(self, node: cst.ClassDef, scope: Scope, unit: CodeUnit, frames: Frames) -> None:
        for decorator in node.decorators:
            self._expression(decorator.decorator, node, scope, unit, frames)
        for arg in node.bases:
            self._expression(arg.value, node, scope, unit, frames)
        scope.bind(Binding(node.name.value, scope, None, "class", node))
        prefix = "" if scope.kind == "module" else scope.name + "."
        inner = self._scope("class", node, prefix + node.name.value, scope)
        inner.bases = [name for name in (dotted_name(arg.value) for arg in node.bases) if name]
        self.classes[node.name.value] = inner
        # The class body runs where the class is defined: its calls belong to that unit.
        body = node.body
        self._block(body.body if isinstance(body, cst.IndentedBlock) else body.body, inner, unit, frames)

    # bindings
    def _bind_target(
        self, target: cst.BaseExpression, value, kind: str, node: cst.CSTNode, scope: Scope, source=None
    ) -> List[str]:
        bound = names_bound(target)
        for name in bound:
            self._bind(name, value, kind, node, scope, source if source is not None else value)
        return bound

    def _flows(self, unit: CodeUnit, bound: List[str], read_from: Optional[cst.CSTNode], extra=()) -> None:
        reads = roots([*(names_read(read_from) if read_from is not None else ()), *extra])
        unit.assignments.append((frozenset(roots(bound)), frozenset(reads)))

    def _bind(self, name: str, value, kind: str, node: cst.CSTNode, scope: Scope, source=None) -> None:
        if "." in name:
            head = name.split(".", 1)[0]
            class_scope = scope if scope.kind == "class" else scope.class_scope
            if head == "self" and class_scope is not None:
                class_scope.attributes.setdefault(name, []).append(Binding(name, class_scope, value, kind, node, scope, source))
            else:
                self.dotted.setdefault(name, []).append(Binding(name, scope, value, kind, node, scope, source))
            return
        if scope.kind == "class":
            # `class Trainer: scaler = GradScaler(...)` is read as `self.scaler` too.
            scope.attributes.setdefault(f"self.{name}", []).append(Binding(f"self.{name}", scope, value, kind, node, scope, source))
        target = scope
        if name in scope.declared_global:
            while target.parent is not None:
                target = target.parent
        target.bind(Binding(name, target, value, kind, node, scope, source))

    def _record(self, owner: cst.CSTNode, unit: CodeUnit) -> StatementRecord:
        record = self.statements.get(id(owner))
        if record is None:
            record = self.statements[id(owner)] = StatementRecord()
            self.owners.setdefault(id(unit), []).append((owner, record))
        return record

    # expressions
    def _expression_in_target(self, target: cst.BaseExpression, owner, scope: Scope, unit: CodeUnit, frames: Frames) -> None:
        """Calls inside an assignment target run too: `d[key(x)] = v`, `self.get().x = v`."""
        if isinstance(target, (cst.Name, cst.Attribute)) and dotted_name(target) is not None:
            return
        self._expression(target, owner, scope, unit, frames)

    def _expression(self, node: cst.CSTNode, owner: cst.CSTNode, scope: Scope, unit: CodeUnit, frames: Frames) -> None:
        record: Optional[StatementRecord] = None
        lambdas: List[cst.Lambda] = []

        def descend(current: cst.CSTNode) -> bool:
            if type(current) is cst.Lambda:
                lambdas.append(current)
                return False
            return True

        for current in post_order(node, descend):
            kind = type(current)
            if kind is cst.Call:
                if record is None:
                    record = self._record(owner, unit)
                call = CallRecord(current, unit, frames)
                self.owners_of_calls[id(current)] = owner
                record.calls.append(call)
                self.calls.append(call)
                unit.calls.append(call)
            elif kind is cst.NamedExpr:
                if record is None:
                    record = self._record(owner, unit)
                record.walruses.append(current)
                self._flows(unit, self._bind_target(current.target, current.value, "walrus", current, scope), current.value)
            elif kind is cst.Attribute and current.attr.value == "grad":
                if record is None:
                    record = self._record(owner, unit)
                record.grad_reads.append(current)
                unit.grad_reads.append(current)
            elif kind is cst.BinaryOperation and type(current.operator) is cst.MatrixMultiply:
                unit.products.append(ProductRecord(current, unit, frames))
        for lam in lambdas:
            for current in post_order(lam.body):
                if isinstance(current, cst.Call):
                    call = CallRecord(current, unit, frames, immediate=False)
                    self.calls.append(call)
                    unit.calls.append(call)


def values_derived_from(unit: CodeUnit, names: Set[str]) -> Set[str]:
    """`names` plus every variable assigned, directly or transitively, from one of them."""
    derived = set(names)
    changed = True
    while changed:
        changed = False
        for targets, reads in unit.assignments:
            if reads & derived and not targets <= derived:
                derived |= targets
                changed = True
    return derived


def binding_key(binding: Binding) -> str:
    if binding.scope.kind == "class" and binding.name.startswith("self."):
        return f"{binding.scope.key}:{binding.name}"
    if "." in binding.name:
        return f"dot:{binding.name}"
    return f"{binding.scope.key}:{binding.name}"


def all_bindings(index: ModuleIndex) -> Iterator[Binding]:
    for scope in index.scopes:
        for bindings in scope.bindings.values():
            yield from bindings
        for bindings in scope.attributes.values():
            yield from bindings
    for bindings in index.dotted.values():
        yield from bindings
