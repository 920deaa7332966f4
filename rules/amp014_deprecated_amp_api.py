from __future__ import annotations

from typing import Dict, Iterator, List, Optional, Tuple

import libcst as cst

from amplint.analyses.deprecations import WARNS_SINCE, DeprecatedAmpUse, Deprecations
from amplint.lint.fix import SAFE, UNSAFE, Fix, with_import, without_import
from amplint.lint.rule import Flagged, Message, Report, Rule
from amplint.semantic import SemanticModel, dotted_name, source_text


class DeprecatedAmpApi(Rule):
    """`torch.cuda.amp.*` / `torch.cpu.amp.*`: deprecated per-device AMP API, use `torch.amp.*` with a device type.

    ## What it does
    Flags calls, decorators and hand-ons (`amp_autocast = torch.cuda.amp.autocast`,
    `functools.partial(torch.cuda.amp.autocast, ...)`, a subclass) of
    `torch.cuda.amp.autocast`, `torch.cuda.amp.GradScaler`, `torch.cuda.amp.custom_fwd`,
    `torch.cuda.amp.custom_bwd`, `torch.cpu.amp.autocast` and `torch.cpu.amp.GradScaler`,
    however imported (`from torch.cuda.amp import autocast`, `from torch.cuda import amp`).
    The message names the replacement with its device type, the old autocast's positional
    arguments moved to keywords, and the import the replacement needs when the file has
    none (`import torch`).

    Not flagged: an import nobody uses, `isinstance` checks, annotations, strings and
    comments; a compatibility shim, recognised by what it tests and what its other branch
    binds: a branch of an `if` or a conditional expression that tests the torch version by any
    spelling (`torch.__version__`, `TORCH_VERSION`, `_TORCH_GREATER_EQUAL_2_4`,
    `is_torch_min_version("2.4")` or another helper of the file that reads a version) or whether
    the new API exists (`hasattr(torch, "autocast")`, `hasattr(torch.amp, "custom_fwd")`), and a
    name also bound to the new API on another branch (`try: from torch.amp import autocast` /
    `except ImportError: from torch.cuda.amp import autocast`, `from torch import GradScaler`,
    `custom_fwd = functools.partial(torch.amp.custom_fwd, device_type="cuda")`), and an
    `except` that catches what a missing or older API raises (`AttributeError`, `ImportError`,
    `TypeError`, `NameError`, or bare) after a `try` that itself calls the same name of the new
    API (`try: scaler = torch.amp.GradScaler(device=device)` / `except (AttributeError,
    TypeError): scaler = torch.cuda.amp.GradScaler()`), which runs only where the new API
    failed. Nothing is reported in a project whose declared torch never reaches 2.4, where the
    old names do not warn (`torch==2.1.0` in requirements.txt: docs/configuration.md). Nothing
    else is a shim (an out-of-memory fallback is flagged): under `if hasattr(pl_module, "log_images"):` the old API is flagged, and so is a name
    bound on another branch to another API (`torch.musa.amp.autocast`, fairscale's
    `ShardedGradScaler`), without a fix, since no rewrite of the shared name fits both branches.

    ## Why is this bad?
    Since PyTorch 2.4 these names raise a FutureWarning each time they are called (the
    classes are thin subclasses of `torch.amp.autocast` / `torch.amp.GradScaler` that pass
    their device type), and deprecated names are removed in time. The replacements take the
    device type explicitly: `torch.amp.autocast("cuda", ...)`, `torch.amp.GradScaler("cuda",
    ...)`, `@torch.amp.custom_fwd(device_type="cuda")`. Beware the positions: the old
    `autocast(enabled, dtype, cache_enabled)` becomes `autocast(device_type, dtype, enabled,
    cache_enabled)`, so `torch.cuda.amp.autocast(True)` must become `torch.amp.autocast("cuda",
    enabled=True)`, not `torch.amp.autocast("cuda", True)`. The replacements are
    newer than the old names (`torch.amp.GradScaler` needs PyTorch 2.3, `torch.amp.custom_fwd`
    2.4): a project that supports an older torch keeps the old names, or uses a shim, which the
    rule recognises; its fixes are then unsafe (see "Fix safety").

    ## What goes wrong at runtime
    Nothing silent: the mistake is loud by construction, a FutureWarning on every call naming
    the replacement, and the old and new names are the same classes with the same defaults.
    There is no fixture for `amplint verify`: it would measure torch's warning machinery, not
    a training run. What the tests check instead is the rule's replacement: for each rewrite
    it proposes, the new call builds an object with the same device, dtype, enabled and cache
    settings (scale, growth and backoff for a GradScaler) as the old one, and raises no
    FutureWarning.

    ## Example
    ```python
    from torch.cuda.amp import autocast, GradScaler
    scaler = GradScaler(enabled=use_amp)
    with autocast(use_amp, torch.bfloat16):
        loss = model(x)
    ```

    ## Use instead
    ```python
    import torch
    scaler = torch.amp.GradScaler("cuda", enabled=use_amp)
    with torch.amp.autocast("cuda", enabled=use_amp, dtype=torch.bfloat16):
        loss = model(x)
    ```

    ## Fix safety
    Safe (unsafe where the project supports a torch older than the name the rewrite writes). A
    rewrite is safe only where every torch the project supports has that name, and otherwise
    unsafe, applied only with `--unsafe-fixes`, since it would break the project on its oldest
    torch: `torch.amp.GradScaler` came in PyTorch 2.3,
    `torch.amp.custom_fwd` and `custom_bwd` (with `device_type`) in 2.4, `torch.amp.autocast` in
    1.12 (`torch.autocast`, which a rewrite writes where the file already imports it, in 1.10).
    That torch is `target-torch-version`, else the oldest release the project's requirement
    admits (`torch>=1.13` in pyproject.toml's dependencies or a requirements file: 1.13), else
    2.4, where these names started to warn (docs/configuration.md). An unsafe fix's title
    says what it needs (`needs torch 2.3; the project supports torch 1.13`). The rewrite of
    `torch.cpu.amp.GradScaler` is always safe: it came in 2.3 together with its replacement.

    The call or decorator is rewritten to the `torch.amp` name with its device type, the
    old autocast's positional arguments moved to keywords, and `import torch` is added when the
    file has no name for the replacement. Where every use of a name an old import binds gets
    rewritten, one fix rewrites them all and removes that name from the import (the whole
    import when it was the only name; `pass` when it was a block's only statement), so no unused
    import is left behind and no round leaves a use without its import. No fix for `*args`
    calls, hand-ons (`amp_autocast = torch.cuda.amp.autocast`) and base classes. The tests
    check that each rewrite builds an object with the same settings.
    """

    code = "AMP014"
    name = "deprecated-amp-api"
    severity = "warning"
    triggers = ("cuda.amp", "cpu.amp", "import amp")

    def check(self, model: SemanticModel) -> Iterator[Report]:
        newest = getattr(model.torch_target, "newest", None)
        if newest is not None and tuple(newest) < WARNS_SINCE:
            return  # `torch==2.1.0`: no torch the project declares warns
        uses = model.facts(Deprecations).uses
        shared: Dict[Tuple[int, str, str, str], Optional[Fix]] = {}  # one fix per import's family of uses
        for use in uses:
            yield Report(use.node, Message.split(_message(use)), fix=_fix(use, uses, model, shared))

    VALID = (
        # The old API as the fallback of a call of the new one (open_clip's `main.py`), also
        # inside the fallback of another name.
        """
import torch
try:
    scaler = torch.amp.GradScaler(device=device)
except (AttributeError, TypeError):
    scaler = torch.cuda.amp.GradScaler()
try:
    other = torch.amp.GradScaler("cuda")
except AttributeError:
    try:
        torch.autocast("cuda")
    except AttributeError:
        other = torch.cuda.amp.GradScaler()
""",
        # Shims: the new API imported from `torch`, a version test in a conditional
        # expression.
        """
import torch
try:
    from torch import GradScaler
except ImportError:
    from torch.cuda.amp import GradScaler
scaler = GradScaler("cuda")
other = torch.amp.GradScaler(device=device) if _TORCH_GREATER_EQUAL_2_4 else torch.cuda.amp.GradScaler()
""",
        # Shims: a version helper of the project (its name reads a version), the new API
        # assigned on the other branch, and a patch applied only where torch lacks the new name.
        """
import functools
import torch
from megatron.core.utils import is_torch_min_version
try:
    if is_torch_min_version("2.4.0a0"):
        custom_fwd = functools.partial(torch.amp.custom_fwd, device_type="cuda")
    else:
        custom_fwd = torch.cuda.amp.custom_fwd
except ImportError:
    custom_fwd = torch.cuda.amp.custom_fwd
if not hasattr(torch.amp, "custom_fwd"):
    torch.amp.custom_fwd = torch.cuda.amp.custom_fwd
""",
        # A helper of the file that reads the version, under any name.
        """
import torch
from packaging.version import Version
def new_amp():
    return Version(torch.__version__) >= Version("2.4")
def make_scaler():
    if new_amp():
        return torch.amp.GradScaler("cuda")
    return torch.cuda.amp.GradScaler()
""",
        # The current API.
        """
import torch
scaler = torch.amp.GradScaler("cuda")
with torch.amp.autocast("cuda", dtype=torch.float16):
    loss = model(x)
""",
        # Imported but unused, an isinstance check, strings and comments.
        """
import torch
from torch.cuda.amp import GradScaler  # torch.cuda.amp.GradScaler()
if isinstance(scaler, torch.cuda.amp.GradScaler):
    print("torch.cuda.amp.autocast() is deprecated")
""",
        # A compatibility shim for older torch.
        """
try:
    from torch.amp import autocast
except ImportError:
    from torch.cuda.amp import autocast
with autocast("cuda"):
    loss = model(x)
""",
        # A call gated on the torch version.
        """
import torch
if TORCH_VERSION >= (2, 4):
    scaler = torch.amp.GradScaler("cuda")
else:
    scaler = torch.cuda.amp.GradScaler()
""",
        # An unrelated `amp` module.
        """
from apex import amp
model, optimizer = amp.initialize(model, optimizer, opt_level="O1")
""",
    )
    INVALID = (
        Flagged(
            """
import torch
scaler = torch.cuda.amp.GradScaler(enabled=args.amp)
with torch.cuda.amp.autocast(args.amp, torch.bfloat16):
    loss = model(x)
""",
            at=((3, 10), (4, 6)),
        ),
        # The old API tried first: it runs, and warns, on every torch that has it. And an
        # out-of-memory fallback, which runs on every torch.
        Flagged(
            """
import torch
try:
    scaler = torch.cuda.amp.GradScaler()
except AttributeError:
    scaler = torch.amp.GradScaler("cuda")
try:
    with torch.autocast("cuda"):
        out = model(x)
except torch.cuda.OutOfMemoryError:
    with torch.cuda.amp.autocast():
        out = model(x[:1])
""",
            at=((4, 14), (11, 10)),
        ),
        # From-imports: the fix spells `torch.amp.*` and adds `import torch`.
        Flagged(
            """
from torch.cuda.amp import autocast, custom_bwd, custom_fwd
class Scale(Function):
    @staticmethod
    @custom_fwd(cast_inputs=torch.float32)
    def forward(ctx, x):
        return x * 2
    @staticmethod
    @custom_bwd
    def backward(ctx, grad):
        return grad * 2
with autocast():
    y = Scale.apply(x)
""",
            at=((5, 6), (9, 6), (12, 6)),
        ),
        # torch.cpu.amp, a module alias, and a factory handed on.
        Flagged(
            """
import functools
import torch
from torch.cuda import amp
with torch.cpu.amp.autocast(dtype=torch.bfloat16):
    y = model(x)
scaler = amp.GradScaler()
amp_autocast = functools.partial(torch.cuda.amp.autocast, dtype=torch.float16)
""",
            at=((5, 6), (7, 10), (8, 34)),
        ),
        # Not shims: a `hasattr` on something other than torch's AMP API, and a name bound to
        # another API on another branch (reported, without a fix: no rewrite fits both).
        Flagged(
            """
import torch
if IS_MUSA_AVAILABLE:
    from torch.musa.amp import autocast
else:
    from torch.cuda.amp import autocast
if use_fsdp:
    from fairscale.optim.grad_scaler import ShardedGradScaler as GradScaler
else:
    from torch.cuda.amp import GradScaler
scaler = GradScaler()
def log_images(pl_module, batch):
    if hasattr(pl_module, "log_images"):
        with torch.cuda.amp.autocast():
            return pl_module.log_images(batch)
with autocast(enabled=True):
    loss = model(x)
""",
            at=((11, 10), (14, 14), (16, 6)),
        ),
    )


