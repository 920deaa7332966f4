"""Uses of the deprecated per-device AMP API, each with its replacement.

`torch.cuda.amp.autocast`, `torch.cuda.amp.GradScaler`, `torch.cuda.amp.custom_fwd`,
`torch.cuda.amp.custom_bwd`, `torch.cpu.amp.autocast` and `torch.cpu.amp.GradScaler` raise a
FutureWarning when called; `torch.amp.*` takes the device type instead. A *use* is where the
old name is called, applied as a decorator, or handed on to be called later (assigned,
passed as an argument, `functools.partial`, a base class); an import alone, `isinstance`,
an annotation, a string or a comment is none. Names are resolved through imports
(`from torch.cuda import amp` -> `amp.GradScaler()`).

A use under a compatibility shim is not one. A shim is recognised by what it tests and by
what its other branch binds, nothing else:
- a branch of an `if` or a conditional expression whose test reads torch's version, by any
  spelling (`torch.__version__`, `TORCH_VERSION`, `_TORCH_GREATER_EQUAL_2_4`, `TORCH_GE_2_4`,
  `is_torch_min_version("2.4")`, or a helper of the file whose body reads a version), or asks
  whether the new API exists (`hasattr(torch, "autocast")`, `hasattr(torch.amp, "custom_fwd")`);
- a name also bound to the new API on another branch (`try: from torch.amp import autocast` /
  `except ImportError: from torch.cuda.amp import autocast`, `custom_fwd =
  partial(torch.amp.custom_fwd, ...)`);
- an `except` that catches what a missing or older API raises (`AttributeError`,
  `ImportError`, `TypeError`, `NameError`, or bare), after a `try` whose body itself calls the
  same name of the new API (`try: scaler = torch.amp.GradScaler(device=device)` / `except
  (AttributeError, TypeError): scaler = torch.cuda.amp.GradScaler()`): the old API runs only
  where the new one failed. An out-of-memory fallback, or another name of the new API, is no
  such shim.
Any other test (`hasattr(pl_module, "log_images")`) or other binding (fairscale's
`ShardedGradScaler` imported as `GradScaler` on another branch) leaves the old API a use: it
is reported, without a fix when the name is bound to something else too.

Each use carries what a fix needs, so that the fix defines every name it writes:
- the replacement's spelling in this file: a name already bound to it (`from torch.amp
  import autocast as ac` -> `ac`), else through a bound `torch.amp` or `torch`, else
  `torch.amp.X` with `import torch` to add;
- for calls and decorators, the replacement node: the device type first (`autocast`,
  `GradScaler`) or as `device_type=` (`custom_fwd`, `custom_bwd`), and the old autocast's
  positional arguments (`enabled, dtype, cache_enabled`) as keywords, since the new
  signature puts `dtype` second. `torch.cuda.amp.autocast(*args)` has no safe rewrite.
- the import alias that bound the old name (`from torch.cuda.amp import autocast`), which a
  fix may drop once no use of it is left;
- the torch release the rewrite needs (`SINCE` of the name it writes: `torch.amp.GradScaler`
  2.3), so that the rule offers it as safe only to a project whose oldest torch has it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cached_property
from typing import Dict, List, Optional, Set, Tuple

import libcst as cst
from libcst import MaybeSentinel

from amplint import work
from amplint.semantic import (
    names_used,
    Analysis,
    Binding,
    ModuleIndex,
    Resolver,
    Scope,
    SemanticModel,
    all_bindings,
    children,
    dotted_name,
    iter_tree,
    source_text,
)
from amplint.semantic.pytorch.deprecated_api import DEPRECATED, DEPRECATED_SINCE, LEGACY_AUTOCAST_PARAMETERS, SAME_AS, SINCE, WARNS_SINCE

# Names that read torch's version: `TORCH_VERSION`, `is_torch_min_version`, `_TORCH_GREATER_EQUAL_2_4`,
# `TORCH_GE_2_4`, `torch2`, `IS_TORCH_2_4_OR_NEWER`; not `use_torch_amp` or `torch_dtype`.
_VERSION_NAME = re.compile(
    r"version|torch_?(?:v_?)?(?:ge|gt|le|lt|eq|geq|leq|greater|less|newer|older|min|max|at_?least|before|since|\d)(?![a-z])"
)
# What `hasattr(X, "name")` must ask for a shim: the new API's module or one of its names.
_NEW_API_MODULES = ("torch", "torch.amp")
_NEW_API_NAMES = ("amp", "autocast", "GradScaler", "custom_fwd", "custom_bwd")
_NOT_A_USE = frozenset({"isinstance", "issubclass", "hasattr", "getattr", "type", "print", "repr", "str", "id"})


@dataclass(frozen=True, eq=False)
class DeprecatedAmpUse:
    node: cst.CSTNode  # what a fix replaces: the call, the bare decorator, or the reference
    kind: str  # "call", "decorator", "reference", "base"
    deprecated: str  # "torch.cuda.amp.autocast"
    replacement: str  # "torch.amp.autocast"
    device_type: str  # "cuda" or "cpu"
    spelling: str  # how this file can write the replacement: "torch.amp.autocast", "ac"
    import_to_add: Optional[str]  # "import torch" when the spelling needs it
    new_node: Optional[cst.CSTNode]  # the rewritten call or decorator; None when not safe
    import_alias: Optional[cst.ImportAlias] = None  # the alias that bound the old name, if any
    shared: bool = False  # the name is bound to another API on another branch: no rewrite fits both
    # The torch release the rewrite needs that the old code does not: the first with the name it
    # writes (`torch.amp.GradScaler`: (2, 3)); None when the old name is no older than it.
    needs_torch: Optional[Tuple[int, int]] = None

    @property
    def new_text(self) -> Optional[str]:
        return source_text(self.new_node) if self.new_node is not None else None


class Deprecations(Analysis):
    """The file's uses of the deprecated AMP API: `model.facts(Deprecations).uses`."""

    def __init__(self, model: SemanticModel) -> None:
        super().__init__(model)
        # Calls, decorators and hand-ons of `torch.cuda.amp.*` / `torch.cpu.amp.*` (not under a
        # compatibility shim), each with its `torch.amp` replacement, the device type, how this
        # file spells the replacement, the import that spelling needs, and the rewritten node.
        self.uses: List[DeprecatedAmpUse] = find_deprecated_uses(model.index, model.resolver)

    @cached_property
    def names_used(self) -> Dict[str, int]:
        """How often each name is used outside imports (`names_used`): whether a fix replaces
        the last use of an imported name, so that its import can go too."""
        return names_used(self.model.module)


