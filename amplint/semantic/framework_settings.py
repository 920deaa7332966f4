"""How a framework's precision settings read: whether a framework object (`Accelerator`,
Lightning's `Trainer`, `Fabric`, Hugging Face's `TrainingArguments`, DeepSpeed's config,
ignite's `amp_mode=`) may run in float16, which precisions its settings may hold
(`precisions`: literals, argparse choices, config dicts and classes, constants of other
modules), whether it replaces its scaler or hands its hooks to the framework, and the key of
the scaler a framework owns for a class it trains (`class_scaler_key`). What
`amplint.semantic.scalers` and the autocast regions read frameworks with; the frameworks
themselves are data (`amplint.semantic.pytorch.frameworks`).
"""


import weakref
from typing import FrozenSet, List, Optional, Set, Tuple

import libcst as cst

from amplint.semantic.pytorch import frameworks
from amplint.semantic.index import ModuleIndex, Scope, all_bindings
from amplint.semantic.names import dotted_name
from amplint.semantic.resolve import Resolver, split_args


def class_scaler_key(scope: Scope, framework: frameworks.Framework) -> str:
    """The key of the scaler a framework keeps for a class of the file it trains."""
    return f"{scope.key}:{framework.name}"


def framework_of(call: cst.Call, resolver: Resolver) -> Optional[frameworks.Framework]:
    """The framework whose object `call` builds (`Accelerator(...)`, `Trainer(...)`,
    `NativeScaler()`, `deepspeed.initialize(...)`), if any."""
    qualified = resolver.qualified(call.func)
    bare = dotted_name(call.func) or ""
    last = (qualified or bare).rsplit(".", 1)[-1]
    for framework in (*frameworks.OBJECT_FRAMEWORKS, *frameworks.CLASS_FRAMEWORKS):
        if qualified in framework.constructors or (not qualified and bare in framework.bare_constructors):
            return framework
        if last in framework.class_names:
            return framework
    return None


def loop_framework_of(call: cst.Call, resolver: Resolver) -> Optional[frameworks.Framework]:
    """The framework whose training loop `call` builds (`create_supervised_trainer(...)`), if any."""
    qualified = resolver.qualified(call.func)
    bare = dotted_name(call.func) or ""
    for framework in frameworks.LOOP_FRAMEWORKS:
        if qualified in framework.constructors or (not qualified and bare in framework.bare_constructors):
            return framework
    return None


def float16_of(call: cst.Call, framework: frameworks.Framework, scope: Scope, resolver: Resolver) -> Tuple[bool, bool]:
    """Whether the framework object `call` builds may be in float16 mixed precision (one
    of the values its precision setting may take is float16), and whether it surely is.
    An unknown precision is neither."""
    replaced = scaler_replaced(call, framework, scope, resolver)
    if replaced is True:
        return False, False  # `L.Trainer(precision=16, strategy="deepspeed_stage_2")`: DeepSpeed's scaler, not a GradScaler
    values, complete = precisions(call, framework, scope, resolver)
    may = bool(values & frameworks.FP16_PRECISIONS)
    return may, may and complete and values <= frameworks.FP16_PRECISIONS and replaced is False


def scaler_replaced(call: cst.Call, framework: frameworks.Framework, scope: Scope, resolver: Resolver) -> Optional[bool]:
    """Whether a keyword of the framework object `call` builds puts another loss scaler in
    charge instead of its GradScaler (`Framework.scaler_replaced_by`): True when every value it
    may take names it (`strategy="deepspeed_stage_2"`, `strategy=DeepSpeedStrategy(stage=3)`),
    None when only some may (`"deepspeed_stage_2" if ds else "ddp"`), False otherwise, a value
    that cannot be read included."""
    _, keywords = split_args(call.args)
    found: Optional[bool] = False
    for keyword, word in framework.scaler_replaced_by:
        value = keywords.get(keyword)
        if value is None:
            continue
        # A strategy object or name, written there or through a name (`strategy =
        # DeepSpeedStrategy(stage=2)`, `strategy = "deepspeed_stage_2"`): each value names it or not.
        built = [(v, where) for v, where in resolver.values(dotted_name(value) or "", scope)] if isinstance(value, (cst.Name, cst.Attribute)) else [(value, scope)]
        named: List[bool] = []
        for each, where in built:
            if isinstance(each, cst.Call):
                named.append(word in (dotted_name(each.func) or "").lower())
                continue
            values, known = resolver.settings(each, where)
            named.append(bool(values) and known and all(word in v for v in values))
            if not named[-1] and any(word in v for v in values):
                named[-1] = None  # type: ignore[call-overload]
        if named and all(n is True for n in named):
            return True
        if any(n is not False for n in named):
            found = None
    return found


