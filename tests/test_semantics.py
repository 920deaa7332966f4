"""The shared AMP semantic layer: what it recognises, and what it refuses to guess."""

import textwrap

import libcst as cst
import pytest

from amplint.facts import CallKind
from amplint.semantics import analyze, looks_like_optimizer


def facts(source):
    return analyze(cst.parse_module(textwrap.dedent(source)))


def regions(source):
    return [region for unit in facts(source).units for region in unit.regions]


def kinds(source):
    return [site.call.kind for unit in facts(source).units for site in unit.calls]


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
    assert [(r.dtype, r.unit.name) for r in found] == [("float16", "<module>"), ("bfloat16", "<module>"), ("float16", "forward")]


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
    module = facts(
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
    assert set(module.scalers) == {"s1", "s2", "self.scaler", "fp16_scaler", "grad_scaler", "thing", "s"}
    assert module.scalers["s1"].known_disabled
    assert module.scalers["s2"].enabled is True
    assert module.scalers["self.scaler"].enabled is True
    assert module.scalers["fp16_scaler"].enabled is None


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
        CallKind.TENSOR_BACKWARD, CallKind.SCALE, CallKind.FRAMEWORK_BACKWARD, CallKind.UNSCALE,
        CallKind.CLIP, CallKind.SCALER_STEP, CallKind.SCALER_UPDATE, CallKind.ZERO_GRAD,
        CallKind.TENSOR_BACKWARD, CallKind.OPTIMIZER_STEP,
    ]


@pytest.mark.parametrize("name", ["opt", "optimizer", "self.optimizer", "optD", "opt_g", "d_optim", "model_opt", "optimizerG"])
def test_optimizer_names(name):
    assert looks_like_optimizer(name)


@pytest.mark.parametrize("name", ["scheduler", "lr_scheduler", "ema", "pbar", "env", "scaler", "self.sched", "options", "adopt"])
def test_not_optimizer_names(name):
    assert not looks_like_optimizer(name)


# --- paths ---------------------------------------------------------------------------------


def paths(source):
    module = facts(source)
    unit = module.units[-1]
    return [
        [(step.call.kind.value, step.scaled) if step.call.kind is CallKind.TENSOR_BACKWARD else step.call.kind.value for step in path]
        for path in unit.paths
    ]


def test_correlated_branches_do_not_mix():
    found = paths(
        """
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
    )
    assert sorted(found) == sorted([[("backward", True), "scaler.step"], [("backward", False), "optimizer.step"]])


def test_rebinding_a_flag_breaks_the_correlation():
    found = paths(
        """
        def f(scaler, use_amp):
            if use_amp:
                scaler.scale(loss).backward()
            use_amp = check()
            if use_amp:
                scaler.step(opt)
        """
    )
    assert [("backward", True)] in found and [("backward", True), "scaler.step"] in found


def test_scaled_names_flow_through_assignments():
    (path,) = paths(
        """
        def f(scaler):
            scaled = scaler.scale(loss)
            scaled /= accum
            scaled.backward()
        """
    )
    assert path == [("backward", True)]


def test_loops_run_one_or_two_times_and_break_or_return():
    found = paths(
        """
        def f(opt):
            for x in xs:
                if bad(x):
                    return
                loss.backward()
            opt.step()
        """
    )
    assert [("backward", False), "optimizer.step"] in found
    assert [("backward", False), ("backward", False), "optimizer.step"] in found
    assert [("backward", False)] in found  # returned during the second iteration
    assert ["optimizer.step"] not in found  # a `for` runs at least once


def test_a_while_loop_may_not_run():
    found = paths(
        """
        def f(opt):
            while pending():
                loss.backward()
            opt.step()
        """
    )
    assert ["optimizer.step"] in found


def test_a_unit_with_too_many_paths_is_skipped_not_guessed():
    branches = "\n".join(f"    if c{i}:\n        scaler.scale(l{i}).backward()\n    else:\n        l{i}.backward()" for i in range(14))
    module = facts(f"def f(scaler):\n{branches}\n    scaler.step(opt)\n")
    assert module.units[-1].paths is None


def test_many_training_loops_in_one_script_stay_tractable():
    # Paths are cut after each step: a notebook-style script with many loops is analysed in
    # full instead of giving up, and every loop's mistake is found.
    from amplint.engine import lint_text

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