def find_deprecated_uses(index: ModuleIndex, resolver: Resolver) -> List[DeprecatedAmpUse]:
    return _Finder(index, resolver).uses


__all__ = ["WARNS_SINCE", "DeprecatedAmpUse", "Deprecations", "find_deprecated_uses"]


class _Finder:
    def __init__(self, index: ModuleIndex, resolver: Resolver) -> None:
        self.index = index
        self.resolver = resolver
        self.uses: List[DeprecatedAmpUse] = []
        self._version_shims: Optional[Set[int]] = None  # found on the first deprecated use
        # The nodes of an `except` that catches a missing or older API, after a `try` that calls
        # the new one: id -> the names of the new API it called (found with the version shims).
        self._fallbacks: Dict[int, Set[str]] = {}
        # How each scope spells each replacement (`_spelling`): worked out once, not per use.
        self._spellings: Dict[Tuple[str, int], Tuple[str, Optional[str], str]] = {}
        seen = set()

        def add(node: cst.CSTNode, kind: str, scope: Scope, assigned: Optional[Binding] = None) -> None:
            if id(node) in seen or (kind != "call" and not isinstance(node, (cst.Name, cst.Attribute))):
                return  # a call handed on is a use of its own, found as a call
            if assigned is not None and self._assigned_new_api_elsewhere(assigned):
                return  # `try: f = partial(torch.amp.custom_fwd, ...)` / `except: f = torch.cuda.amp.custom_fwd`
            use = self._use(node, kind, scope)
            if use is not None:
                seen.add(id(node))
                self.uses.append(use)

        for record in index.calls:
            scope = record.unit.scope
            call = record.node
            if self._deprecated(call.func, scope) is not None:
                add(call, "call", scope)
                continue
            callee = self.resolver.qualified(call.func) or dotted_name(call.func) or ""
            if callee.rsplit(".", 1)[-1] in _NOT_A_USE:
                continue
            for arg in call.args:  # `functools.partial(torch.cuda.amp.autocast, ...)`, `f(amp.autocast)`
                for value in _branches(arg.value):
                    add(value, "reference", scope)
        for unit in index.units:
            outer = unit.scope.parent or unit.scope
            for decorator in unit.decorators:
                if not isinstance(decorator, cst.Call):
                    add(decorator, "decorator", outer)
        for binding in all_bindings(index):
            if binding.value is not None and binding.kind in ("assign", "walrus"):
                for value in _branches(binding.value):
                    add(value, "reference", binding.value_scope, binding)
        for scope in index.scopes:
            if scope.kind == "class" and isinstance(scope.node, cst.ClassDef):
                for base in scope.node.bases:
                    add(base.value, "base", scope.parent or scope)

    def _deprecated(self, node: cst.CSTNode, scope: Scope) -> Optional[str]:
        if not isinstance(node, (cst.Name, cst.Attribute)):
            return None
        qualified = self.resolver.qualified(node)
        return qualified if qualified in DEPRECATED else None

    def _use(self, node: cst.CSTNode, kind: str, scope: Scope) -> Optional[DeprecatedAmpUse]:
        target = node.func if isinstance(node, cst.Call) else node
        deprecated = self._deprecated(target, scope)
        if deprecated is None:
            return None
        head = (dotted_name(target) or "").split(".")[0]
        bindings = self.resolver.bindings(head, scope)
        if any(self._modern(binding) for binding in bindings):
            return None  # a compatibility shim: the new API on another branch
        if self._version_shims is None:
            self._version_shims = self._under_shim_tests()
        if id(node) in self._version_shims:
            return None  # `if TORCH_VERSION >= (2, 4): ... else: torch.cuda.amp.autocast()`
        if DEPRECATED[deprecated][0].rsplit(".", 1)[-1] in self._fallbacks.get(id(node), ()):
            return None  # `try: torch.amp.GradScaler(...)` / `except AttributeError: torch.cuda.amp.GradScaler()`
        # Bound to something else too (`torch.musa.amp.autocast`, fairscale's ShardedGradScaler
        # on another branch): still a use of the old API on this branch, but no rewrite of the
        # shared name is right for both.
        shared = head != "torch" and any(not _imports_old_api(binding) for binding in bindings)
        replacement, device, what = DEPRECATED[deprecated]
        spelling, import_to_add, written = self._spelling(replacement, scope)
        needs = SINCE.get(written)
        if needs is not None and DEPRECATED_SINCE.get(deprecated, (0, 0)) >= needs:
            needs = None
        new_node = None
        if kind == "call" and not shared:
            new_node = _rewrite_call(node, what, device, spelling)  # type: ignore[arg-type]
        elif kind == "decorator" and what in ("custom_fwd", "custom_bwd") and not shared:
            new_node = cst.Call(func=cst.parse_expression(spelling), args=[_keyword("device_type", _string(device))])
        alias = next((self._alias(b) for b in bindings if _imports_old_api(b)), None)
        return DeprecatedAmpUse(node, kind, deprecated, replacement, device, spelling, import_to_add, new_node, alias, shared, needs)

    def _modern(self, binding: Binding) -> bool:
        """The new API: imported (`from torch.amp import autocast`, `from torch import amp`) or
        assigned (`custom_fwd = functools.partial(torch.amp.custom_fwd, device_type="cuda")`)."""
        if binding.kind == "import":
            return any(_is_new_api(target) for target in _import_targets(binding))
        if binding.kind == "assign" and binding.value is not None:
            value = binding.value
            if isinstance(value, cst.Call) and (self.resolver.qualified(value.func) or "").endswith("partial") and value.args:
                value = value.args[0].value
            return _is_new_api(self.resolver.qualified(value) or "")
        return False

    def _assigned_new_api_elsewhere(self, binding: Binding) -> bool:
        """The name this binding assigns is bound to the new API by another of its bindings."""
        if binding.name.startswith("self.") or "." in binding.name:
            others = self.resolver.bindings(binding.name, binding.value_scope)
        else:
            others = binding.scope.bindings.get(binding.name, [])
        return any(other is not binding and self._modern(other) for other in others)

    def _under_shim_tests(self) -> Set[int]:
        """The ids of the nodes in a branch of an `if` or a conditional expression whose test
        is a shim's (see the module's docstring)."""
        found: Set[int] = set()
        helpers = _version_helpers(self.index.module)
        for node in iter_tree(self.index.module):
            if isinstance(node, (cst.If, cst.IfExp)) and self._shim_test(node.test, helpers):
                branches = (node.body, node.orelse) if node.orelse is not None else (node.body,)
                for branch in branches:
                    found.update(id(inner) for inner in iter_tree(branch))
            elif isinstance(node, (cst.Try, cst.TryStar)):
                # `try: scaler = torch.amp.GradScaler(device=device)` / `except (AttributeError,
                # TypeError): scaler = torch.cuda.amp.GradScaler()`: the old API runs only where the new one failed.
                called = self._new_api_called(node.body)
                for handler in node.handlers if called else ():
                    if _catches_a_missing_api(handler):
                        for inner in iter_tree(handler):
                            self._fallbacks.setdefault(id(inner), set()).update(called)
            elif isinstance(node, (cst.Module, cst.IndentedBlock)):
                # `if new_api(): return torch.amp.GradScaler("cuda")` and then the old API: the
                # statements after an `if` that always leaves are its `else`.
                for position, statement in enumerate(node.body):
                    if (
                        isinstance(statement, cst.If)
                        and statement.orelse is None
                        and _always_leaves(statement.body)
                        and self._shim_test(statement.test, helpers)
                    ):
                        for rest in node.body[position + 1 :]:
                            found.update(id(inner) for inner in iter_tree(rest))
        return found

    def _new_api_called(self, body: cst.BaseSuite) -> Set[str]:
        """The names of the new API a block calls itself (`GradScaler` of
        `torch.amp.GradScaler(...)`, `autocast` of `torch.autocast(...)`), not in a function,
        lambda or class it defines."""
        called: Set[str] = set()
        waiting: List[cst.CSTNode] = [body]
        while waiting:
            node = waiting.pop()
            if isinstance(node, (cst.FunctionDef, cst.Lambda, cst.ClassDef)):
                continue
            if isinstance(node, cst.Call):
                qualified = self.resolver.qualified(node.func) or ""
                if _is_new_api(qualified):
                    called.add(qualified.rsplit(".", 1)[-1])
            waiting.extend(children(node))
        return called

    def _shim_test(self, test: cst.BaseExpression, helpers: Set[str]) -> bool:
        for node in iter_tree(test):
            if isinstance(node, cst.Name) and (_VERSION_NAME.search(node.value.lower()) or node.value in helpers):
                return True
            if isinstance(node, cst.Attribute) and _VERSION_NAME.search(node.attr.value.lower()):
                return True
            if isinstance(node, cst.Call) and dotted_name(node.func) in ("hasattr", "getattr") and len(node.args) >= 2:
                owner = self.resolver.qualified(node.args[0].value) or dotted_name(node.args[0].value)
                name = node.args[1].value
                if owner in _NEW_API_MODULES and isinstance(name, cst.SimpleString) and name.evaluated_value in _NEW_API_NAMES:
                    return True
        return False

    def _alias(self, binding: Binding) -> Optional[cst.ImportAlias]:
        node = binding.node
        if isinstance(node, (cst.Import, cst.ImportFrom)) and not isinstance(node.names, cst.ImportStar):
            for alias in node.names:
                local = alias.asname.name if alias.asname is not None else alias.name
                if (dotted_name(local) or "").split(".")[0] == binding.name:  # type: ignore[arg-type]
                    return alias
        return None

    def _spelling(self, replacement: str, scope: Scope) -> Tuple[str, Optional[str], str]:
        """How `scope` can write `replacement` with a name it already binds, else with
        `import torch` to add; and which of its names that writes (`torch.autocast`)."""
        key = (replacement, id(scope))
        if key not in self._spellings:
            self._spellings[key] = self._spelled(replacement, scope)
        return self._spellings[key]

    def _spelled(self, replacement: str, scope: Scope) -> Tuple[str, Optional[str], str]:
        member = replacement.rsplit(".", 1)[-1]
        candidates: List[Tuple[int, str, str]] = []
        current: Optional[Scope] = scope
        while current is not None:
            work.charge(len(current.bindings))  # every name bound up the chain: counted (N4)
            for name, bindings in current.bindings.items():
                if not bindings or any(b.kind != "import" for b in bindings):
                    continue
                if self.resolver.binding_scope(name, scope) is not current:
                    continue  # shadowed nearer to the use
                targets = {t for b in bindings for t in _import_targets(b) if _local_of(b, t) == name}
                if len(targets) != 1:
                    continue
                target = targets.pop()
                if target in SAME_AS[replacement]:
                    candidates.append((0, name, target))
                elif target == "torch.amp":
                    candidates.append((1, f"{name}.{member}", replacement))
                elif target == "torch" and name == "torch":
                    candidates.append((2, replacement, replacement))
            current = current.parent
        if candidates:
            _, spelling, written = min(candidates)
            return spelling, None, written
        return replacement, "import torch", replacement