def hands_hooks_away(call: cst.Call, framework: frameworks.Framework, scope: Scope, resolver: Resolver) -> bool:
    """Whether the framework object `call` builds may run its hooks without its own autocast
    (`Framework.autocast_hooks_unless`), or keywords unpacked from a mapping may."""
    _, keywords = split_args(call.args)
    if any(arg.star for arg in call.args):
        return True  # `Trainer(**config)`: keywords we cannot see
    for keyword, word in framework.autocast_hooks_unless:
        if keyword in keywords:
            values, known = resolver.settings(keywords[keyword], scope)
            if not known or any(word in value for value in values):
                return True
    return False


def settings_float16(
    value: Optional[cst.BaseExpression], framework: frameworks.Framework, scope: Scope, resolver: Resolver
) -> Tuple[bool, bool]:
    """Whether the settings `value` holds (`TrainingArguments(fp16=args.fp16)`, written there
    or assigned to a name) may be float16, and whether they surely are. Settings the file
    does not show built by the framework's constructor (a parameter, `HfArgumentParser`'s
    output) are unknown: neither; a name given them on one way and something unknown on
    another may be float16, never surely."""
    if value is None:
        return False, False
    if isinstance(value, cst.Call):
        candidates: List[Tuple[Optional[cst.BaseExpression], Scope]] = [(value, scope)]
    else:
        name = dotted_name(value)
        candidates = resolver.values(name, scope) if name is not None else []
    may, surely = False, bool(candidates)
    for built, where in candidates:
        if isinstance(built, cst.Call) and framework_of(built, resolver) is framework:
            one_may, one_surely = float16_of(built, framework, where, resolver)
            may, surely = may or one_may, surely and one_surely
        else:
            surely = False
    return may, may and surely


def reads_parameter(value: Optional[cst.BaseExpression], scope: Scope, resolver: Resolver, depth: int = 0) -> bool:
    """Whether the values `Resolver.settings` reads off `value` may come from a parameter of
    its function (what a caller passes, unknown to another module): the parameter itself, an
    attribute of it (`cfg.mixed_precision`), or a local assigned from one; not a condition
    that only picks between literals (`"fp16" if cfg.fp16 else "no"`)."""
    if value is None or depth > 4:
        return False
    if isinstance(value, cst.IfExp):
        return reads_parameter(value.body, scope, resolver, depth + 1) or reads_parameter(value.orelse, scope, resolver, depth + 1)
    if isinstance(value, cst.Subscript):
        return reads_parameter(value.value, scope, resolver, depth + 1)
    name = dotted_name(value)
    if name is None:
        return False
    for binding in resolver.bindings(name.split(".")[0], scope):
        if binding.kind == "param" and binding.scope is scope:
            return True
        if binding.scope is scope and "." not in name and reads_parameter(binding.value, binding.value_scope, resolver, depth + 1):
            return True
    return False


def precisions(call: cst.Call, framework: frameworks.Framework, scope: Scope, resolver: Resolver) -> Tuple[FrozenSet[str], bool]:
    """The values the precision of the framework object `call` builds may take (`"fp16"`,
    `"16-mixed"`, `"no"`), and whether that is all of them (`Resolver.settings`)."""
    if framework.always_float16:
        return frozenset({"fp16"}), True
    positional, keywords = split_args(call.args)
    if framework.config_keywords:
        config = next((keywords[k] for k in framework.config_keywords if k in keywords), None)
        return _config_precisions(config, framework, scope, resolver)
    value = keywords.get(framework.precision_keyword)
    if value is None and 0 <= framework.precision_position < len(positional):
        value = positional[framework.precision_position]
    values, complete = resolver.settings(value, scope) if value is not None else (frozenset(), False)
    flag = keywords.get(framework.fp16_flag) if framework.fp16_flag else None
    if flag is not None:
        # `Accelerator(fp16=True)`, accelerate's older spelling.
        flags, flags_complete = resolver.settings(flag, scope)
        if "True" in flags:
            values = values | {"fp16"}
        if value is None:
            complete = flags_complete and flags == {"True"}
    return values, complete


