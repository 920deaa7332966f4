"""What a name refers to, and what constant values an expression can take.

Names are looked up as Python does (function scopes outward, class bodies skipped, then the
module); `self.x` is looked up in the class whose methods or body assign it, then its base
classes in the file; any other dotted name (`args.dtype`) by its assignments anywhere in the
file. A value is followed through names, conditional expressions, dict-literal lookups and,
for a function parameter, what the calls in this file pass for it. Anything else is unknown,
and unknown is never guessed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Dict, FrozenSet, List, Mapping, Optional, Sequence, Tuple

import libcst as cst

from amplint import work
from amplint.semantic.pytorch import api as torch_api
from amplint.semantic.pytorch.autocast_ops import DEFAULT_DTYPES
from amplint.semantic.index import Binding, ModuleIndex, Scope
from amplint.semantic.names import is_none
from amplint.semantic.names import dotted_name
from amplint.semantic.walk import own_returns

_MAX_DEPTH = 4
# Default autocast dtypes by device; other devices' defaults are left unknown.
DEFAULT_DTYPE = DEFAULT_DTYPES
# What an argparse parser hands back its options in, and the names a parameter holding it goes by.
_PARSE_CALLS = ("parse_args", "parse_known_args")
_PARSED_NAMES = ("args", "opt", "opts")
KNOWN_DEVICES = ("cuda", "cpu", "mps", "xpu", "hpu", "npu", "xla", "meta")


# What another linted module's summary says of a constant it defines (`constants`: the
# `dtypes` or `settings` it may hold), asked with the import that binds the name, the name as
# bound, the attribute read of it and, for a field of a class it defines, the field:
# `ImportedConstant(<from config import AMP_DTYPE>, "AMP_DTYPE", "", "")`,
# `ImportedConstant(<from config import TrainConfig>, "TrainConfig", "", "mixed_precision")`.
ImportedConstant = Callable[[cst.CSTNode, str, str, str], Optional[Mapping[str, Any]]]


class Resolver:
    def __init__(self, index: ModuleIndex, imported_constant: Optional[ImportedConstant] = None) -> None:
        self.index = index
        self.aliases = index.aliases
        self._options: Optional[Dict[str, List[Tuple[cst.Call, Scope]]]] = None
        self._imported_constant = imported_constant
        # What `devices` and `settings` found, by (query, id(value), id(scope), depth): the
        # value and scope themselves (never another's id), the answer, and the work steps
        # finding it took, charged again each time it is given (`_remembered`).
        self._answers: Dict[Tuple[str, int, int, int], Tuple[Any, Any, Any, int]] = {}
        # id(node) -> (the node, its qualified name): the analyses ask of each name about
        # seven times; the node is kept so that its id is not another's meanwhile.
        self._qualified: Dict[int, Tuple[cst.BaseExpression, Optional[str]]] = {}

    # names
    def qualified(self, node: cst.BaseExpression) -> Optional[str]:
        """The imported dotted path `node` stands for (`torch.cuda.amp.autocast`), or None."""
        known = self._qualified.get(id(node))
        if known is not None and known[0] is node:
            return known[1]
        found = self.aliases.resolve(node)
        self._qualified[id(node)] = (node, found)
        return found

    def bindings(self, name: str, scope: Scope) -> List[Binding]:
        """Every binding `name`, read in `scope`, may refer to. Each is a step of the file's
        work (`amplint.work`): callers weigh them one by one, and a name bound thousands of
        times made that quadratic work no step counted (reliability round 4, N4)."""
        if name.startswith("self."):
            found = self.attribute_bindings(name, scope)
        elif "." in name:
            found = list(self.index.dotted.get(name, ()))
        else:
            bound = self.binding_scope(name, scope)
            found = list(bound.bindings[name]) if bound is not None else []
        work.charge(len(found))
        return found

    def binding_scope(self, name: str, scope: Optional[Scope]) -> Optional[Scope]:
        """The scope whose binding of the plain name `name` a read in `scope` sees."""
        first = scope
        while scope is not None:
            # A class body's names are not visible from its methods.
            if (scope.kind != "class" or scope is first) and name in scope.bindings:
                return scope
            scope = scope.parent
        return None

    def owning_class(self, scope: Optional[Scope]) -> Optional[Scope]:
        """The class whose instance `self` is in `scope` (a method, or a function nested in one)."""
        while scope is not None:
            if scope.kind == "class":
                return scope
            scope = scope.parent
        return None

    def attribute_bindings(self, name: str, scope: Scope) -> List[Binding]:
        """`self.x` as its class (or a base class in this file) assigns it; an attribute the
        class never assigns may come from anywhere, so the whole file's stand in."""
        for owner in self.class_and_bases(scope):
            if name in owner.attributes:
                return list(owner.attributes[name])
        return [b for s in self.index.scopes if s.kind == "class" for b in s.attributes.get(name, ())]

    def class_and_bases(self, scope: Optional[Scope]) -> List[Scope]:
        """The class `self` belongs to in `scope`, then its base classes defined in this file."""
        found: List[Scope] = []
        pending = [self.owning_class(scope)]
        while pending:
            owner = pending.pop(0)
            if owner is None or any(owner is seen for seen in found):
                continue
            found.append(owner)
            pending.extend(self.index.classes.get(base.rsplit(".", 1)[-1]) for base in owner.bases)
        return found

    def identity(self, name: str, scope: Scope) -> str:
        """A key that is the same wherever the same variable is read: `fn:train:scaler`,
        `cls:Trainer:self.scaler`, `mod:<module>:scaler`, `dot:args.scaler`."""
        if name.startswith("self."):
            attribute = "self." + name.split(".")[1]
            for owner in self.class_and_bases(scope):
                if attribute in owner.attributes:
                    return f"{owner.key}:{name}"
            return f"attr:{name}"
        if "." in name:
            return f"dot:{name}"  # looked up file-wide, like its bindings
        bound = self.binding_scope(name, scope)
        if bound is None:
            return f"free:{name}"
        return f"{bound.key}:{name}"

    def values(self, name: str, scope: Scope) -> List[Tuple[Optional[cst.BaseExpression], Scope]]:
        """Every value `name` is given, each with the scope its names are read in."""
        return [(b.value, b.value_scope) for b in self.bindings(name, scope)]

    def local_values(self, name: str, scope: Scope) -> List[cst.BaseExpression]:
        """What a plain variable of `scope` is given in `scope` itself, wherever in it: each
        assigned value, the right side of `x *= s`, and for a `for` target what it is drawn from
        (its own argument of a `zip(...)`). Empty for a parameter, a global or an unpacking:
        value flow inside one function, nothing guessed."""
        found: List[cst.BaseExpression] = []
        if "." in name:
            return found
        for binding in scope.bindings.get(name, ()):
            if binding.value_scope is not scope:
                continue
            if binding.value is not None:
                found.append(binding.value)
            elif binding.kind == "augassign" and isinstance(binding.node, cst.AugAssign):
                found += [binding.node.target, binding.node.value]
            elif binding.kind == "for" and isinstance(binding.node, cst.For):
                found.append(drawn_from(binding.node, name))
        return found

    def constant(self, name: str, scope: Scope) -> Optional[Tuple[cst.BaseExpression, Scope]]:
        """The one value `name` is ever given; None if unsure."""
        values = self.values(name, scope)
        if len(values) == 1 and values[0][0] is not None:
            return values[0]  # type: ignore[return-value]
        return None

    def arguments_for(self, name: str, scope: Scope, constructors: bool = False) -> List[Tuple[cst.BaseExpression, Scope]]:
        """When `name` is a parameter: what the calls in this file pass for it, each with the
        caller's scope. `train(args.device, amp_dtype)` -> (amp_dtype, main's scope). With
        `constructors`, an `__init__`'s parameter is also what the file constructs its class
        with (`EMA(model)`)."""
        bound = self.binding_scope(name, scope)
        if bound is None or bound.kind != "function" or name not in bound.params:
            return []
        function = bound.name.rsplit(".", 1)[-1]
        params = bound.params
        index = params.index(name)
        found = []
        records = list(self.index.calls_to(function))
        owner = bound.parent
        constructed = []
        if constructors and function == "__init__" and owner is not None and owner.kind == "class" and params[:1] == ["self"]:
            # `EMA(model)` calls `EMA.__init__(self, model)`: what the file constructs the class with.
            cls = owner.name.rsplit(".", 1)[-1]
            constructed = [r for r in self.index.calls_to(cls) if dotted_name(r.node.func) in (cls, owner.name)]
        for record in records + constructed:
            call = record.node
            positional = [arg.value for arg in call.args if arg.keyword is None and not arg.star]
            keyword = {arg.keyword.value: arg.value for arg in call.args if arg.keyword is not None}
            # `self.train(x)` or `trainer.train(x)` binds the method's first parameter itself, as
            # constructing the class does.
            method = isinstance(call.func, cst.Attribute) and params[:1] in (["self"], ["cls"])
            shift = 1 if method or record in constructed else 0
            if name in keyword:
                found.append((keyword[name], record.unit.scope))
            elif 0 <= index - shift < len(positional):
                found.append((positional[index - shift], record.unit.scope))
        return found

    # constant values
    def resolve(self, value: Optional[cst.BaseExpression], scope: Scope) -> Optional[Tuple[cst.BaseExpression, Scope]]:
        """Follow names to the one value they hold; a literal or imported name stays as it is."""
        for _ in range(_MAX_DEPTH):
            if value is None:
                return None
            if isinstance(value, cst.Name) and value.value in ("True", "False", "None"):
                return value, scope
            name = dotted_name(value)
            if name is None or self.aliases.resolve(value) is not None:
                return value, scope
            bound = self.constant(name, scope)
            if bound is None:
                return None
            value, scope = bound
        return None

    def default_boolean(self, parameter: str, function: Scope) -> Optional[bool]:
        """True/False for a parameter of `function` whose default is such a literal (read where
        the default is evaluated); None for any other default, or none."""
        for binding in function.bindings.get(parameter, ()):
            if binding.kind == "param" and isinstance(binding.node, cst.Param) and binding.node.default is not None:
                return self.boolean(binding.node.default, function.parent or function)
        return None

    def boolean(self, value: Optional[cst.BaseExpression], scope: Scope) -> Optional[bool]:
        """True/False for a literal (followed through names); True when absent; else None."""
        if value is None:
            return True
        resolved = self.resolve(value, scope)
        return bool_literal(resolved[0]) if resolved is not None else None

    def dtypes(self, value: Optional[cst.BaseExpression], scope: Scope, depth: int = 0) -> FrozenSet[str]:
        """The dtypes `value` can be: one, each branch of a conditional expression
        (`torch.float16 if device == "cuda" else torch.bfloat16`), each value of a dict
        literal it is looked up in, each value a name is assigned or, for a parameter,
        passed by a caller in this file; empty when unknown (a config attribute,
        `getattr(torch, name)`, a parameter no caller here passes)."""
        if value is None or depth > _MAX_DEPTH:
            return frozenset()
        if isinstance(value, cst.IfExp):
            return self.dtypes(value.body, scope, depth + 1) | self.dtypes(value.orelse, scope, depth + 1)
        if isinstance(value, cst.Subscript):
            # nanoGPT's `{'float32': torch.float32, 'float16': torch.float16, ...}[dtype]`.
            table = self._dict_literal(value.value, scope)
            if table is None:
                return frozenset()
            found: FrozenSet[str] = frozenset()
            for element in table[0].elements:
                if isinstance(element, cst.DictElement):
                    found |= self.dtypes(element.value, table[1], depth + 1)
            return found
        if isinstance(value, cst.Call):
            return self._dtype_named(value, scope, depth)
        qualified = self.aliases.resolve(value)
        dtype = torch_api.DTYPES.get(qualified or "")
        if dtype is not None:
            return frozenset({dtype})
        if qualified is not None and not qualified.startswith("torch."):
            return _entry_dtypes(self._imported_entry(value, scope))
        name = dotted_name(value)
        if name is not None and "." in name and not self.bindings(name, scope):
            # `config.amp_dtype` where `config = TrainConfig()`: the class's default, or what
            # the construction passes.
            found: FrozenSet[str] = frozenset()
            for source, where in self._field_values(*name.rsplit(".", 1), scope)[0]:
                found |= _entry_dtypes(source) if where is None else self.dtypes(source, where, depth + 1)  # type: ignore[arg-type]
            return found
        return self._through_names(value, scope, depth, self.dtypes)

    def _dtype_named(self, call: cst.Call, scope: Scope, depth: int) -> FrozenSet[str]:
        """`getattr(torch, args.dtype)`: the dtype each name the setting may hold is
        (`"float16"`, `"bfloat16"`); any other call is unknown."""
        if dotted_name(call.func) != "getattr" or len(call.args) < 2 or self.aliases.resolve(call.args[0].value) != "torch":
            return frozenset()
        names, _ = self.settings(call.args[1].value, scope, depth + 1)
        return frozenset(torch_api.DTYPES[f"torch.{name}"] for name in names if f"torch.{name}" in torch_api.DTYPES)

    def _imported_entry(self, value: cst.BaseExpression, scope: Scope, field: str = "") -> Optional[Mapping[str, Any]]:
        """What another linted module's summary says of the constant `value` names (`from
        config import AMP_DTYPE`, `config.AMP_DTYPE`), or of the `field` of the class it
        names (`TrainConfig` of `from config import TrainConfig`); None when unknown."""
        name = dotted_name(value) or ""
        head, _, rest = name.partition(".")
        bindings = self.bindings(head, scope)
        if self._imported_constant is None or len(bindings) != 1 or bindings[0].kind != "import":
            return None
        entry = self._imported_constant(bindings[0].node, head, rest, field)
        return entry if isinstance(entry, Mapping) else None

    def devices(self, value: Optional[cst.BaseExpression], scope: Scope, depth: int = 0) -> FrozenSet[str]:
        """The device types `value` can name: `"cuda:0"`, `torch.device("cuda" if ok else
        "cpu")`, `str(device)`, `device.type`, f"cuda:{rank}"; empty when unknown."""
        return self._remembered("devices", value, scope, depth, self._devices)

    def _remembered(self, query: str, value: Any, scope: Scope, depth: int, find: Any) -> Any:
        """`find(value, scope, depth)`, worked out once per file: every autocast region of a
        training script asks for the device of the same `args.device`, through the same
        argparse options and callers. A remembered answer charges the work meter the steps
        finding it took, so the file's work limit counts the same steps either way."""
        key = (query, id(value), id(scope), depth)
        known = self._answers.get(key)
        if known is not None and known[0] is value and known[1] is scope:
            work.charge(known[3])
            return known[2]
        meter = work.current()
        before = meter.spent if meter is not None else 0
        found = find(value, scope, depth)
        self._answers[key] = (value, scope, found, meter.spent - before if meter is not None else 0)
        return found

    def _devices(self, value: Optional[cst.BaseExpression], scope: Scope, depth: int) -> FrozenSet[str]:
        if value is None or depth > _MAX_DEPTH:
            return frozenset()
        if isinstance(value, cst.SimpleString):
            text = value.evaluated_value
            if isinstance(text, bytes):
                return frozenset()
            kind = text.split(":")[0]
            return frozenset({kind}) if kind in KNOWN_DEVICES else frozenset()
        if isinstance(value, cst.FormattedString):
            first = value.parts[0] if value.parts else None
            if isinstance(first, cst.FormattedStringText):
                kind = first.value.split(":")[0]
                return frozenset({kind}) if kind in KNOWN_DEVICES else frozenset()
            return frozenset()
        if isinstance(value, cst.IfExp):
            return self.devices(value.body, scope, depth + 1) | self.devices(value.orelse, scope, depth + 1)
        if isinstance(value, cst.Call):
            qualified = self.aliases.resolve(value.func)
            is_str = isinstance(value.func, cst.Name) and value.func.value == "str"
            if (qualified == "torch.device" or is_str) and value.args:
                return self.devices(value.args[0].value, scope, depth + 1)
            return self._returned(value, scope, depth, self.devices)
        if isinstance(value, cst.Attribute) and value.attr.value == "type":
            # `device.type`: the device's kind.
            return self.devices(value.value, scope, depth + 1)
        return self._through_names(value, scope, depth, self.devices) or self._option_devices(value, scope, depth)

    def _option_devices(self, value: cst.BaseExpression, scope: Scope, depth: int) -> FrozenSet[str]:
        """`args.device` for an argparse option of this file whose `choices` (and default)
        are all device names: each of their kinds. `args` must hold what the parser parsed
        (`args = parser.parse_args()`, or a parameter named `args`/`opt`), not any object
        with a `.device` (`accelerator.device`, `x.device`). An option with no `choices`,
        or one that is not a device name ("auto"), is unknown (empty)."""
        name = dotted_name(value)
        head, _, attribute = (name or "").rpartition(".")
        if not head or "." in head or attribute not in self.argparse_options():
            return frozenset()
        bound = [b for b, _ in self.values(head, scope) if b is not None]
        if not (all(map(_parsed, bound)) if bound else head in _PARSED_NAMES):
            return frozenset()
        values, complete = self.settings(value, scope, depth + 1)
        kinds = frozenset(v.split(":")[0] for v in values)
        return kinds if complete and kinds and all(k in KNOWN_DEVICES for k in kinds) else frozenset()

    def settings(self, value: Optional[cst.BaseExpression], scope: Scope, depth: int = 0) -> Tuple[FrozenSet[str], bool]:
        """The values a setting such as `mixed_precision=` may take, as text (`"fp16"`, `"16"`,
        `"True"`), and whether that is all of them. Followed through literals, conditional
        expressions, dict-literal lookups, names (every assignment; for a parameter, its
        default and what each caller in this file passes), an argparse option of this file
        (`args.mixed_precision`: its `choices` and `default`; without `choices`, only the
        default is known) and a config class of this file (`config.mixed_precision` where
        `config = TrainingConfig()`: the class's default or the keyword passed). Anything
        else, None included, is unknown: it adds no value and makes the answer incomplete."""
        return self._remembered("settings", value, scope, depth, self._settings)

    def _settings(self, value: Optional[cst.BaseExpression], scope: Scope, depth: int) -> Tuple[FrozenSet[str], bool]:
        if value is None or depth > _MAX_DEPTH or is_none(value):
            return frozenset(), False
        if isinstance(value, cst.SimpleString):
            text = value.evaluated_value
            return (frozenset({text.lower()}), True) if isinstance(text, str) else (frozenset(), False)
        if isinstance(value, cst.Integer):
            return frozenset({value.value}), True
        if isinstance(value, cst.Name) and value.value in ("True", "False"):
            return frozenset({value.value}), True
        if isinstance(value, cst.IfExp):
            return _union(self.settings(value.body, scope, depth + 1), self.settings(value.orelse, scope, depth + 1))
        if isinstance(value, cst.Subscript):
            table = self._dict_literal(value.value, scope)
            if table is None:
                return frozenset(), False
            found: Tuple[FrozenSet[str], bool] = (frozenset(), True)
            for element in table[0].elements:
                if not isinstance(element, cst.DictElement):
                    return found[0], False  # `**other`: values we cannot see
                found = _union(found, self.settings(element.value, table[1], depth + 1))
            return found
        name = dotted_name(value)
        if name is None:
            return frozenset(), False
        qualified = self.aliases.resolve(value)
        if qualified is not None:
            # `from config import MIXED_PRECISION`; not `torch.float16`, no constant of a linted module.
            return _entry_settings(self._imported_entry(value, scope)) if not qualified.startswith("torch.") else (frozenset(), False)
        bindings = self.bindings(name, scope)
        if bindings:
            found = (frozenset(), True)
            for binding in bindings:
                if binding.kind == "param":
                    found = _union(found, self._parameter_settings(binding, depth))
                else:
                    found = _union(found, self.settings(binding.value, binding.value_scope, depth + 1))
            return found
        head, _, attribute = name.rpartition(".")
        if not head or "." in attribute:
            return frozenset(), False
        options = self.argparse_options().get(attribute)
        if options:
            found = (frozenset(), True)
            for call, where in options:
                found = _union(found, self._option_settings(call, where, depth))
            return found
        return self._config_default(head, attribute, scope, depth)

    def _parameter_settings(self, binding: Binding, depth: int) -> Tuple[FrozenSet[str], bool]:
        """A parameter: its default, and what each caller in this file passes for it; a
        parameter no caller here passes and with no default is unknown."""
        param = binding.node
        found: FrozenSet[str] = frozenset()
        if isinstance(param, cst.Param) and param.default is not None:
            found |= self.settings(param.default, binding.scope.parent or binding.scope, depth + 1)[0]
        for argument, caller in self.arguments_for(binding.name, binding.scope):
            found |= self.settings(argument, caller, depth + 1)[0]
        return found, False  # callers outside this file may pass anything

    def argparse_options(self) -> Dict[str, List[Tuple[cst.Call, Scope]]]:
        """`parser.add_argument("--mixed-precision", ...)` calls of this file by the attribute
        (`dest`) they fill: `mixed_precision`."""
        if self._options is None:
            self._options = {}
            for record in self.index.calls_to("add_argument"):
                positional, keywords = split_args(record.node.args)
                flags = [p.evaluated_value for p in positional if isinstance(p, cst.SimpleString)]
                flags = [f for f in flags if isinstance(f, str)]
                dest = keywords.get("dest")
                if isinstance(dest, cst.SimpleString) and isinstance(dest.evaluated_value, str):
                    name = dest.evaluated_value
                else:
                    long = [f for f in flags if f.startswith("--")]
                    short = [f for f in flags if f.startswith("-")]
                    chosen = (long or short or flags or [""])[0]
                    name = chosen.lstrip("-").replace("-", "_")
                if name.isidentifier():
                    self._options.setdefault(name, []).append((record.node, record.unit.scope))
        return self._options

    def _option_settings(self, call: cst.Call, scope: Scope, depth: int) -> Tuple[FrozenSet[str], bool]:
        """An argparse option: what its `action`, `choices` and `default` allow. The default
        is not checked against the choices, so it is one of the values too."""
        _, keywords = split_args(call.args)
        action = keywords.get("action")
        if isinstance(action, cst.SimpleString) and action.evaluated_value in ("store_true", "store_false"):
            return frozenset({"True", "False"}), True
        default = keywords.get("default")
        defaults = self.settings(default, scope, depth + 1) if default is not None else (frozenset(), False)
        choices = keywords.get("choices")
        resolved = self.resolve(choices, scope) if choices is not None else None
        if resolved is None or not isinstance(resolved[0], (cst.List, cst.Tuple, cst.Set)):
            return defaults[0], False  # the command line may give anything
        found: Tuple[FrozenSet[str], bool] = (defaults[0], True)
        for element in resolved[0].elements:
            if isinstance(element, cst.StarredElement):
                return found[0], False
            found = _union(found, self.settings(element.value, resolved[1], depth + 1))
        return found

    def _config_default(self, owner: str, attribute: str, scope: Scope, depth: int) -> Tuple[FrozenSet[str], bool]:
        """`config.mixed_precision` where `config = TrainingConfig(...)`: what each value
        `_field_values` finds may take."""
        sources, complete = self._field_values(owner, attribute, scope)
        found: Tuple[FrozenSet[str], bool] = (frozenset(), complete and bool(sources))
        for source, where in sources:
            found = _union(found, _entry_settings(source) if where is None else self.settings(source, where, depth + 1))  # type: ignore[arg-type]
        return found

    def _field_values(self, owner: str, attribute: str, scope: Scope) -> Tuple[List[Tuple[Any, Optional[Scope]]], bool]:
        """What `owner.attribute` may be where `owner = TrainingConfig(...)` builds a config
        class: the keyword the construction passes, else the class's default (a dataclass
        field's `default=` too), read in the class, or, for a class of another linted module
        (`from config import TrainingConfig`), what its summary says of the field (an entry of
        its `constants`, with None for the scope). Positional arguments may fill it: then the
        default is one value of several. Anything else makes the answer incomplete: (values,
        whether they are all it can be)."""
        values, complete = self._objects(owner, scope)
        found: List[Tuple[Any, Optional[Scope]]] = []
        for bound, where in values:
            built = self._built_config(bound)
            name = dotted_name(built[0]) if built is not None else None
            cls = self.index.classes.get(name or "")
            imported = cls is None and name is not None and [b.kind for b in self.bindings(name.partition(".")[0], where)] == ["import"]
            if built is None or not (cls is not None or imported):
                return found, False  # not built by a class the file or a linted module defines
            func, args, parsed = built
            positional, keywords = split_args(args)
            if attribute in keywords:
                found.append((keywords[attribute], where))
                continue
            if cls is not None:
                defaults = [b for b in cls.bindings.get(attribute, ()) if b.kind == "assign"]
                found.extend((field_default(default.value), cls) for default in defaults)
            else:
                entry = self._imported_entry(func, where, attribute)
                defaults = [entry] if entry is not None else []
                found.extend((entry, None) for entry in defaults)
            if not defaults:
                return found, False
            if parsed or positional or any(arg.star for arg in args):
                complete = False  # the command line, or an argument, may set it
        return found, complete and bool(values)

    def _built_config(self, bound: Optional[cst.BaseExpression]) -> Optional[Tuple[cst.BaseExpression, Sequence[cst.Arg], bool]]:
        """How an object whose fields are read may have been built: (the class as named, the
        arguments of its construction, whether a command-line parser fills it): `TrainConfig(
        lr=1e-4)`; `tyro.cli(TrainConfig)` and the other `CONFIG_PARSERS`, and the annotation
        of a parameter that `draccus.wrap` or `tyro.cli(main)` fills (`cfg: TrainConfig`), with
        no arguments (the class's defaults, where no flag is given). None for anything else."""
        if isinstance(bound, cst.Call):
            parser = self.qualified(bound.func) or dotted_name(bound.func) or ""
            if parser in CONFIG_PARSERS:
                positional, keywords = split_args(bound.args)
                cls = keywords.get("config_class", positional[0] if positional else None)
                return (cls, (), True) if isinstance(cls, (cst.Name, cst.Attribute)) else None
            return bound.func, bound.args, False
        if isinstance(bound, _Annotated):
            return bound.annotation, (), True
        return None

    def _objects(self, name: str, scope: Scope) -> Tuple[List[Tuple[Any, Scope]], bool]:
        """The values `name` is given, and whether they are all it can hold; for a parameter
        (`def main(cfg):`), what the callers in this file pass for it and its default (None
        among them when there are none, or what a command-line parser builds from its
        annotation: `_parsed_parameter`), and callers elsewhere may pass anything else."""
        found: List[Tuple[Any, Scope]] = []
        complete = True
        for binding in self.bindings(name, scope):
            if binding.kind != "param":
                found.append((binding.value, binding.value_scope))
                continue
            complete = False
            param = binding.node
            if isinstance(param, cst.Param) and param.default is not None:
                found.append((param.default, binding.scope.parent or binding.scope))
            passed = self.arguments_for(binding.name, binding.scope)
            found.extend(passed)
            if not passed and not (isinstance(param, cst.Param) and param.default is not None):
                annotated = self._parsed_parameter(param, binding.scope)
                found.append((annotated, binding.scope.parent or binding.scope) if annotated is not None else (None, binding.scope))
        return found, complete

    def _parsed_parameter(self, param: cst.CSTNode, function: Scope) -> Optional["_Annotated"]:
        """A parameter whose value a command-line parser builds from its annotation: `def
        main(cfg: TrainConfig)` decorated with `@draccus.wrap()` (`CLI_DECORATORS`), or handed
        to `tyro.cli(main)`."""
        if not isinstance(param, cst.Param) or param.annotation is None or not isinstance(param.annotation.annotation, (cst.Name, cst.Attribute)):
            return None
        node = function.node
        if not isinstance(node, cst.FunctionDef):
            return None
        decorators = [d.decorator.func if isinstance(d.decorator, cst.Call) else d.decorator for d in node.decorators]
        parsed = any((self.qualified(d) or dotted_name(d)) in CLI_DECORATORS for d in decorators)
        if not parsed:
            name = node.name.value
            parsed = any(
                (self.qualified(r.node.func) or dotted_name(r.node.func)) in CONFIG_PARSERS and any(dotted_name(a.value) == name for a in r.node.args[:1])
                for r in self.index.calls_to("cli")
            )
        return _Annotated(param.annotation.annotation) if parsed else None

    def _through_names(self, value: cst.BaseExpression, scope: Scope, depth: int, follow) -> FrozenSet[str]:
        # A name set on several branches can be each of its values; a parameter can be what
        # each caller in this file passes.
        name = dotted_name(value)
        if name is None or self.aliases.resolve(value) is not None:
            return frozenset()
        found: FrozenSet[str] = frozenset()
        for bound, where in self.values(name, scope):
            found |= follow(bound, where, depth + 1)
        for argument, caller in self.arguments_for(name, scope):
            found |= follow(argument, caller, depth + 1)
        return found

    def _returned(self, call: cst.Call, scope: Scope, depth: int, follow) -> FrozenSet[str]:
        """What a function of this file returns, for `device = get_device()`: each `return`
        value of its body, read in its own scope."""
        if not isinstance(call.func, cst.Name):
            return frozenset()
        found: FrozenSet[str] = frozenset()
        for binding in self.bindings(call.func.value, scope):
            if binding.kind != "def" or not isinstance(binding.node, cst.FunctionDef):
                continue
            inner = next((s for s in self.index.scopes if s.node is binding.node), None)
            if inner is None:
                continue
            for node in own_returns(binding.node):
                if node.value is not None:
                    found |= follow(node.value, inner, depth + 1)
        return found

    def _dict_literal(self, value: cst.BaseExpression, scope: Scope) -> Optional[Tuple[cst.Dict, Scope]]:
        if isinstance(value, cst.Dict):
            return value, scope
        resolved = self.resolve(value, scope)
        if resolved is not None and isinstance(resolved[0], cst.Dict):
            return resolved  # type: ignore[return-value]
        return None