def _import_targets(binding: Binding) -> List[str]:
    node = binding.node
    found: List[str] = []
    if isinstance(node, cst.Import):
        for alias in node.names:
            full = dotted_name(alias.name) or ""
            found.append(full if alias.asname is not None else full.split(".")[0])
    elif isinstance(node, cst.ImportFrom) and not node.relative and node.module is not None and not isinstance(node.names, cst.ImportStar):
        module = dotted_name(node.module) or ""
        for alias in node.names:
            found.append(f"{module}.{dotted_name(alias.name)}")
    return found


def _imports_old_api(binding: Binding) -> bool:
    """`from torch.cuda.amp import autocast`, `from torch.cuda import amp`; not `import torch`."""
    return binding.kind == "import" and any(
        target in DEPRECATED or target in ("torch.cuda.amp", "torch.cpu.amp") for target in _import_targets(binding)
    )


def _local_of(binding: Binding, target: str) -> Optional[str]:
    """The local name an import binds for `target`."""
    node = binding.node
    names = node.names if isinstance(node, (cst.Import, cst.ImportFrom)) and not isinstance(node.names, cst.ImportStar) else ()
    for alias in names:  # type: ignore[union-attr]
        full = dotted_name(alias.name) or ""
        local = dotted_name(alias.asname.name) if alias.asname is not None else None  # type: ignore[arg-type]
        if isinstance(node, cst.ImportFrom):
            if f"{dotted_name(node.module)}.{full}" == target:  # type: ignore[arg-type]
                return local or full
        elif (full if alias.asname is not None else full.split(".")[0]) == target:
            return local or full.split(".")[0]
    return None


