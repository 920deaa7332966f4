"""The semantic layer's facts about checkpoints (`amplint.analyses.checkpoints`) and about
how often code runs (`amplint.analyses.repetition`)."""

import textwrap

import libcst as cst
import pytest

from amplint.analyses.checkpoints import Checkpoints
from amplint.analyses.repetition import Repetitions
from amplint.semantic import analyze, source_text


def model(source):
    return analyze(cst.parse_module(textwrap.dedent(source)))


def scalers(found):
    """(scaler info, construction record) for each GradScaler the file builds."""
    return list(found.grad_scalers_built())


def only_scaler(found):
    (built,) = scalers(found)
    return built


# --------------------------------------------------------------------------- the optimizer's state


def test_optimizer_state_saved_and_restored_is_found_by_the_receiver():
    found = model(
        """
        import torch
        optimizer = torch.optim.AdamW(model.parameters())
        opt_d = make()
        torch.save({"optimizer": optimizer.state_dict(), "model": model.state_dict()}, path)
        opt_d.load_state_dict(ckpt["opt_d"])
        scheduler.load_state_dict(ckpt["scheduler"])
        """
    )
    assert [source_text(call.node) for call in found.facts(Checkpoints).optimizer_checkpoints()] == [
        "optimizer.state_dict()",
        'opt_d.load_state_dict(ckpt["opt_d"])',
    ]
    assert [call.restores for call in found.facts(Checkpoints).optimizer_checkpoints()] == [False, True]


def test_copies_kept_in_memory_are_not_checkpoints():
    found = model(
        """
        import copy
        best = copy.deepcopy(optimizer.state_dict())
        optimizer.load_state_dict(optimizer.state_dict())
        optimizer.load_state_dict(copy.deepcopy(best))
        initial = copy.deepcopy(optimizer.state_dict())
        optimizer.load_state_dict(initial)
        """
    )
    assert found.facts(Checkpoints).optimizer_checkpoints() == []


def test_an_optimizer_handed_to_another_modules_checkpointing_is_checkpointed():
    found = model(
        """
        from utils import save_checkpoint, load_checkpoint
        def save_local(model, optimizer):
            torch.save(model.state_dict(), path)
        net_g, optim_g, epoch = load_checkpoint(path, net_g, optim_g)
        save_checkpoint(net_g, optim_g, lr, epoch, path)
        save_local(net_g, optim_g)  # a helper of the file is read, not guessed about
        train(net_g, optim_g)
        """
    )
    assert [(call.receiver, call.restores) for call in found.facts(Checkpoints).optimizer_checkpoints()] == [("optim_g", True), ("optim_g", False)]


def test_torch_distributed_checkpoint_state_functions_count():
    found = model(
        """
        from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict
        model_state, optim_state = get_state_dict(model, optimizers=self.optimizer)
        set_state_dict(model, optimizer, model_state_dict=a, optim_state_dict=b)
        """
    )
    assert [(call.receiver, call.restores) for call in found.facts(Checkpoints).optimizer_checkpoints()] == [
        ("self.optimizer", False),
        ("optimizer", True),
    ]


def test_the_checkpoints_a_local_scaler_can_reach():
    found = model(
        """
        import torch
        class Algorithm:
            def __init__(self):
                self.shared = torch.amp.GradScaler("cuda")
            def warmup(self):
                scaler = torch.amp.GradScaler("cuda")
                run(scaler)
            def train(self):
                scaler = torch.amp.GradScaler("cuda")
                self.epoch(scaler)
            def epoch(self, s):
                self.save_model()
            def save_model(self):
                torch.save({"optimizer": self.optimizer.state_dict()}, path)
        """
    )
    by_unit = {record.unit.name: len(found.facts(Checkpoints).optimizer_checkpoints(info.key)) for info, record in scalers(found)}
    assert by_unit == {"Algorithm.__init__": 1, "Algorithm.warmup": 0, "Algorithm.train": 1}