# Command-line parsers that build a config object from a class, its defaults where no flag is
# given: `cfg = tyro.cli(TrainConfig)`; and decorators that build a function's annotated
# parameters so (`@draccus.wrap() def main(cfg: TrainConfig)`).
CONFIG_PARSERS = frozenset({"tyro.cli", "draccus.parse", "pyrallis.parse", "omegaconf.OmegaConf.structured", "OmegaConf.structured"})
CLI_DECORATORS = frozenset({"draccus.wrap", "pyrallis.wrap"})


@dataclass(frozen=True)
class _Annotated:
    """A parameter's value as `_objects` gives it when a parser builds it from its annotation."""

    annotation: cst.BaseExpression


def field_default(value: Optional[cst.BaseExpression]) -> Optional[cst.BaseExpression]:
    """A class attribute's default: `default=` of a dataclass `field(...)`, else the value."""
    if isinstance(value, cst.Call) and dotted_name(value.func) in ("field", "dataclasses.field"):
        return split_args(value.args)[1].get("default")
    return value


def _entry_dtypes(entry: Optional[Mapping[str, Any]]) -> FrozenSet[str]:
    """The dtypes an exported constant may be (`project.summary._constants`); empty when unknown."""
    dtypes = entry.get("dtypes") if entry is not None else None
    return frozenset(d for d in dtypes if d in torch_api.DTYPES.values()) if isinstance(dtypes, list) else frozenset()