# What a `try` around the new API catches when that API is missing or older than its call.
_MISSING_API_ERRORS = frozenset({"AttributeError", "ImportError", "ModuleNotFoundError", "TypeError", "NameError"})


def _catches_a_missing_api(handler: cst.CSTNode) -> bool:
    """A bare `except:`, or one whose every exception is one a missing or older API raises
    (`except (AttributeError, TypeError):`); not `except torch.cuda.OutOfMemoryError:`."""
    caught = getattr(handler, "type", None)
    if caught is None:
        return True
    names = [element.value for element in caught.elements] if isinstance(caught, cst.Tuple) else [caught]
    return all((dotted_name(name) or "").rsplit(".", 1)[-1] in _MISSING_API_ERRORS for name in names)


def _always_leaves(body: cst.BaseSuite) -> bool:
    """The block ends in `return`, `raise`, `continue` or `break`."""
    statements = body.body
    last = statements[-1] if statements else None
    if isinstance(last, cst.SimpleStatementLine):
        last = last.body[-1] if last.body else None
    return isinstance(last, (cst.Return, cst.Raise, cst.Continue, cst.Break))


def _is_new_api(target: str) -> bool:
    return target in ("torch.amp", "torch.autocast", "torch.GradScaler") or target.startswith("torch.amp.")


