"""The shared AMP semantic layer: what it recognises, and what it refuses to guess."""

import textwrap

import libcst as cst
import pytest

from amplint.semantic import EventKind, analyze
from amplint.semantic.calls import HelperCall


def model(source):
    return analyze(cst.parse_module(textwrap.dedent(source)))


def regions(source):
    return model(source).autocast_regions


def kinds(source):
    found = model(source)
    return [item.kind for record in found.index.calls for item in [found.classify(record)] if item is not None and not isinstance(item, HelperCall)]


# --- imports and aliases -------------------------------------------------------------------


@pytest.mark.parametrize(
    "imports, call",
    [
        ("import torch", "torch.autocast('cuda')"),
        ("import torch", "torch.amp.autocast('cuda')"),
        ("import torch", "torch.cuda.amp.autocast()"),
        ("import torch.cuda.amp as amp", "amp.autocast()"),
        ("from torch.cuda import amp", "amp.autocast()"),
        ("from torch.amp import autocast as ac", "ac('cuda')"),
        ("from torch import autocast", "autocast(device_type='cuda')"),
        ("from torch.cuda.amp import autocast", "autocast()"),
    ],
)
def test_autocast_is_recognised_through_aliases(imports, call):
    found = regions(f"{imports}\nwith {call}:\n    y = model(x)\n")
    assert len(found) == 1
    assert found[0].device == "cuda" and found[0].dtype == "float16" and found[0].dtype_is_default


def test_an_unrelated_autocast_is_not_torch():
    assert regions("from mylib import autocast\nwith autocast():\n    y = model(x)\n") == []


@pytest.mark.parametrize(
    "call, device, dtype",
    [
        ("torch.autocast('cuda', torch.bfloat16)", "cuda", "bfloat16"),
        ("torch.autocast('cuda', dtype=torch.half)", "cuda", "float16"),
        ("torch.autocast('cpu')", "cpu", "bfloat16"),
        ("torch.cpu.amp.autocast()", "cpu", "bfloat16"),
        ("torch.autocast('cuda:0')", "cuda", "float16"),
        ("torch.autocast(device_type=dev)", None, None),  # unknown device: no default dtype
        ("torch.autocast('cuda', dtype=amp_dtype)", "cuda", None),  # float16 or bfloat16: no single dtype
        ("torch.autocast('cuda', dtype=HALF)", "cuda", "float16"),  # module constant
        ("torch.autocast(DEVICE)", "cuda", "float16"),
        ("torch.cuda.amp.autocast(True, torch.bfloat16)", "cuda", "bfloat16"),  # legacy: enabled first
        ("torch.autocast('xpu')", "xpu", None),
        ("torch.autocast('cuda', dtype=getattr(torch, name))", "cuda", None),
    ],
)
def test_autocast_device_and_dtype(call, device, dtype):
    source = f"""
import torch
HALF = torch.float16
DEVICE = "cuda"
amp_dtype = torch.float16
amp_dtype = torch.bfloat16
with {call}:
    y = model(x)
"""
    (region,) = regions(source)
    assert (region.device, region.dtype) == (device, dtype)


@pytest.mark.parametrize(
    "dtype, possible",
    [
        ("amp_dtype", {"float16", "bfloat16"}),  # assigned on two branches
        ("torch.float16 if cuda else torch.bfloat16", {"float16", "bfloat16"}),
        ("{'fp32': torch.float32, 'bf16': torch.bfloat16, 'fp16': torch.float16}[cfg.dtype]", {"float32", "bfloat16", "float16"}),
        ("PTDTYPE", {"bfloat16", "float16"}),
        ("getattr(torch, cfg.dtype)", set()),
        ("cfg.dtype", set()),
    ],
)
def test_possible_dtypes(dtype, possible):
    source = f"""
import torch
if fp16:
    amp_dtype = torch.float16
else:
    amp_dtype = torch.bfloat16
PTDTYPE = {{"bf16": torch.bfloat16, "fp16": torch.float16}}[name]
with torch.autocast("cuda", dtype={dtype}):
    y = model(x)
"""
    (region,) = regions(source)
    assert region.possible_dtypes == possible