# --------------------------------------------------------------------------- the scaler's state


@pytest.mark.parametrize(
    "source",
    [
        # directly, in a dict built over several statements
        """
        scaler = torch.amp.GradScaler("cuda")
        ckpt = {"optimizer": optimizer.state_dict()}
        ckpt["scaler"] = scaler.state_dict()
        """,
        # restored only
        """
        scaler = torch.amp.GradScaler("cuda")
        scaler.load_state_dict(torch.load(path)["scaler"])
        """,
        # a helper of the file, by position and by keyword
        """
        def save(path, model, s):
            torch.save({"scaler": s.state_dict()}, path)
        scaler = torch.amp.GradScaler("cuda")
        save(path, model, scaler)
        """,
        """
        def save(path, model, grad_scaler=None):
            torch.save({"scaler": grad_scaler.state_dict()}, path)
        scaler = torch.amp.GradScaler("cuda")
        save(path, model, grad_scaler=scaler)
        """,
        # copied into an attribute whose state the class saves
        """
        class Trainer:
            def __init__(self, scaler=None):
                if scaler is None:
                    scaler = torch.amp.GradScaler("cuda")
                self.scaler = scaler
            def state_dict(self):
                return {"scaler": self.scaler.state_dict()}
        """,
        # returned, unpacked by the caller, saved there
        """
        def build():
            scaler = torch.amp.GradScaler("cuda")
            return model, optimizer, scaler
        def main():
            model, optimizer, scaler = build()
            torch.save({"scaler": scaler.state_dict()}, path)
        """,
    ],
)
def test_scaler_state_saved_through_copies_and_helpers(source):
    found = model("import torch\n" + textwrap.dedent(source))
    info, _ = only_scaler(found)
    kept = found.facts(Checkpoints).scaler_state_kept(info.key)
    assert kept is not None and kept.why == "its state is saved or restored"


@pytest.mark.parametrize(
    "statement, why",
    [
        # another module's checkpointing functions: its state is saved there
        ("save_checkpoint(model, optimizer, scaler, path)", "its state is saved or restored"),
        ("misc.save_model(args=args, model=model, loss_scaler=scaler)", "its state is saved or restored"),
        ("checkpointer = Checkpointer(model, optimizer=optimizer, scaler=scaler)", "its state is saved or restored"),
        ("torch.save(scaler, path)", "its state is saved or restored"),
        ("cu.load_checkpoint(path, model, optimizer, scaler if amp else None)", "its state is saved or restored"),
        # functions that may
        ("utils.dump_state(scaler)", "it is passed to `utils.dump_state`"),
        ("trainer = Trainer(model, optimizer, scaler)", "an instance of `Trainer` holds it"),
        ('to_save = {"model": model, "scaler": scaler}', "`to_save` collects it"),
        ("objects = [model, optimizer, scaler]", "`objects` collects it"),
        ("checkpointables.append(scaler)", "`checkpointables.append` collects it"),
        ('setattr(self, "scaler0", scaler)', "an object's attribute holds it"),
        ("state.scaler = scaler", "`state.scaler` holds it"),
        ('for name, obj in {"scaler": scaler}.items():\n    save(obj)', "a loop over objects holds it"),
    ],
)
def test_scaler_handed_to_code_that_may_checkpoint_it(statement, why):
    found = model(f"import torch\nscaler = torch.amp.GradScaler('cuda')\n{statement}\n")
    info, _ = only_scaler(found)
    kept = found.facts(Checkpoints).scaler_state_kept(info.key)
    assert kept is not None and kept.why == why


def test_a_whole_object_saved_may_hold_the_scaler():
    found = model(
        """
        import torch
        trainer.scaler = torch.amp.GradScaler("cuda")
        torch.save(trainer.state_dict(), path)
        class Runner(BaseRunner):
            def __init__(self):
                self.scaler = torch.amp.GradScaler("cuda")
            def save(self):
                torch.save(self.state_dict(), path)
        """
    )
    for info, _ in scalers(found):
        kept = found.facts(Checkpoints).scaler_state_kept(info.key)
        assert kept is not None and "may hold it" in kept.why