def _version_helpers(module: cst.Module) -> Set[str]:
    """Functions of the file whose body reads a version (`def is_torch_min_version(v): return
    Version(torch.__version__) >= Version(v)`), by the name a test calls them with."""
    found: Set[str] = set()
    for statement in module.body:
        if isinstance(statement, cst.FunctionDef):
            if any(
                isinstance(node, (cst.Name, cst.Attribute))
                and "version" in (node.value if isinstance(node, cst.Name) else node.attr.value).lower()
                for node in iter_tree(statement.body)
            ):
                found.add(statement.name.value)
    return found


def _branches(value: cst.BaseExpression) -> List[cst.BaseExpression]:
    """`a if c else b` -> [a, b]; anything else -> [itself]."""
    if isinstance(value, cst.IfExp):
        return _branches(value.body) + _branches(value.orelse)
    return [value]


def _string(text: str) -> cst.SimpleString:
    return cst.SimpleString(f'"{text}"')


def _keyword(name: str, value: cst.BaseExpression) -> cst.Arg:
    return cst.Arg(
        value=value,
        keyword=cst.Name(name),
        equal=cst.AssignEqual(whitespace_before=cst.SimpleWhitespace(""), whitespace_after=cst.SimpleWhitespace("")),
    )


def _with_commas(args: List[cst.Arg]) -> List[cst.Arg]:
    """Every argument but the last separated by a comma; the last keeps its own (a trailing one)."""
    fixed = []
    for position, arg in enumerate(args):
        if position < len(args) - 1 and arg.comma is MaybeSentinel.DEFAULT:
            arg = arg.with_changes(comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" ")))
        fixed.append(arg)
    return fixed