def _entry_settings(entry: Optional[Mapping[str, Any]]) -> Tuple[FrozenSet[str], bool]:
    """The settings an exported constant may hold, all of them (`project.summary._constants` exports
    only those it knows whole); unknown when it exports none."""
    settings = entry.get("settings") if entry is not None else None
    if not isinstance(settings, list) or not all(isinstance(s, str) for s in settings):
        return frozenset(), False
    return frozenset(settings), True


def _parsed(value: cst.BaseExpression) -> bool:
    """`parser.parse_args()`, `parser.parse_known_args()`: a parser's options."""
    name = dotted_name(value.func) if isinstance(value, cst.Call) else None
    return name is not None and name.rsplit(".", 1)[-1] in _PARSE_CALLS


def _union(a: Tuple[FrozenSet[str], bool], b: Tuple[FrozenSet[str], bool]) -> Tuple[FrozenSet[str], bool]:
    return a[0] | b[0], a[1] and b[1]


def bool_literal(node: Optional[cst.BaseExpression]) -> Optional[bool]:
    if isinstance(node, cst.Name) and node.value in ("True", "False"):
        return node.value == "True"
    return None


def drawn_from(loop: cst.For, name: str) -> cst.BaseExpression:
    """What the loop variable `name` is drawn from: `for e, p in zip(ema_params, model.parameters())`
    -> `ema_params` for `e`; the whole iterable otherwise."""
    target, iterable = loop.target, loop.iter
    if isinstance(target, (cst.Tuple, cst.List)) and isinstance(iterable, cst.Call) and dotted_name(iterable.func) == "zip":
        for element, arg in zip(target.elements, iterable.args):
            if dotted_name(element.value) == name and not arg.star:
                return arg.value
    return iterable