def _message(use: DeprecatedAmpUse) -> str:
    old = f"`{source_text(use.node)}`"
    if use.new_node is not None:
        fix = f"write `{use.new_text}`"
    elif use.shared:
        name = (dotted_name(use.node.func if isinstance(use.node, cst.Call) else use.node) or "").split(".")[0]
        fix = (
            f"bind `{name}` to `{use.spelling}` on this branch and pass the device type `\"{use.device_type}\"` "
            "(another branch binds the name to another API, so no rewrite is offered)"
        )
    elif use.kind == "call":
        fix = (
            f"call `{use.spelling}(\"{use.device_type}\", ...)` with the old positional arguments as keywords "
            "(`*args` cannot be mapped)"
        )
    elif use.kind == "base":
        fix = f"derive from `{use.spelling}` and pass `\"{use.device_type}\"` to `super().__init__()`"
    else:
        fix = f"hand on `{use.spelling}` and call it with the device type `\"{use.device_type}\"` first"
    if use.import_to_add:
        fix += f" (and add `{use.import_to_add}`)"
    return f"{old} is deprecated (calling it raises a FutureWarning) in favour of `{use.replacement}` with a device type: {fix}."


def _release(version: Tuple[int, int]) -> str:
    """(1, 13) -> "1.13"; a major's unknown last minor (`torch<2`) -> "1.x"."""
    return f"{version[0]}.{version[1]}" if version[1] < 999 else f"{version[0]}.x"