def _rewrite_call(call: cst.Call, what: str, device: str, spelling: str) -> Optional[cst.Call]:
    """The call with the new API: `torch.cuda.amp.autocast(True, torch.bfloat16)` ->
    `torch.amp.autocast("cuda", enabled=True, dtype=torch.bfloat16)`."""
    args = list(call.args)
    func = cst.parse_expression(spelling)
    if what == "scaler":
        # torch.amp.GradScaler(device, init_scale, growth_factor, backoff_factor, growth_interval, enabled)
        if args and args[0].keyword is None and isinstance(args[0].value, (cst.SimpleString, cst.FormattedString)):
            return None  # a device first: the new API's call, whatever the name resolved to
        new_args = [cst.Arg(_string(device))] + args
    elif what == "autocast":
        if any(arg.star == "*" for arg in args):
            return None  # positions cannot be mapped to the new signature
        positional = [arg for arg in args if arg.keyword is None and not arg.star]
        if len(positional) > len(LEGACY_AUTOCAST_PARAMETERS):
            return None
        named = [
            arg.with_changes(keyword=cst.Name(name), equal=_keyword(name, arg.value).equal)
            for name, arg in zip(LEGACY_AUTOCAST_PARAMETERS, positional)
        ]
        rest = [arg for arg in args if arg.keyword is not None or arg.star]
        new_args = [cst.Arg(_string(device))] + named + rest
    else:  # custom_fwd(fwd=None, *, device_type, cast_inputs=None), custom_bwd(bwd=None, *, device_type)
        positional = [arg for arg in args if arg.keyword is None and not arg.star]
        rest = [arg for arg in args if arg.keyword is not None or arg.star]
        new_args = positional + [_keyword("device_type", _string(device))] + rest
    return call.with_changes(func=func, args=_with_commas(new_args))