@pytest.mark.parametrize(
    "call, active",
    [
        ("torch.autocast('cuda', enabled=False)", False),
        ("torch.autocast('cuda', enabled=OFF)", False),
        ("torch.autocast('cuda', enabled=args.amp)", True),  # unknown counts as on
        ("torch.cuda.amp.autocast(False)", False),
        ("torch.autocast('cuda', dtype=torch.float32)", False),
    ],
)
def test_autocast_enabled(call, active):
    (region,) = regions(f"import torch\nOFF = False\nwith {call}:\n    y = model(x)\n")
    assert region.active is active


def test_context_objects_partial_and_decorators():
    found = regions(
        """
        import torch
        from contextlib import nullcontext
        from functools import partial
        ctx = nullcontext() if cpu else torch.amp.autocast(device_type="cuda", dtype=torch.float16)
        amp = partial(torch.autocast, device_type="cuda")
        with ctx:
            a = f()
        with amp(dtype=torch.bfloat16):
            b = f()
        @torch.autocast("cuda")
        def forward(x):
            return x
        """
    )
    assert sorted((r.dtype, r.unit.name) for r in found) == [("bfloat16", "<module>"), ("float16", "<module>"), ("float16", "forward")]


def test_a_dtype_parameter_is_what_the_callers_in_the_file_pass():
    found = regions(
        """
        import torch
        class Trainer:
            def step(self, x, dtype, other):
                with torch.autocast("cuda", dtype=dtype):
                    return self.model(x)
            def fit(self):
                self.step(x, torch.bfloat16, 1)
                self.step(x, dtype=torch.float16, other=2)
        def untouched(x, dtype):
            with torch.autocast("cuda", dtype=dtype):
                return x
        """
    )
    assert [r.possible_dtypes for r in found] == [frozenset({"bfloat16", "float16"}), frozenset()]


def test_no_grad_context_marks_inference():
    (region,) = regions("import torch\nwith torch.no_grad():\n    with torch.autocast('cuda'):\n        y = m(x)\n")
    assert region.under_no_grad


# --- scalers and optimizers ----------------------------------------------------------------


def test_scalers_by_construction_use_and_annotation():
    found = model(
        """
        import torch
        from torch.distributed.fsdp.sharded_grad_scaler import ShardedGradScaler
        s1 = torch.cuda.amp.GradScaler(enabled=False)
        s2 = ShardedGradScaler()
        class T:
            def __init__(self, amp):
                self.scaler = torch.amp.GradScaler("cuda") if amp else None
            def f(self, fp16_scaler, grad_scaler: "torch.cuda.amp.GradScaler", thing, s, sched):
                fp16_scaler.scale(loss).backward()
                thing.unscale_(opt)
                s.step(self.optimizer)
                sched.step(epoch)
        standard_scaler = StandardScaler()
        standard_scaler.fit(x)
        """
    )
    by_name = {info.name: info for info in found.scalers.values()}
    assert set(by_name) == {"s1", "s2", "self.scaler", "fp16_scaler", "grad_scaler", "thing", "s"}
    assert by_name["s1"].known_disabled
    assert by_name["s2"].enabled is True
    assert by_name["self.scaler"].enabled is True
    assert by_name["fp16_scaler"].enabled is None
    assert set(found.scalers) >= {"mod:<module>:s1", "cls:T:self.scaler", "fn:T.f:fp16_scaler"}


def test_call_kinds():
    found = kinds(
        """
        import torch
        scaler = torch.amp.GradScaler("cuda")
        scaler.scale(loss).backward()
        accelerator.backward(loss)
        scaler.unscale_(opt)
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        accelerator.clip_grad_norm_(params, 1.0)
        scaler.step(opt)
        scaler.update()
        scheduler.step()
        ema.step()
        opt.zero_grad()
        torch.autograd.backward(loss)
        optimizer_g.step()
        """
    )
    assert found == [
        EventKind.SCALE, EventKind.BACKWARD, EventKind.FRAMEWORK_BACKWARD, EventKind.UNSCALE,
        EventKind.CLIP, EventKind.SCALER_STEP, EventKind.SCALER_UPDATE, EventKind.ZERO_GRAD,
        EventKind.BACKWARD, EventKind.OPTIMIZER_STEP,
    ]


# --- the flow: what the gradients hold at each event ---------------------------------------


def states(source, kind):
    """(unit name, GradientState) just before each event of `kind`, on every way through."""
    found = model(source)
    return [(occurrence.unit.name, state.gradients) for occurrence, state in found.states_before(kind)]