def test_a_class_whose_own_state_dict_leaves_the_scaler_out_does_not_keep_it():
    found = model(
        """
        import torch
        class Runner:
            def __init__(self):
                self.scaler = torch.amp.GradScaler("cuda")
            def state_dict(self):
                return {"optimizer": self.optimizer.state_dict()}
            def save(self):
                torch.save(self.state_dict(), path)
        """
    )
    info, _ = only_scaler(found)
    assert found.facts(Checkpoints).scaler_state_kept(info.key) is None


@pytest.mark.parametrize(
    "statement",
    [
        "train_one_epoch(model, loader, optimizer, scaler)",  # trains with it, keeps nothing
        "self_test(scaler.get_scale())",  # a value read off the scaler, not the scaler
        "print(scaler)",
    ],
)
def test_code_that_only_uses_the_scaler_does_not_keep_its_state(statement):
    found = model(f"import torch\nscaler = torch.amp.GradScaler('cuda')\n{statement}\n")
    info, _ = only_scaler(found)
    assert found.facts(Checkpoints).scaler_state_kept(info.key) is None


def test_state_saved_by_attribute_name_may_be_anything():
    found = model(
        """
        import torch
        scaler = torch.amp.GradScaler("cuda")
        state = {name: getattr(self, name).state_dict() for name in self.checkpointables}
        """
    )
    info, _ = only_scaler(found)
    assert found.facts(Checkpoints).scaler_state_kept(info.key).why == "the file saves objects' state generically"


def test_returns_are_found_in_nested_blocks():
    found = model(
        """
        import torch
        def build_amp(cfg):
            scaler = torch.amp.GradScaler("cuda")
            try:
                if cfg.amp:
                    with ctx:
                        return scaler
            finally:
                pass
        def other():
            scaler = torch.amp.GradScaler("cuda")
            def inner(scaler):
                return scaler
            return inner(None)
        """
    )
    (returned, local) = scalers(found)
    assert found.facts(Checkpoints).scaler_state_kept(returned[0].key).why == "it is returned to code that may keep it"
    # `inner`'s return is its own parameter's, not `other`'s scaler
    assert found.facts(Checkpoints).scaler_state_kept(local[0].key) is None


def test_returned_to_no_caller_in_the_file_may_be_kept():
    found = model(
        """
        import torch
        def build_amp(cfg):
            scaler = torch.amp.GradScaler("cuda")
            return scaler
        """
    )
    info, _ = only_scaler(found)
    assert found.facts(Checkpoints).scaler_state_kept(info.key).why == "it is returned to code that may keep it"


# --------------------------------------------------------------------------- built again after a restore


def test_restored_before_a_construction():
    found = model(
        """
        import torch
        scaler = torch.amp.GradScaler("cuda")
        scaler.load_state_dict(ckpt["scaler"])
        if args.resume:
            scaler.load_state_dict(ckpt["scaler"])
        else:
            scaler = torch.amp.GradScaler("cuda")
        if not args.resume:
            scaler = torch.amp.GradScaler("cuda")
        scaler = torch.amp.GradScaler("cuda")
        """
    )
    built = scalers(found)
    restored = [found.facts(Checkpoints).restored_before(record, info.key) for info, record in built]
    assert restored[0] is None  # the first construction
    # the `else` of the `if` that restores it and the `if not` of the same flag are exclusive
    # with the restore under it, not with the unconditional one before
    assert [source_text(r.node) if r else None for r in restored[1:]] == ['scaler.load_state_dict(ckpt["scaler"])'] * 3


