"""Adapters (peft, diffusers' LoRA loaders, `frameworks.ADAPTER_CALLS`): which calls create
adapters on a module and in what dtype, and which re-create them when a run resumes.

peft builds adapters in the dtype of the layers they wrap, and they are then the module's only
trainable parameters: `unet.to(dtype=weight_dtype)`, then `unet.add_adapter(config)`, trains
adapters in that dtype (`adapters_added`); some calls make the trainable parameters float32
themselves (`get_peft_model` unless told not to, `cast_training_params`: "upcasts"), others
change no dtype ("keeps"). accelerate runs a load-state hook (`register_load_state_pre_hook`)
inside `load_state(...)`, and a hook that re-creates the adapters (`load_lora_into_unet(sd,
unet=unet_)`) builds them anew in the cast dtype (diffusers #6514, #7018:
`adapters_recreated_on_load`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Collection, Dict, Iterator, List, Optional, Tuple

import libcst as cst

from amplint.analyses.module_casts import ModuleCast
from amplint.analyses.module_paths import handed_modules
from amplint.analyses.optimizers import OptimizerBuild
from amplint.analyses.precision_facts import FoundPrecision, PrecisionFinder
from amplint.semantic import CallRecord, CodeUnit, SemanticModel, calls_within, dotted_name, iter_tree, split_args
from amplint.semantic.pytorch import vocabulary
from amplint.semantic.pytorch.frameworks import ADAPTER_CALLS, AdapterCall


def adapter_entry(call: cst.Call) -> Optional[AdapterCall]:
    """The entry of `frameworks.ADAPTER_CALLS` a call is: `unet.add_adapter(config)`,
    `inject_adapter_in_model(config, unet)`, `get_peft_model(model, config)`."""
    name = dotted_name(call.func)
    if name is None:
        return None
    last = name.rsplit(".", 1)[-1]
    positional, keywords = split_args(call.args)
    first = positional[0] if positional else None
    named_first = isinstance(first, (cst.SimpleString, cst.ConcatenatedString, cst.FormattedString))
    for entry in ADAPTER_CALLS:
        if last not in entry.names or (entry.method and "." not in name):
            continue
        if entry.name_first is True and not named_first:
            continue
        if entry.name_first is False and not ("adapter_config" in keywords or _config_like(first)):
            continue  # AdapterHub's `model.add_adapter(task_name, config="seq_bn")` is none of peft's
        return entry
    return None


def _config_like(value: Optional[cst.BaseExpression]) -> bool:
    """An adapter's config: `LoraConfig(r=4)`, `unet_lora_config`, `cfg`."""
    if isinstance(value, cst.Call):
        return "config" in (dotted_name(value.func) or "").lower()
    name = (dotted_name(value) or "").rsplit(".", 1)[-1].lower() if value is not None else ""
    return "config" in name or "cfg" in name


def adapter_effect(call: cst.Call) -> Optional[str]:
    """"creates" for a call that creates adapters in its module's current dtype and makes them
    its only trainable parameters; "upcasts" for one that makes its trainable parameters
    float32; "keeps" for one that changes no dtype; None for any other call. An upcasting call told not to (`get_peft_model(model,
    config, autocast_adapter_dtype=False)`) creates."""
    entry = adapter_entry(call)
    if entry is None:
        return None
    if entry.upcast_keyword:
        _, keywords = split_args(call.args)
        value = keywords.get(entry.upcast_keyword)
        if isinstance(value, cst.Name) and value.value == "False":
            return "creates"
    return entry.effect


def adapter_module(call: cst.Call, entry: AdapterCall) -> Optional[str]:
    """The module an adapter call acts on, as written: `unet` in `unet.add_adapter(config)`,
    `load_lora_into_unet(sd, unet=unet_)`, `inject_adapter_in_model(config, model)`."""
    if entry.method:
        return dotted_name(call.func.value) if isinstance(call.func, cst.Attribute) else None
    positional, keywords = split_args(call.args)
    for keyword in entry.module_keywords:
        if keyword in keywords:
            return dotted_name(keywords[keyword])
    if 0 <= entry.module_position < len(positional):
        return dotted_name(positional[entry.module_position])
    return None