def _config_precisions(
    config: Optional[cst.BaseExpression], framework: frameworks.Framework, scope: Scope, resolver: Resolver
) -> Tuple[FrozenSet[str], bool]:
    """The precisions a config dict may turn on (`{"fp16": {"enabled": True}}` -> fp16; a
    section that is absent, or not enabled, is off). A config the file does not show as a
    dict literal (a JSON path, `args.deepspeed_config`) is unknown, and one the file changes
    after writing it (`ds_config["fp16"]["enabled"] = args.fp16`, `ds_config.update(...)`)
    may be anything besides what it says."""
    table = _dict(config, scope, resolver)
    if table is None:
        return frozenset(), False
    name = dotted_name(config) if config is not None else None
    complete = name is None or not _changed_later(name, resolver)
    values: Set[str] = set()
    sections = dict(framework.config_sections)
    for element in table[0].elements:
        if not isinstance(element, cst.DictElement):
            complete = False  # `**other`: sections we cannot see
            continue
        key = element.key.evaluated_value if isinstance(element.key, cst.SimpleString) else None
        precision = sections.get(str(key))
        section = _dict(element.value, table[1], resolver) if precision is not None else None
        if section is None:
            continue
        enabled = next((e.value for e in section[0].elements if _keyed(e, "enabled")), None)
        states, known = resolver.settings(enabled, section[1]) if enabled is not None else (frozenset({"False"}), True)
        if "True" in states:
            values.add(precision or "")
        if states - {"True"} or not known:
            values.add("32")  # it may be off
        complete = complete and known and states <= {"True", "False"}
    return frozenset(values or {"32"}), complete


def _keyed(element: cst.BaseDictElement, key: str) -> bool:
    return isinstance(element, cst.DictElement) and isinstance(element.key, cst.SimpleString) and element.key.evaluated_value == key


def _changed_later(name: str, resolver: Resolver) -> bool:
    """Whether the file writes into the dict `name` holds after building it (`name[k] = v`,
    `name["fp16"]["enabled"] = flag`, `name.update(...)`, `name.setdefault(...)`), or may:
    hands it to a function (`set_precision(name, args)`) other than one that only reads it."""
    changed = _WRITTEN_INTO.get(resolver.index)
    if changed is None:
        changed = _WRITTEN_INTO[resolver.index] = _written_into(resolver.index)
    return name in changed


# The names each module writes into (one walk of the module per index, on first need).
_WRITTEN_INTO: "weakref.WeakKeyDictionary[ModuleIndex, FrozenSet[str]]" = weakref.WeakKeyDictionary()


def _written_into(index: ModuleIndex) -> FrozenSet[str]:
    """`name[k] = v` binds `name` in the index (with the assignment as its node);
    `name.update(...)` and `name.setdefault(...)` are calls."""
    found: Set[str] = set()
    for binding in all_bindings(index):
        node = binding.node
        if isinstance(node, cst.Assign) and any(isinstance(t.target, cst.Subscript) for t in node.targets):
            found.add(binding.name)
        elif isinstance(node, cst.AugAssign) and isinstance(node.target, cst.Subscript):
            found.add(binding.name)
    for record in index.calls:
        func = record.node.func
        if isinstance(func, cst.Attribute) and func.attr.value in ("update", "setdefault"):
            name = dotted_name(func.value)
            if name is not None:
                found.add(name)
        callee = (dotted_name(func) or "").rsplit(".", 1)[-1]
        if callee not in _READS_ONLY and not callee.startswith(("log", "print")):
            found.update(name for name in (dotted_name(arg.value) for arg in record.node.args) if name is not None)
    return frozenset(found)


# Callees known to read a dict they are handed, never to write into it: the framework's own
# constructors and what prints, copies or serialises it.
_READS_ONLY = frozenset({"initialize", "init_inference", "dumps", "dump", "deepcopy", "copy", "dict", "len", "str", "repr", "pprint", "info", "debug", "warning"})


def _dict(value: Optional[cst.BaseExpression], scope: Scope, resolver: Resolver) -> Optional[Tuple[cst.Dict, Scope]]:
    resolved = resolver.resolve(value, scope) if value is not None else None
    if resolved is not None and isinstance(resolved[0], cst.Dict):
        return resolved  # type: ignore[return-value]
    return None