def test_restored_by_a_helper_called_first():
    found = model(
        """
        import torch
        class Trainer:
            def resume(self, path):
                self.scaler.load_state_dict(torch.load(path)["scaler"])
            def setup(self):
                self.resume(self.path)
                self.scaler = torch.amp.GradScaler("cuda")
            def other(self):
                self.scaler = torch.amp.GradScaler("cuda")
        """
    )
    (setup, other) = scalers(found)
    assert found.facts(Checkpoints).restored_before(setup[1], setup[0].key) is not None
    assert found.facts(Checkpoints).restored_before(other[1], other[0].key) is None


# --------------------------------------------------------------------------- repetition


def test_a_call_in_a_loop_repeats_with_the_innermost_loop():
    found = model(
        """
        import torch
        for epoch in range(10):
            for x in loader:
                scaler = torch.amp.GradScaler("cuda")
        """
    )
    _, record = only_scaler(found)
    (repetition,) = found.facts(Repetitions).iterations_of(record)
    assert repetition.header == "for x in loader:" and repetition.via == ()


def test_a_function_repeats_with_the_loops_of_its_callers():
    found = model(
        """
        import torch
        def make():
            return torch.amp.GradScaler("cuda")
        def step():
            s = torch.amp.GradScaler("cuda")
        def epoch():
            step()
        def main():
            make()
            for e in range(3):
                epoch()
        """
    )
    built = scalers(found)
    assert len(built) == 1  # `return GradScaler()` fills no variable
    _, record = built[0]
    (repetition,) = found.facts(Repetitions).iterations_of(record)
    assert repetition.header == "for e in range(3):"
    assert [source_text(call.node) for call in repetition.via] == ["epoch()", "step()"]


def test_a_function_called_once_does_not_repeat():
    found = model(
        """
        import torch
        def setup():
            scaler = torch.amp.GradScaler("cuda")
        setup()
        """
    )
    _, record = only_scaler(found)
    assert found.facts(Repetitions).iterations_of(record) == []


def test_a_loop_that_breaks_at_the_end_of_its_body_runs_once():
    found = model(
        """
        import torch
        for attempt in range(3):
            try:
                scaler = torch.amp.GradScaler("cuda")
                train(scaler)
                break
            except RuntimeError:
                pass
        while True:
            scaler2 = torch.amp.GradScaler("cuda")
            if done:
                break
        """
    )
    (retry, loop) = scalers(found)
    assert found.facts(Repetitions).iterations_of(retry[1]) == []
    assert len(found.facts(Repetitions).iterations_of(loop[1])) == 1  # a conditional break ends the loop, not each iteration


@pytest.mark.parametrize(
    "guard, every",
    [
        ("if use_amp:", True),  # the same every iteration
        ("if scaler is None:", False),  # lazy: the construction binds it
        ("if step == 0:", False),  # the loop variable
        ("if first:", False),  # bound in the loop
        ('if not hasattr(self, "scaler"):', False),
    ],
)
def test_an_if_that_tests_what_the_iteration_changes_does_not_run_every_time(guard, every):
    found = model(
        f"""
        import torch
        first = True
        for step, x in enumerate(loader):
            {guard}
                scaler = torch.amp.GradScaler("cuda")
            first = False
        """
    )
    _, record = only_scaler(found)
    assert bool(found.facts(Repetitions).iterations_of(record)) is every


def test_a_parameter_is_as_varying_as_what_the_caller_passes():
    found = model(
        """
        import torch
        def train_epoch(model, amp, epoch):
            if amp:
                scaler = torch.amp.GradScaler("cuda")
            if epoch == 0:
                scaler2 = torch.amp.GradScaler("cuda")
        for epoch in range(3):
            train_epoch(model, args.amp, epoch)
        """
    )
    (flagged, first_epoch) = scalers(found)
    assert len(found.facts(Repetitions).iterations_of(flagged[1])) == 1
    assert found.facts(Repetitions).iterations_of(first_epoch[1]) == []