def test_correlated_branches_do_not_mix():
    source = """
        def f(scaler, use_amp):
            if use_amp:
                scaler.scale(loss).backward()
            else:
                loss.backward()
            if use_amp:
                scaler.step(opt)
            else:
                opt.step()
        """
    assert all(not g.plain_backwards for _, g in states(source, EventKind.SCALER_STEP))
    assert all(g.scaled_by is None for _, g in states(source, EventKind.OPTIMIZER_STEP))


def test_rebinding_a_flag_breaks_the_correlation():
    source = """
        def f(scaler, use_amp):
            if use_amp:
                loss.backward()
            use_amp = check()
            if use_amp:
                scaler.step(opt)
        """
    assert any(g.plain_backwards for _, g in states(source, EventKind.SCALER_STEP))


def test_scaled_names_flow_through_assignments():
    source = """
        def f(scaler, opt):
            scaled = scaler.scale(loss)
            scaled /= accum
            scaled.backward()
            opt.step()
        """
    ((_, gradients),) = states(source, EventKind.OPTIMIZER_STEP)
    assert gradients.carry_scale


def test_a_for_loop_runs_at_least_once_and_return_diverts():
    source = """
        def f(opt):
            for x in xs:
                if bad(x):
                    return
                loss.backward()
            opt.step()
        """
    found = states(source, EventKind.OPTIMIZER_STEP)
    assert found and all(g.plain_backwards for _, g in found)  # a `for` runs at least once


def test_a_while_loop_may_not_run():
    source = """
        def f(opt):
            while pending():
                loss.backward()
            opt.step()
        """
    assert any(not g.plain_backwards for _, g in states(source, EventKind.OPTIMIZER_STEP))


def test_many_independent_branches_stay_tractable_and_precise():
    # Plain backwards that may reach a step are a union over the ways there, not one state
    # per combination: 2**14 ways, every plain backward reported.
    from amplint.lint.engine import lint_text

    branches = "\n".join(f"    if c{i}:\n        scaler.scale(l{i}).backward()\n    else:\n        l{i}.backward()" for i in range(14))
    source = f"def f(scaler):\n{branches}\n    scaler.step(opt)\n"
    assert [f.code for f in lint_text(source)] == ["AMP001"] * 14
    from amplint.lint.engine import lint_source
    from amplint.rules import ALL_RULES

    assert lint_source(source, "f.py", ALL_RULES).skipped_functions == []


def test_a_unit_too_complex_to_follow_is_skipped_and_counted_not_guessed():
    # Fourteen flags each tested twice: the conditions must stay consistent, so the ways
    # through cannot be merged, and there are 2**14 of them.
    branches = "\n".join(
        f"    if c{i}:\n        scaler.scale(l{i}).backward()\n    else:\n        l{i}.backward()\n"
        f"    if c{i}:\n        scaler.step(o{i})\n    else:\n        o{i}.step()"
        for i in range(14)
    )
    from amplint.lint.engine import lint_source
    from amplint.rules import ALL_RULES

    result = lint_source(f"def f(scaler):\n{branches}\n    scaler.step(opt)\n", "f.py", ALL_RULES)
    assert [(s.name, s.row, s.column) for s in result.skipped_functions] == [("f", 1, 5)] and result.findings == []


def test_many_training_loops_in_one_script_stay_tractable():
    # A notebook-style script with many loops is analysed in full instead of giving up, and
    # every loop's mistake is found.
    from amplint.lint.engine import lint_text

    loop = (
        "for x, y in loader:\n"
        "    with torch.autocast('cuda'):\n"
        "        loss = model(x)\n"
        "    scaler.scale(loss).backward()\n"
        "    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)\n"
        "    scaler.step(opt)\n"
        "    scaler.update()\n"
    )
    source = "import torch\nscaler = torch.amp.GradScaler('cuda')\n" + loop * 30
    assert [f.code for f in lint_text(source)] == ["AMP003"] * 30


def test_the_else_of_a_conjunction_keeps_each_way_it_can_be_taken():
    # `else` of `a and b`: `a` false, or `a` true and `b` false. The scaled backward needs
    # both, so the plain step never sees it.
    source = """
        def f(scaler, args, opt, loss):
            if args.fp16:
                if args.amp == "pytorch":
                    scaler.scale(loss).backward()
            else:
                loss.backward()
            if args.fp16 and args.amp == "pytorch":
                scaler.step(opt)
            else:
                opt.step()
        """
    found = states(source, EventKind.OPTIMIZER_STEP)
    assert found and all(g.scaled_by is None for _, g in found)