def adapters_added(precision: FoundPrecision, cast: ModuleCast) -> Optional[CallRecord]:
    """A call that may run after the cast and creates adapters on the module it casts, in the
    dtype it cast it to (`unet.to(dtype=weight_dtype)`, then `unet.add_adapter(config)`): the
    adapters are the module's trainable parameters, in that dtype. None when there is none."""
    finder: PrecisionFinder = precision.finder
    for record in precision.successors.calls_after(cast.record):
        if adapter_effect(record.node) != "creates":
            continue
        module = adapter_module(record.node, adapter_entry(record.node))  # type: ignore[arg-type]
        if module is not None and any(cast.covers(path) for path in finder.paths(module, record.unit.scope)):
            return record
    return None


@dataclass(frozen=True)
class LoadHookAdapters:
    """Adapters a load-state hook re-creates on a module cast to a half dtype: accelerate runs
    `load_model_hook` (registered with `accelerator.register_load_state_pre_hook`) inside
    `accelerator.load_state(...)`, and its `load_lora_into_unet(sd, unet=unet_)` builds the
    unet's adapters anew, in the dtype the unet was cast to (diffusers #6514, #7018)."""

    cast: ModuleCast
    optimizer: OptimizerBuild
    record: CallRecord  # the creating call, in the hook
    hook: str  # the hook's name
    load: cst.Call  # `accelerator.load_state(...)`
    module: str  # the module's name where it is cast (`unet`)


def adapters_recreated_on_load(precision: FoundPrecision, dtype: str) -> Iterator[LoadHookAdapters]:
    """Casts that may cast a module to `dtype`, trained by an optimizer, whose adapters a
    load-state hook re-creates when the run resumes, after the cast: a call of the hook that
    creates adapters (`adapter_effect`) on the hook's name for the module (`unet_`, one of the
    hook's `models` picked by `isinstance(model, type(unwrap_model(unet)))`), after which
    nothing in the hook upcasts, casts or reassigns parameters, or calls code named like it may
    change their precision. Whatever the cast's own function upcasts ran before the hook."""
    model = precision.model
    finder: PrecisionFinder = precision.finder
    optimizers = [o for o in precision.found.optimizers if o.wrapped_by is None and o.trains]
    hooks = list(_load_hooks(model))
    if not hooks or not optimizers:
        return
    for cast in precision.found.casts:
        if dtype not in cast.dtypes or cast.inherits is not None:
            continue
        trained = [o for o in optimizers if any(cast.covers(path) for path in o.trains)]
        if not trained:
            continue
        after = {id(r.node) for r in precision.successors.calls_after(cast.record)}
        for unit, hook, load in hooks:
            if id(load) not in after:
                continue
            for record, module in _recreating_calls(precision, unit):
                if any(cast.covers(path) for path in finder.paths(module, unit.scope)):
                    yield LoadHookAdapters(cast, trained[0], record, hook, load, module)
                    break


def _load_hooks(model: SemanticModel) -> Iterator[Tuple[CodeUnit, str, cst.Call]]:
    """The functions of the file registered as load-state hooks (`accelerator.
    register_load_state_pre_hook(load_model_hook)`), each with the `accelerator.load_state(...)`
    that runs them (on the same object, as written)."""
    index = model.index
    loads = {}
    for record in index.calls_to("load_state"):
        func = record.node.func
        if isinstance(func, cst.Attribute):
            loads.setdefault(dotted_name(func.value), record.node)
    for record in index.calls_to("register_load_state_pre_hook"):
        func = record.node.func
        load = loads.get(dotted_name(func.value)) if isinstance(func, cst.Attribute) else None
        hook = dotted_name(record.node.args[0].value) if record.node.args and load is not None else None
        if hook is None:
            continue
        for binding in model.resolver.bindings(hook, record.unit.scope):
            unit = next((u for u in model.units if u.node is binding.node), None) if binding.kind == "def" else None
            if unit is not None:
                yield unit, hook, load