def test_what_outlives_an_iteration():
    found = model(
        """
        import torch
        def step(optimizer, opt2):
            scaler = torch.amp.GradScaler("cuda")
            scaler.step(optimizer)
            scaler.step(opt2)
            scaler.step(self.optimizer)
        def main():
            optimizer = torch.optim.SGD(params, lr=0.1)
            for x in loader:
                fresh = torch.optim.SGD(params, lr=0.1)
                step(optimizer, fresh)
        """
    )
    info, record = only_scaler(found)
    (repetition,) = found.facts(Repetitions).iterations_of(record)
    steps = found.facts(Repetitions).scaler_steps_within(info.key, record, repetition)
    assert [found.facts(Repetitions).outlives(s.argument, record.unit, repetition) for s in steps] == [True, False, True]


def test_steps_within_an_iteration_of_a_loop_in_the_same_unit():
    found = model(
        """
        import torch
        for epoch in range(3):
            scaler = torch.amp.GradScaler("cuda")
            for x in loader:
                scaler.scale(loss).backward()
                scaler.step(optimizer)
                scaler.update()
        scaler.step(optimizer)
        """
    )
    info, record = only_scaler(found)
    (repetition,) = found.facts(Repetitions).iterations_of(record)
    assert [source_text(s.node) for s in found.facts(Repetitions).scaler_steps_within(info.key, record, repetition)] == ["scaler.step(optimizer)"]


# --------------------------------------------------------------------------- scalers and dtypes


def test_grad_scalers_built_leave_out_literally_disabled_ones():
    found = model(
        """
        import torch
        OFF = False
        a = torch.amp.GradScaler("cuda", enabled=False)
        b = torch.amp.GradScaler("cuda", enabled=OFF)
        c = torch.amp.GradScaler("cuda", enabled=args.amp)
        d = torch.cuda.amp.GradScaler()
        """
    )
    assert [info.name for info, _ in scalers(found)] == ["c", "d"]


@pytest.mark.parametrize(
    "regions, possible",
    [
        ("", True),  # no autocast in the file: whatever its model code does
        ('with torch.autocast("cuda", dtype=torch.bfloat16):\n    y = m(x)', False),
        ('with torch.autocast("cuda"):\n    y = m(x)', True),
        ('with torch.autocast("cuda", dtype=dt):\n    y = m(x)', True),  # unknown
        ('with torch.autocast("cpu"):\n    y = m(x)', False),  # the CPU's default is bfloat16
    ],
)
def test_float16_possible(regions, possible):
    assert model(f"import torch\n{regions}\n").float16_possible is possible


# --------------------------------------------------------------------------- scalers built by the file's own factory

OWN_FACTORY = """
import torch


def build_scaler(enabled=True):
    return torch.amp.GradScaler("cuda", enabled=enabled)


def train(model, loader, optimizer, epochs):
    {before}
    for epoch in range(epochs):
        {built}
        for x, y in loader:
            with torch.autocast("cuda", dtype=torch.float16):
                loss = model(x, y)
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
        torch.save({{"model": model.state_dict(), "optimizer": optimizer.state_dict(){saved}}}, "ckpt.pt")
"""


def _rows(source):
    from amplint.lint.engine import lint_text

    return [(f.row, f.code) for f in lint_text(source)]


def test_a_scaler_the_files_own_function_returns_is_a_grad_scaler():
    """`scaler = build_scaler()` with `build_scaler` of the file: built every epoch (AMP008),
    and a checkpoint that leaves its state out (AMP007), as for one built in place."""
    every_epoch = OWN_FACTORY.format(before="pass", built="scaler = build_scaler()", saved="")
    assert _rows(every_epoch) == [(12, "AMP008"), (19, "AMP007")]
    once = OWN_FACTORY.format(before="scaler = build_scaler()", built="pass", saved="")
    assert _rows(once) == [(19, "AMP007")]
    assert _rows(OWN_FACTORY.format(before="scaler = build_scaler()", built="pass", saved=', "scaler": scaler.state_dict()')) == []
    # Disabled by its caller: no scaler to build anew or to save.
    assert _rows(OWN_FACTORY.format(before="pass", built="scaler = build_scaler(enabled=False)", saved="")) == []
