"""Which variables hold GradScalers and optimizers, and which frameworks scale the loss.

A variable is a scaler when the file builds a GradScaler into it, annotates it as one, or uses
it as only a scaler is used (`s.unscale_(opt)`, `s.scale(loss).backward()`, `s.step(optimizer)`:
an optimizer's own step() takes a closure, never an optimizer). Identity is by binding: a
`scaler` local of one function is not the `scaler` of another. A variable that the file
visibly fills with something else (a class of its own, sklearn's `StandardScaler()`) is not a
scaler, whatever its methods are called.

Frameworks own a scaler when their precision may be float16 (`amplint.semantic.pytorch.
frameworks` says which frameworks and settings): `Accelerator(mixed_precision="fp16")`,
`Accelerator(mixed_precision=args.mixed_precision)` with an argparse option whose choices
include "fp16", Lightning's `Trainer(precision="16-mixed")` with a `LightningModule` of the
file, `Fabric(precision=16 if fp16 else 32)`. Their backward scales, their clip unscales first,
and the optimizers they prepare step through their scaler. A framework that surely runs in
float16 has a scaler that is on (`enabled=True`); one that only may has one whose state is
unknown (`enabled=None`), which the layer, like a `GradScaler(enabled=args.amp)`, treats as on.
A precision that cannot be resolved is not float16.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, FrozenSet, Iterator, List, Optional, Set, Tuple

import libcst as cst

from amplint.semantic.pytorch import api as torch_api, frameworks, vocabulary
from amplint.semantic.conditions import Assumption, Condition, assumptions
from amplint.semantic.constants import Constants
from amplint.semantic.foreign import ExternalModules, FactoryReturn, import_targets
from amplint.semantic.framework_settings import class_scaler_key, float16_of, framework_of, loop_framework_of, precisions, reads_parameter
from amplint.semantic.index import Binding, CallRecord, ModuleIndex, Scope, all_bindings, binding_key
from amplint.semantic.types import ScalerInfo
from amplint.semantic.names import dotted_name, source_text
from amplint.semantic.walk import iter_tree, own_returns
from amplint.semantic.resolve import Resolver, argument, passed_for, passed_for_parameter, split_args


@dataclass
class ScalerFacts:
    scalers: Dict[str, ScalerInfo] = field(default_factory=dict)
    # Variables named like scalers that are used as objects which may scale, but are not
    # GradScalers we can see built: timm's NativeScaler `loss_scaler(loss, optimizer)`, a
    # scaler passed in and handed on.
    scaler_like: Set[str] = field(default_factory=set)
    optimizers: Set[str] = field(default_factory=set)
    # Optimizer variable -> the framework scaler whose step it is (accelerate.prepare,
    # Fabric.setup, Lightning's self.optimizers()).
    prepared: Dict[str, str] = field(default_factory=dict)
    # Classes of the file that a framework may train in float16 (LightningModule classes
    # under a float16 Trainer, Trainer subclasses under float16 TrainingArguments): class
    # name -> the framework's name. Their scaler's key is `class_scaler_key`.
    fp16_classes: Dict[str, str] = field(default_factory=dict)
    # The classes of other modules whose instances the file hands to a training method of a
    # framework object that may be float16 (`L.Trainer(precision="16-mixed").fit(LitModel())`,
    # `Framework.training_methods`), as imported: (module, level, name, framework) -> whether
    # float16 is sure rather than one of several settings. Exported as the summary's `trains`.
    trained_imports: Dict[Tuple[Optional[str], int, str, str], bool] = field(default_factory=dict)
    # Training loops a framework builds that may autocast in float16 with no scaler
    # (ignite's `create_supervised_trainer(..., amp_mode="amp")`): (the call, the
    # framework's name, whether float16 is sure rather than one of several settings).
    unscaled_loops: List[Tuple[cst.Call, str, bool]] = field(default_factory=list)
    # Every GradScaler construction (and of a framework's scaler the user's code owns,
    # `frameworks.Framework.user_owns_state`): (the binding it fills, the call).
    constructions: List[Tuple[Binding, cst.Call]] = field(default_factory=list)
    # Top-level functions that build and return a framework object (`FactoryReturn`), by name.
    factories: Dict[str, FactoryReturn] = field(default_factory=dict)
    # The summaries of the linted modules the file imports: scalers their instances hold.
    external: Optional[ExternalModules] = None

    def info(self, key: Optional[str]) -> Optional[ScalerInfo]:
        """The scaler `key` names: one of the file's, or one an instance of another linted
        module's class holds (`ext:<path>:<key>`, as that module's summary describes it)."""
        if key is None:
            return None
        info = self.scalers.get(key)
        if info is None and key.startswith("ext:") and self.external is not None:
            info = self.external.scaler(key)
        return info

    def is_live(self, key: Optional[str], facts: FrozenSet[Assumption] = frozenset()) -> bool:
        """Whether the scaler `key` is on, given what a path assumed."""
        info = self.info(key)
        return info is not None and info.live_under(facts)


def find_scalers(
    index: ModuleIndex, resolver: Resolver, external: Optional[ExternalModules] = None, constants: Optional[Constants] = None
) -> ScalerFacts:
    return _ScalerFinder(index, resolver, external, constants).facts


class _ScalerFinder:
    def __init__(
        self, index: ModuleIndex, resolver: Resolver, external: Optional[ExternalModules] = None, constants: Optional[Constants] = None
    ) -> None:
        self.index = index
        self.resolver = resolver
        self.external = external
        self.constants = constants or Constants(index, resolver)
        self.facts = ScalerFacts(external=external)
        bindings = list(all_bindings(index))
        constructions: Dict[str, List[Tuple[Optional[bool], List[Assumption], str]]] = {}
        other_values: Dict[str, bool] = {}  # key -> every value is visibly not a scaler
        for binding in bindings:
            key = binding_key(binding)
            built = self._scaler_construction(binding.value, binding.value_scope)
            if built is not None:
                enabled, requirements, call = built
                constructions.setdefault(key, []).append((enabled, requirements, binding.name))
                self.facts.constructions.append((binding, call))
            else:
                other_values[key] = other_values.get(key, True) and self._visibly_not_a_scaler(binding)
            if binding.kind == "param" and isinstance(binding.node, cst.Param):
                annotation = binding.node.annotation
                if annotation is not None and "GradScaler" in source_text(annotation.annotation):
                    constructions.setdefault(key, []).append((None, [], binding.name))
            elif isinstance(binding.node, cst.AnnAssign) and "GradScaler" in source_text(binding.node.annotation.annotation):
                constructions.setdefault(key, []).append((None, [], binding.name))

        used = self._used_as_scalers()
        params = {f"{s.key}:{p}": (s, p) for s in index.scopes if s.kind == "function" for p in s.params}
        for key, entries in constructions.items():
            name = entries[0][2]
            if key in params:
                # A parameter can hold any scaler a caller passes: its state is unknown, unless
                # every call of the file passes a disabled one.
                entries = entries + [(self._passed_enabled(*params[key]), [], name)]
            states = {enabled for enabled, _, _ in entries}
            enabled: Optional[bool] = states.pop() if len(states) == 1 else None
            requirements = list(_requirements(name))
            if len(entries) == 1:
                requirements.extend(entries[0][1])
            calls = tuple(call for binding, call in self.facts.constructions if binding_key(binding) == key)
            self.facts.scalers[key] = ScalerInfo(key, name, enabled, tuple(requirements), None, calls)
        for key, name in used.items():
            if key not in self.facts.scalers and not other_values.get(key, False):
                enabled = self._passed_enabled(*params[key]) if key in params else None
                self.facts.scalers[key] = ScalerInfo(key, name, enabled, _requirements(name))
        self._frameworks(bindings)
        self._scaler_like()
        self._optimizers(bindings)

    # GradScalers
    def _scaler_construction(
        self, value: Optional[cst.BaseExpression], scope: Scope
    ) -> Optional[Tuple[Optional[bool], List[Assumption], cst.Call]]:
        """(enabled, what must hold for it to be live, the call) when `value` builds a GradScaler."""
        if isinstance(value, cst.IfExp):
            for branch, outcome in ((value.body, True), (value.orelse, False)):
                built = self._scaler_construction(branch, scope)
                if built is not None:
                    return built[0], built[1] + assumptions(value.test, outcome), built[2]
            return None
        if not isinstance(value, cst.Call) or not self.is_grad_scaler(value.func):
            return None
        for arg in value.args:
            if arg.keyword is not None and arg.keyword.value == "enabled":
                literal = self.resolver.boolean(arg.value, scope)
                if literal is None:
                    # `enabled=use_amp`, a parameter every construction of the file leaves at False.
                    literal = self.constants.truth(arg.value, scope)
                if literal is not None:
                    return literal, [], value
                return None, assumptions(arg.value, True), value
        return True, [], value

    def _passed_enabled(self, function: Scope, parameter: str) -> Optional[bool]:
        """False when every call of the file to `function` passes a GradScaler built disabled
        for `parameter` (or leaves a default that is one); None when unsure."""
        param = next((b for b in function.bindings.get(parameter, ()) if b.kind == "param"), None)
        calls = self.constants.calls_of(function) if param is not None else []
        if not calls or not isinstance(param.node, cst.Param):  # type: ignore[union-attr]
            return None
        for record, bound_self in calls:
            passed = passed_for_parameter(record.node, function.params, parameter, bound_self)
            where = record.unit.scope
            if passed is None:
                passed, where = param.node.default, function.parent or function  # type: ignore[union-attr]
            if passed is None or any(arg.star for arg in record.node.args) or self._built_enabled(passed, where) is not False:
                return None
        return False

    def _built_enabled(self, value: cst.BaseExpression, scope: Scope, depth: int = 0) -> Optional[bool]:
        """Whether the GradScaler `value` builds, or that the name `value` is given, is enabled."""
        built = self._scaler_construction(value, scope)
        if built is not None:
            return built[0] if not built[1] else None
        name = dotted_name(value)
        bindings = self.resolver.bindings(name, scope) if name is not None and "." not in name and depth < 4 else []
        states = {self._built_enabled(b.value, b.value_scope, depth + 1) if b.kind == "assign" and b.value is not None else None for b in bindings}
        return states.pop() if len(states) == 1 else None

    def is_grad_scaler(self, func: cst.BaseExpression) -> bool:
        qualified = self.resolver.qualified(func)
        if qualified in torch_api.GRAD_SCALER:
            return True
        return qualified is None and isinstance(func, cst.Name) and func.value in torch_api.GRAD_SCALER_BARE_NAMES

    def _visibly_not_a_scaler(self, binding: Binding) -> bool:
        """Filled with an instance of something that is not a GradScaler: a class this file
        defines, or a class imported from outside torch (sklearn's `StandardScaler()`)."""
        value = binding.value
        if not isinstance(value, cst.Call):
            return False
        callee = dotted_name(value.func)
        if callee is None:
            return False
        if callee in self.index.classes:
            bases = self.index.classes[callee].bases
            return not any(base.rsplit(".", 1)[-1] in torch_api.GRAD_SCALER_BARE_NAMES for base in bases)
        qualified = self.resolver.qualified(value.func)
        return qualified is not None and not qualified.startswith("torch") and callee[:1].isupper()

    def _used_as_scalers(self) -> Dict[str, str]:
        """Variables used as only a scaler is used -> the name as written."""
        found: Dict[str, str] = {}
        for record in self.index.calls:
            func = record.node.func
            if not isinstance(func, cst.Attribute):
                continue
            method = func.attr.value
            scope = record.unit.scope
            if method == "backward" and isinstance(func.value, cst.Call):
                inner = func.value.func
                if isinstance(inner, cst.Attribute) and inner.attr.value == "scale":
                    self._note(found, dotted_name(inner.value), scope)
                continue
            if method not in ("scale", "unscale_", "step"):
                continue
            receiver = dotted_name(func.value)
            if receiver is None:
                continue
            if method == "unscale_" or vocabulary.named_like_a_scaler(receiver):
                self._note(found, receiver, scope)
            elif method == "step" and record.node.args:
                stepped = dotted_name(record.node.args[0].value)
                if stepped is not None and vocabulary.looks_like_optimizer(stepped):
                    self._note(found, receiver, scope)
        return found

    def _note(self, found: Dict[str, str], name: Optional[str], scope: Scope) -> None:
        if name is not None:
            found.setdefault(self.resolver.identity(name, scope), name)

    # frameworks (amplint.semantic.pytorch.frameworks)
    def _frameworks(self, bindings: List[Binding]) -> None:
        returned_optimizers: Dict[str, str] = {}  # optimizer binding key -> the object's key
        built = [(record, framework_of(record.node, self.resolver)) for record in self.index.calls]
        constructions = [(record, framework) for record, framework in built if framework is not None]
        local_factories = self._factories(constructions)
        for binding in bindings:
            found = self._framework_built(binding)
            if found is None:
                made = self._made_by_factory(binding.value, binding.value_scope, local_factories)
                if made is None or made[0].returned_position >= 0 or made[0].scales_module_classes:
                    continue
                framework, call, may, surely = made
            else:
                framework, call = found
                may, surely = self.float16(call, framework, binding.value_scope)
            if not may:
                continue
            owner = _unpacked_from(binding, call, framework.returned_position)
            if framework.returned_position >= 0 and owner is None:
                continue
            key = self._framework_scaler(binding, framework, True if surely else None, call)
            if framework.returned_optimizer_position >= 0:
                for other in bindings:
                    if other.source is call and _unpacked_from(other, call, framework.returned_optimizer_position) is not None:
                        returned_optimizers[binding_key(other)] = key
        # None: nothing may train the file's classes in float16.
        trainers: Dict[str, Optional[bool]] = {trainer.name: None for trainer in frameworks.CLASS_FRAMEWORKS}
        for record, trainer in constructions:
            if trainer.scales_module_classes:
                may, surely = self.float16(record.node, trainer, record.unit.scope)
                if may:
                    trainers[trainer.name] = bool(trainers[trainer.name]) or surely
        trained = {trainer.name for trainer in frameworks.CLASS_FRAMEWORKS for scope in self.index.classes.values() if any(base.rsplit(".", 1)[-1] in trainer.module_bases for base in scope.bases)}
        if trained and (local_factories or self.external is not None):
            # Settings a function builds and returns (`training_args = build_training_args(cfg)`)
            # for the classes of the file a framework trains.
            for record in self.index.calls:
                made = self._made_by_factory(record.node, record.unit.scope, local_factories)
                if made is not None and made[0].scales_module_classes and made[2]:
                    trainers[made[0].name] = bool(trainers[made[0].name]) or made[3]
        self._trained_imports(constructions)
        # Classes another linted module fits with a framework object that may train them in
        # float16 (train.py's `L.Trainer(precision="16-mixed").fit(LitModel())`), and the
        # classes of the file they derive from.
        given = self._given_by_importers()
        for trainer in frameworks.CLASS_FRAMEWORKS:
            for name, scope in self.index.classes.items():
                float16, trained_by = trainers[trainer.name], None
                fits = self._fitted_here.get((name, trainer.name))
                if fits is not None:
                    # Fitted here: by the Trainers that fit it (or a class deriving from it), not
                    # by every Trainer of the file (one may pretrain another model in float16).
                    float16 = (any(sure for _, sure in fits)) if any(may for may, _ in fits) else None
                if float16 is None and (name, trainer.name) in given:
                    float16, origin, fitted = given[(name, trainer.name)]
                    trained_by = f"{origin} trains `{fitted}`"
                if float16 is None:
                    continue
                if name not in self.facts.fp16_classes and (trained_by is not None or self._based_on(name, trainer.module_bases)):
                    self.facts.fp16_classes[name] = trainer.name
                    key = class_scaler_key(scope, trainer)
                    self.facts.scalers[key] = ScalerInfo(key, "self", True if float16 else None, (), trainer.name, trained_by=trained_by)
        self._loops()
        # What these frameworks prepare (or hand back) steps through their scaler.
        self.facts.prepared.update(returned_optimizers)
        framework_keys = {k: info for k, info in self.facts.scalers.items() if info.framework}
        for binding in bindings:
            source = binding.source
            if not isinstance(source, cst.Call) or not isinstance(source.func, cst.Attribute):
                continue
            method = source.func.attr.value
            receiver = dotted_name(source.func.value)
            if receiver is None:
                continue
            if receiver == "self":
                owner_class = self.resolver.owning_class(binding.value_scope)
                trainer = frameworks.BY_NAME.get(self.facts.fp16_classes.get(owner_class.name, "")) if owner_class is not None else None
                if owner_class is not None and trainer is not None and method in trainer.self_optimizer_methods:
                    self.facts.prepared[binding_key(binding)] = class_scaler_key(owner_class, trainer)
                continue
            owner = self.resolver.identity(receiver, binding.value_scope)
            info = framework_keys.get(owner)
            if info is None or method not in frameworks.BY_NAME[info.framework or ""].prepare_methods:
                continue
            if vocabulary.looks_like_optimizer(binding.name):
                self.facts.prepared[binding_key(binding)] = owner

    def _trained_imports(self, constructions: List[Tuple[CallRecord, frameworks.Framework]]) -> None:
        """`ScalerFacts.trained_imports`: each `<object>.fit(model)` of a framework object the
        file builds in a precision that may be float16, with the classes `model` may be an
        instance of (`LitModel(...)`, `LitModel.load_from_checkpoint(...)`, through names)."""
        trainers = {id(record.node): framework for record, framework in constructions if framework.training_methods}
        self._fitted_here: Dict[Tuple[str, str], List[Tuple[bool, bool]]] = {}  # (class, framework) -> (may, surely) of each fit
        if not trainers:
            return
        methods = {method for framework in trainers.values() for method in framework.training_methods}
        for record in self.index.calls:
            func = record.node.func
            if not isinstance(func, cst.Attribute) or func.attr.value not in methods:
                continue
            scope = record.unit.scope
            reaching = self._reaching(func.value, record) if isinstance(func.value, cst.Name) else None
            built = [made for value, where in reaching for made in self._made(value, where)] if reaching is not None else list(self._made(func.value, scope))
            fitting = [(call, where, trainers.get(id(call))) for call, where in built]
            framework = fitting[0][2] if fitting else None
            if framework is None or func.attr.value not in framework.training_methods:
                continue
            states = [self.float16(call, framework, where) if trainer is framework else (False, False) for call, where, trainer in fitting]
            made = [(name, where) for call, call_where in self._made(argument(record.node, 0, "model"), scope) for name, where in self._classes_made(call, call_where)]
            # Of the Trainers that reach the call, one that may be float16 makes it "may" (`if
            # args.amp: trainer = L.Trainer(precision="16-mixed") else: trainer = L.Trainer()`),
            # as a precision setting that may be float16 does. Where what reaches is unknown,
            # every object the name holds must be one (a script that fits one model in float16
            # and then another in float32 with the same name is no guess to make).
            may = any(m for m, _ in states) if reaching is not None else all(m for m, _ in states)
            sure = all(s for _, s in states)
            for name, _ in made:  # the file's own classes: which Trainer fits them (`fitted_here`)
                if "." not in name and name in self.index.classes:
                    for current in self._local_chain(name):
                        self._fitted_here.setdefault((current, framework.name), []).append((may, may and sure and len(made) == 1))
            if not may:
                continue
            imported = {target for name, where in made for target in import_targets(name, self.resolver.bindings(name.partition(".")[0], where))}
            surely = sure and len({name for _, _, name in imported}) == 1
            for module, level, name in imported:
                key = (module, level, name, framework.name)
                self.facts.trained_imports[key] = self.facts.trained_imports.get(key, False) or surely

    def _reaching(self, name: cst.Name, record: CallRecord) -> Optional[List[Tuple[Optional[cst.BaseExpression], Scope]]]:
        """The values of `name` that reach the call `record`, when its block shows them: the last
        statement of the block before the call that assigns it, and any assignment nested in
        the statements between (`trainer = L.Trainer(precision="16-mixed")`, `trainer.fit(...)`,
        then `trainer = L.Trainer(precision=32)` for the test: the fit sees the first); or, when
        it is assigned only inside statements of the block before the call (the branches of an
        `if`), every one of those. None otherwise: every value it is given."""
        statement = self.index.statement_of(record.node)
        block = next((node.body for node in iter_tree(record.unit.node) if isinstance(node, (cst.Module, cst.IndentedBlock)) and any(s is statement for s in node.body)), None) if statement is not None else None
        if block is None:
            return None
        position = next(i for i, s in enumerate(block) if s is statement)
        bindings = [b for b in self.resolver.bindings(name.value, record.unit.scope) if b.kind == "assign"]
        for last in range(position - 1, -1, -1):
            line = block[last]
            direct = [b for b in bindings if isinstance(line, cst.SimpleStatementLine) and any(small is b.node for small in line.body)]
            if direct:
                between = {id(node) for later in block[last + 1 : position] for node in iter_tree(later)}
                return [(b.value, b.value_scope) for b in direct[-1:] + [b for b in bindings if id(b.node) in between]]
        # Assigned only inside statements of the block before the call (`if args.amp: trainer
        # = ... else: trainer = ...`): each of those may reach it.
        before = {id(node) for earlier in block[:position] for node in iter_tree(earlier)}
        if bindings and all(id(b.node) in before for b in bindings):
            return [(b.value, b.value_scope) for b in bindings]
        return None

    def _classes_made(self, made: cst.Call, where: Scope, depth: int = 0) -> Iterator[Tuple[str, Scope]]:
        """The classes a call may make an instance of, as named: `LitModel(...)`,
        `models.LitModel(...)`, `LitModel.load_from_checkpoint(...)`, and through
        `LitModel().to(device)`, `model.to(device)` and `torch.compile(model)`."""
        if depth > 4:
            return
        func = made.func
        inner: Optional[cst.BaseExpression] = None
        if self.resolver.qualified(func) == "torch.compile" and made.args:
            inner = made.args[0].value
        elif isinstance(func, cst.Attribute) and func.attr.value[:1].islower():
            name = dotted_name(func.value)
            if name is not None and name.rsplit(".", 1)[-1][:1].isupper():
                yield name, where  # `LitModel.load_from_checkpoint(...)`
                return
            inner = func.value  # `LitModel().to(device)`, `model.cuda()`
        else:
            name = dotted_name(func)
            if name is not None:
                yield name, where
            return
        for call, call_where in self._made(inner, where, depth + 1):
            yield from self._classes_made(call, call_where, depth + 1)

    def _made(self, value: Optional[cst.BaseExpression], scope: Scope, depth: int = 0) -> Iterator[Tuple[cst.Call, Scope]]:
        """The calls whose result `value` may be: the call itself, either branch of a
        conditional, every value a name is given."""
        if value is None or depth > 3:
            return
        if isinstance(value, cst.Call):
            yield value, scope
        elif isinstance(value, cst.IfExp):
            yield from self._made(value.body, scope, depth + 1)
            yield from self._made(value.orelse, scope, depth + 1)
        elif isinstance(value, (cst.Name, cst.Attribute)):
            name = dotted_name(value)
            for bound, where in self.resolver.values(name, scope) if name is not None else ():
                yield from self._made(bound, where, depth + 1)

    def _given_by_importers(self) -> Dict[Tuple[str, str], Tuple[bool, str, str]]:
        """The classes of the file another module fits (`ExternalModules.trained_here`), and the
        classes of the file each derives from, by name: (class, framework) -> (whether float16
        is sure, the fitting module, the class it fits)."""
        given: Dict[Tuple[str, str], Tuple[bool, str, str]] = {}
        if self.external is None:
            return given
        for (name, framework), (surely, origin) in self.external.trained_here().items():
            if self._based_on(name, frameworks.BY_NAME[framework].module_bases):
                for current in self._local_chain(name):
                    given[(current, framework)] = (surely, origin, name)
        return given

    def _local_chain(self, name: str) -> List[str]:
        """The top-level class `name` and the top-level classes of the file it derives from."""
        chain: List[str] = []
        waiting = [name]
        while waiting:
            current = waiting.pop()
            scope = self.index.classes.get(current)
            if current in chain or scope is None or scope.parent is not self.index.module_scope:
                continue
            chain.append(current)
            waiting.extend(base for base in scope.bases if "." not in base)
        return chain

    def _based_on(self, name: str, bases: FrozenSet[str]) -> bool:
        """Whether the class `name` has one of `bases` (by last name) among its own bases or
        those of the file's classes it derives from (`class LitModel(Base)`, `class
        Base(L.LightningModule)`)."""
        own = self.index.classes.get(name)
        if own is not None and any(base.rsplit(".", 1)[-1] in bases for base in own.bases):
            return True  # (a class nested in a function too: a test's LightningModule)
        return any(base.rsplit(".", 1)[-1] in bases for current in self._local_chain(name) for base in self.index.classes[current].bases)

    def _factories(self, constructions: List[Tuple[CallRecord, frameworks.Framework]]) -> Dict[str, Tuple[cst.Call, Scope, frameworks.Framework]]:
        """The top-level functions that build a framework object and return it (every way
        out returns it): for this file's callers, the construction; for other modules', a
        `FactoryReturn` each (`ScalerFacts.factories`)."""
        found: Dict[str, Tuple[cst.Call, Scope, frameworks.Framework]] = {}
        module_scope = self.index.module_scope
        for record, framework in constructions:
            unit = record.unit
            if unit.is_module or unit.scope.parent is not module_scope or framework.returned_position >= 0 or unit.name in found:
                continue
            if not _returns_only(unit, record.node, self.index):
                continue
            scope = unit.scope
            found[unit.name] = (record.node, scope, framework)
            exported = self._factory_return(record.node, framework, unit)
            if exported is not None:
                self.facts.factories[unit.name] = exported
        return found

    def _factory_return(self, call: cst.Call, framework: frameworks.Framework, unit) -> Optional[FactoryReturn]:
        """What another module may know of the precision of the object `call` builds in the
        function `unit`: its values, unless they depend on what a caller passes."""
        _, keywords = split_args(call.args)
        read = [keywords[k] for k in (framework.precision_keyword, framework.fp16_flag, *framework.config_keywords) if k and k in keywords]
        scope = unit.scope
        if framework.precision_keyword and len(read) == 1 and read[0] is keywords.get(framework.precision_keyword):
            name = dotted_name(read[0])
            if name is not None and name in scope.params and all(b.kind == "param" for b in scope.bindings.get(name, ())):
                param = next(b.node for b in scope.bindings[name])
                default = param.default if isinstance(param, cst.Param) else None
                values, complete = self.resolver.settings(default, scope.parent or scope) if default is not None else (frozenset(), False)
                return FactoryReturn(framework.name, values, complete, name, unit.parameters.index(name))
        if any(reads_parameter(value, scope, self.resolver) for value in read):
            return None
        values, complete = precisions(call, framework, scope, self.resolver)
        return FactoryReturn(framework.name, values, complete) if values else None

    def _made_by_factory(
        self, value: Optional[cst.BaseExpression], scope: Scope, local: Dict[str, Tuple[cst.Call, Scope, frameworks.Framework]]
    ) -> Optional[Tuple[frameworks.Framework, cst.Call, bool, bool]]:
        """`value` calls a function that builds and returns a framework object (of this file,
        or one another linted module exports): the framework, the call, and whether its
        precision may be, and surely is, float16."""
        if not isinstance(value, cst.Call):
            return None
        callee = dotted_name(value.func)
        if callee is None:
            return None
        if "." not in callee and callee in local and any(b.kind == "def" for b in self.resolver.bindings(callee, scope)):
            built, where, framework = local[callee]
            may, surely = float16_of(built, framework, where, self.resolver)
            return framework, value, may, surely
        if self.external is None:
            return None
        factory = self._foreign_factory(value.func, scope)
        framework = frameworks.BY_NAME.get(factory.framework) if factory is not None else None
        if factory is None or framework is None:
            return None
        values, complete = factory.precisions, factory.complete
        if factory.parameter is not None:
            passed = passed_for(value, factory.parameter, factory.position)
            if passed is not None:
                values, complete = self.resolver.settings(passed, scope)
        may = bool(values & frameworks.FP16_PRECISIONS)
        return framework, value, may, may and complete and values <= frameworks.FP16_PRECISIONS

    def _foreign_factory(self, func: cst.BaseExpression, scope: Scope) -> Optional[FactoryReturn]:
        """The `FactoryReturn` another linted module exports for the function `func` names:
        `build_accelerator` from `from utils import build_accelerator`, `utils.build_accelerator`."""
        assert self.external is not None
        name = dotted_name(func) or ""
        if name.count(".") > 1:
            return None
        for target, level, qualified in import_targets(name, self.resolver.bindings(name.partition(".")[0], scope)):
            foreign = self.external.module(target, level)
            function = foreign.functions.get(qualified) if foreign is not None else None
            if function is not None and function.returns_framework is not None:
                return function.returns_framework
        return None

    def _loops(self) -> None:
        """Training loops a framework builds and runs (`frameworks.LOOP_FRAMEWORKS`) whose
        precision may autocast in float16 (not on a device known to be the CPU, whose
        autocast is bfloat16) while its scaler setting is surely off (absent, or only ever
        false); a scaler setting the file does not resolve is not taken for off."""
        for record in self.index.calls:
            call = record.node
            if (dotted_name(call.func) or "").rsplit(".", 1)[-1] not in frameworks.LOOP_BUILDERS:
                continue  # what is not called by a builder's name (most calls) is none
            loop = loop_framework_of(call, self.resolver)
            if loop is None:
                continue
            scope = record.unit.scope
            values, complete = precisions(call, loop, scope, self.resolver)
            if not values & loop.loop_autocast_values:
                continue
            positional, keywords = split_args(call.args)
            scaler = keywords.get(loop.loop_scaler_keyword)
            if scaler is not None:
                states, known = self.resolver.settings(scaler, scope)
                if not known or states != {"False"}:
                    continue
            device = keywords.get(loop.loop_device_keyword)
            if device is None and 0 <= loop.loop_device_position < len(positional):
                device = positional[loop.loop_device_position]
            if device is not None and self.resolver.devices(device, scope) == {"cpu"}:
                continue
            self.facts.unscaled_loops.append((call, loop.name, complete and values <= loop.loop_autocast_values))

    def float16(self, call: cst.Call, framework: frameworks.Framework, scope: Scope) -> Tuple[bool, bool]:
        return float16_of(call, framework, scope, self.resolver)

    def _framework_built(self, binding: Binding) -> Optional[Tuple[frameworks.Framework, cst.Call]]:
        """The framework object `binding` is filled with, and the call that builds it:
        `accelerator = Accelerator(...)`, `loss_scaler = NativeScaler() if amp else None`,
        `engine, optimizer, _, _ = deepspeed.initialize(...)` (the call is its `source`)."""
        value = binding.value if binding.value is not None else binding.source
        branches = (value.body, value.orelse) if isinstance(value, cst.IfExp) else (value,)
        for branch in branches:
            if isinstance(branch, cst.Call):
                framework = framework_of(branch, self.resolver)
                if framework is not None and not framework.scales_module_classes:
                    return framework, branch
        return None

    def _framework_scaler(self, binding: Binding, framework: frameworks.Framework, float16: Optional[bool], call: cst.Call) -> str:
        key = binding_key(binding)
        # An object that may be None (`loss_scaler = NativeScaler() if amp else None`) is
        # live only where the code has not found it None.
        requirements = _requirements(binding.name) if framework.always_float16 else ()
        calls: Tuple[cst.Call, ...] = ()
        if framework.user_owns_state:
            # Its construction counts as a GradScaler's (checkpointed, never rebuilt).
            self.facts.constructions.append((binding, call))
            calls = tuple(c for b, c in self.facts.constructions if binding_key(b) == key)
            previous = self.facts.scalers.get(key)
            if previous is not None and previous.framework == framework.name and previous.enabled != float16:
                float16 = None
        self.facts.scalers[key] = ScalerInfo(key, binding.name, float16, requirements, framework.name, calls)
        return key

    # scaler-like names and optimizers
    def _scaler_like(self) -> None:
        """A name like `loss_scaler` used as an object that may scale: called on the loss
        (timm's NativeScaler) or handed to other code. sklearn's `StandardScaler()` built
        and `.fit()` is neither, nor is a `scaler` parameter nothing uses."""
        for record in self.index.calls:
            call = record.node
            scope = record.unit.scope
            names = [dotted_name(arg.value) for arg in call.args]
            callee = dotted_name(call.func)
            if callee is not None and any(arg.keyword is None for arg in call.args):
                names.append(callee)
            for name in names:
                if name is None or not vocabulary.named_like_a_scaler(name):
                    continue
                if name.rsplit(".", 1)[-1] in torch_api.GRAD_SCALER_BARE_NAMES:
                    continue
                key = self.resolver.identity(name, scope)
                if key not in self.facts.scalers and not any(
                    self._visibly_not_a_scaler(b) for b in self.resolver.bindings(name, scope)
                ):
                    self.facts.scaler_like.add(key)

    def _optimizers(self, bindings: List[Binding]) -> None:
        for binding in bindings:
            if isinstance(binding.value, cst.Call) and self._builds_optimizer(binding.value.func):
                self.facts.optimizers.add(binding_key(binding))
        for record in self.index.calls:
            func = record.node.func
            if isinstance(func, cst.Attribute) and func.attr.value in ("step", "unscale_") and record.node.args:
                receiver = dotted_name(func.value)
                argument = dotted_name(record.node.args[0].value)
                scope = record.unit.scope
                if receiver is not None and argument is not None and self.resolver.identity(receiver, scope) in self.facts.scalers:
                    self.facts.optimizers.add(self.resolver.identity(argument, scope))
        self.facts.optimizers |= set(self.facts.prepared)

    def _builds_optimizer(self, func: cst.BaseExpression) -> bool:
        qualified = self.resolver.qualified(func) or ""
        last = (dotted_name(func) or "").rsplit(".", 1)[-1]
        if qualified.startswith(torch_api.OPTIMIZER_MODULE_PREFIXES):
            # Schedulers (lr_scheduler, swa_utils.SWALR) and AveragedModel are not optimizers.
            return last[:1].isupper() and "lr_scheduler" not in qualified and "swa_utils" not in qualified
        return last in vocabulary.OPTIMIZER_CLASSES or last.lower() in vocabulary.OPTIMIZER_FACTORIES


def _requirements(name: str) -> Tuple[Assumption, ...]:
    """What must hold for the scaler `name` to be live: `if name:` / `name is not None`, and
    `name.is_enabled()` (the conditions as `amplint.semantic.conditions` would write them)."""
    return (
        (Condition(name, frozenset({name})), True),
        (Condition(f"{name}.is_enabled()", frozenset({f"{name}.is_enabled"})), True),
    )


def _unpacked_from(binding: Binding, call: cst.Call, position: int) -> Optional[str]:
    """The name `binding` gives element `position` of what `call` returns, when it unpacks
    it there (`engine, optimizer, _, _ = deepspeed.initialize(...)`)."""
    node = binding.node
    if position < 0 or binding.source is not call or not isinstance(node, cst.Assign) or len(node.targets) != 1:
        return None
    target = node.targets[0].target
    if not isinstance(target, (cst.Tuple, cst.List)) or position >= len(target.elements):
        return None
    element = target.elements[position]
    if isinstance(element, cst.StarredElement):
        return None
    name = dotted_name(element.value)
    return name if name == binding.name else None


def _returns_only(unit, call: cst.Call, index: ModuleIndex) -> bool:
    """Whether every `return` of the function `unit` returns what `call` builds, written there
    (`return Accelerator(...)`) or through the one name it is assigned to."""
    statement = index.statement_of(call)
    small = statement.body[0] if isinstance(statement, cst.SimpleStatementLine) else None
    returned: Optional[str] = None
    if isinstance(small, cst.Return) and small.value is call:
        pass
    elif isinstance(small, cst.Assign) and small.value is call and len(small.targets) == 1 and isinstance(small.targets[0].target, cst.Name):
        returned = small.targets[0].target.value
        if len(unit.scope.bindings.get(returned, ())) != 1:
            return False
    else:
        return False
    returns = own_returns(unit.node)
    if returned is None:
        return len(returns) == 1
    return bool(returns) and all(isinstance(r.value, cst.Name) and r.value.value == returned for r in returns)