def _recreating_calls(precision: FoundPrecision, hook: CodeUnit) -> Iterator[Tuple[CallRecord, str]]:
    """The hook's calls that create adapters on a module it picked from its `models`, each with
    the module that `isinstance` test names (`unet` for `unet_`), when nothing after the call
    in the hook may upcast the trainable parameters."""
    picked = _picked_modules(hook.node)
    for record in hook.calls:
        if adapter_effect(record.node) != "creates":
            continue
        written = adapter_module(record.node, adapter_entry(record.node))  # type: ignore[arg-type]
        module = picked.get(written or "")
        if module is None:
            continue
        after = [r for r in precision.successors.calls_after(record) if r.node is not record.node]
        if not _may_upcast(precision, after, {*picked, *hook.parameters[:1]}):  # and `models`
            yield record, module


def _picked_modules(hook: cst.CSTNode) -> Dict[str, str]:
    """The names a hook gives the modules it picks from its `models` by class, each with the
    module of the training code the class is taken from: `unet_` -> `unet` for `if
    isinstance(model, type(unwrap_model(unet))): unet_ = model` (also `unet_ =
    unwrap_model(model)`, and `model` itself inside that `if`)."""
    found: Dict[str, str] = {}
    for node in iter_tree(hook):
        if not isinstance(node, cst.If) or not isinstance(node.test, cst.Call) or dotted_name(node.test.func) != "isinstance":
            continue
        positional, _ = split_args(node.test.args)
        if len(positional) != 2 or not (isinstance(positional[1], cst.Call) and dotted_name(positional[1].func) == "type"):
            continue
        subject, of = _unwrapped(positional[0]), _unwrapped(positional[1].args[0].value if positional[1].args else None)
        if subject is None or of is None:
            continue
        found.setdefault(subject, of)
        for statement in iter_tree(node.body):
            if isinstance(statement, cst.Assign) and len(statement.targets) == 1 and _unwrapped(statement.value) == subject:
                target = dotted_name(statement.targets[0].target)
                if target is not None:
                    found.setdefault(target, of)
    return found


def _unwrapped(value: Optional[cst.BaseExpression]) -> Optional[str]:
    """The name inside calls of one argument: `unet` of `accelerator.unwrap_model(unet)`."""
    while isinstance(value, cst.Call) and len(value.args) == 1 and value.args[0].keyword is None:
        value = value.args[0].value
    return dotted_name(value) if value is not None else None


def _may_upcast(precision: FoundPrecision, after: List[CallRecord], modules: Collection[str]) -> bool:
    """Whether one of the calls `after` may give trainable parameters another dtype: an
    upcasting adapter call (`cast_training_params`), a cast (`model.float()`, `.to(...)`), a
    loop that assigns parameters anew, or a call named like a precision change that is handed
    one of the hook's `modules` (`upcast_lora(unet_)`; not `lora_state_dict(input_dir)`)."""
    ids = {id(r.node) for r in after}
    if any(ids & calls_within([loop.iter]) for loop, _ in precision.found.reassigned):
        return True
    for record in after:
        call = record.node
        effect = adapter_effect(call)
        if effect == "upcasts":
            return True
        if effect is None and vocabulary.may_change_parameter_precision(dotted_name(call.func) or ""):
            handed = handed_modules(precision.finder, call, record.unit.scope)
            if any(name is not None and name.split(".")[0] in modules for name in handed):
                return True
        if isinstance(call.func, cst.Attribute) and call.func.attr.value in _MAY_UPCAST:
            return True
    return False


# Methods that may give a module's parameters a wider dtype: `.to(torch.float32)`, `.float()`.
_MAY_UPCAST = frozenset({"to", "float", "double", "type"})