def split_args(args) -> Tuple[List[cst.BaseExpression], dict]:
    """A call's positional argument values and its keyword arguments by name (stars skipped)."""
    positional: List[cst.BaseExpression] = []
    keywords = {}
    for arg in args:
        if arg.star:
            continue
        if arg.keyword is not None:
            keywords[arg.keyword.value] = arg.value
        else:
            positional.append(arg.value)
    return positional, keywords


def argument(call: cst.Call, index: int, keyword: str) -> Optional[cst.BaseExpression]:
    positional, keywords = split_args(call.args)
    if keyword in keywords:
        return keywords[keyword]
    return positional[index] if len(positional) > index else None


def passed_for(call: cst.Call, parameter: Optional[str], position: Optional[int]) -> Optional[cst.BaseExpression]:
    """What a call passes for a callee's parameter: by keyword, or at its `position` among the
    positional arguments; None when it passes none, or a `*args` comes first (not known)."""
    for arg in call.args:
        if arg.keyword is not None and arg.keyword.value == parameter:
            return arg.value
    if position is None:
        return None
    for index, arg in enumerate(a for a in call.args if a.keyword is None):
        if arg.star:
            return None
        if index == position:
            return arg.value
    return None


def passed_for_parameter(call: cst.Call, params: Sequence[str], parameter: str, bound_self: bool) -> Optional[cst.BaseExpression]:
    """What `call` passes for the callee's `parameter` (`params`: the callee's, with `self`
    when `bound_self`); None when not passed or not known (`f(*args)`)."""
    params = list(params)
    if parameter not in params:
        return None
    return passed_for(call, parameter, params.index(parameter) - (1 if bound_self else 0))


def keyword_argument(call: cst.Call, name: str) -> Optional[cst.BaseExpression]:
    """The value a call passes for the keyword `name`, if it does."""
    return split_args(call.args)[1].get(name)


def is_infinity(node: Optional[cst.BaseExpression]) -> bool:
    """`float("inf")`, `math.inf`, `torch.inf`, `np.inf`: a clip at this norm only measures it."""
    if isinstance(node, cst.Call) and isinstance(node.func, cst.Name) and node.func.value == "float" and node.args:
        value = node.args[0].value
        return isinstance(value, cst.SimpleString) and str(value.evaluated_value).lower() in ("inf", "infinity")
    name = dotted_name(node) if node is not None else None
    return name is not None and name.rsplit(".", 1)[-1] == "inf" and name.split(".")[0] in ("math", "torch", "np", "numpy")