def _fix(
    use: DeprecatedAmpUse, uses: List[DeprecatedAmpUse], model: SemanticModel, shared: Dict[Tuple[int, str, str, str], Optional[Fix]]
) -> Optional[Fix]:
    """The rewritten call or decorator, and the import its spelling needs; none where the
    rewrite is not certain (`*args`, a hand-on, a base class). Where every use of the name an
    old import binds is rewritten, one fix rewrites them all and drops that import, so that
    no half-done round leaves a name without its import: the same fix for each of them (made
    once, kept in `shared`), so that a file of many uses costs their number, not its square."""
    if use.new_node is None:
        return None
    together = [use]
    alias = use.import_alias
    if alias is not None:
        key = (id(alias), use.replacement, use.device_type, use.import_to_add or "")
        if key in shared:
            return shared[key]
        local = (dotted_name(alias.asname.name if alias.asname is not None else alias.name) or "").split(".")[0]
        same = [other for other in uses if other.import_alias is alias]
        if all(other.new_node is not None for other in same) and model.facts(Deprecations).names_used.get(local, 0) == len(same):
            together = same
            shared[key] = fix = _rewrite(use, together, model, alias)
            return fix
        alias = None
    return _rewrite(use, together, model, alias)


def _rewrite(use: DeprecatedAmpUse, together: List[DeprecatedAmpUse], model: SemanticModel, alias: Optional[cst.ImportAlias]) -> Fix:
    title = f"Use `{use.replacement}` with `\"{use.device_type}\"`"
    # Safe only where every torch the project supports has the name the rewrite writes.
    needs = max((other.needs_torch for other in together if other.needs_torch is not None), default=None)
    target = model.torch_target
    applicability = SAFE
    if needs is not None and target is not None and target < needs:
        applicability = UNSAFE
        title += f" (needs torch {needs[0]}.{needs[1]}; the project supports torch {_release(target)})"
    fix = Fix(
        title,
        applicability=applicability,
        replace=tuple((other.node, other.new_node) for other in together),  # type: ignore[misc]
    )
    if use.import_to_add:
        fix = with_import(model.module, use.import_to_add, fix)
    return without_import(model.index, alias, fix) if alias is not None else fix
