"""The semantic layer's precision facts outside autocast: casts, what optimizers train,
in-place averages, what runs after a call, placements and device gates, and uses of the
deprecated per-device AMP API."""

import textwrap

import libcst as cst
import pytest

from amplint.analyses.adapters import adapters_added
from amplint.analyses.deprecations import Deprecations
from amplint.analyses.devices import Devices
from amplint.analyses.precision import Precision
from amplint.semantic import analyze, calls_within


def model(source):
    return analyze(cst.parse_module(textwrap.dedent(source)))


def trained(source, dtype="float16"):
    return [(cast.name, optimizer.name) for cast, optimizer in model(source).facts(Precision).trained_in_low_precision(dtype)]


def averaged(source, dtype="float16"):
    return [cast.name for cast, _ in model(source).facts(Precision).averaged_in_low_precision(dtype)]


# --- casts ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "line, name, dtypes",
    [
        ("model.half()", "model", {"float16"}),
        ("model = Net().cuda().half()", "model", {"float16"}),
        ("model.to(torch.float16)", "model", {"float16"}),
        ("model.to('cuda', torch.half)", "model", {"float16"}),
        ("model.to(device, dtype=torch.bfloat16)", "model", {"bfloat16"}),
        ("self.model = model.to(dtype=dt)", "model", {"float16", "bfloat16"}),
        ("ema = copy.deepcopy(model).half()", "ema", {"float16"}),
        ("model.float()", "model", {"float32"}),
        ("unet.to(device, dtype=args.dtype)", "unet", set()),  # a cast to a dtype unknown here
    ],
)
def test_casts_and_their_dtypes(line, name, dtypes):
    found = model(f"import copy, torch\ndt = torch.float16 if fp16 else torch.bfloat16\n{line}\n").facts(Precision).casts
    assert [(c.name, set(c.dtypes)) for c in found] == [(name, dtypes)]


@pytest.mark.parametrize("line", ["x.to(device)", "model.cuda()", "x.to(other.dtype)", "model(x).float()", "torch.save({'m': deepcopy(m).half()}, p)"])
def test_what_is_no_cast_of_a_variable(line):
    assert model(f"import torch\n{line}\n").facts(Precision).casts == []


def test_a_copy_cast_casts_what_it_is_assigned_to_not_the_original():
    found = model("import copy\nema = copy.deepcopy(model).half() if use_ema else None\n").facts(Precision).casts
    assert [(c.name, c.copy_of) for c in found] == [("ema", "model")]


# --- what optimizers train ------------------------------------------------------------------


def trains(source):
    built = model(source).facts(Precision).optimizers
    return {(o.name, tuple(sorted(key.split(":")[-1] + "".join("." + p for p in rest) for key, rest in o.trains))) for o in built}


def test_optimizers_and_the_modules_they_train():
    source = """
    import torch, itertools
    opt = torch.optim.Adam(model.parameters())
    sgd = SGD([{"params": model.backbone.parameters()}, {"params": head.parameters(), "lr": 1e-3}])
    decay = []
    for n, p in net.named_parameters():
        decay.append(p)
    adamw = torch.optim.AdamW([{"params": decay}], lr=1e-4)
    optimizer_class = bnb.optim.AdamW8bit if args.use_8bit_adam else torch.optim.AdamW
    optimizer = optimizer_class(itertools.chain(unet.parameters(), te.parameters()), lr=1e-4)
    factory_optimizer = create_optimizer_v2(student, "adamw")
    optim = getattr(torch.optim, name)(filter(lambda p: p.requires_grad, lm.parameters()))
    """
    assert trains(source) == {
        ("opt", ("model",)),
        ("sgd", ("head", "model.backbone")),
        ("adamw", ("net",)),
        ("optimizer", ("te", "unet")),
        ("factory_optimizer", ("student",)),
        ("optim", ("lm",)),
    }


@pytest.mark.parametrize(
    "line",
    [
        "param_optimizer = list(model.named_parameters())",
        "scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, f)",
        "opt = FP16Optimizer.build_optimizer(cfg, model.parameters())",
    ],
)
def test_what_is_no_optimizer(line):
    assert model(f"import torch\n{line}\n").facts(Precision).optimizers == []


@pytest.mark.parametrize(
    "wrap",
    [
        "optimizer = FP16_Optimizer(optimizer, static_loss_scale=128.0)",
        "model, optimizer = amp.initialize(model, optimizer, opt_level='O2')",
        "engine, optimizer, _, _ = deepspeed.initialize(model=model, optimizer=optimizer)",
        "optimizer = Lookahead(optimizer)",
    ],
)
def test_wrappers_that_may_keep_master_weights(wrap):
    found = model(f"import torch\noptimizer = torch.optim.SGD(model.parameters(), lr=0.1)\n{wrap}\n").facts(Precision).optimizers
    assert found[0].wrapped_by is not None


@pytest.mark.parametrize(
    "other",
    [
        "sched = torch.optim.lr_scheduler.StepLR(optimizer, 10)",
        "model, optimizer = accelerator.prepare(model, optimizer)",  # accelerate keeps no master copy
        "model, optimizer = fabric.setup(model, optimizer)",
        "trainer = create_supervised_trainer(model, optimizer, loss)",
    ],
)
def test_what_keeps_no_master_weights(other):
    source = f"import torch\noptimizer = torch.optim.SGD(model.parameters(), lr=0.1)\n{other}\n"
    assert model(source).facts(Precision).optimizers[0].wrapped_by is None


def test_modules_are_followed_through_aliases_and_parameters():
    source = """
    import torch
    def train(net):
        opt = torch.optim.SGD(net.parameters(), lr=0.1)
        for x in loader:
            net(x).sum().backward()
            opt.step()
    model = Net().half()
    wrapped = torch.nn.parallel.DistributedDataParallel(model)
    train(wrapped)
    """
    assert trained(source) == [("model", "opt")]


# --- which casts are trained in low precision -----------------------------------------------


def test_cast_then_trained():
    assert trained("import torch\nm = Net().half()\no = torch.optim.SGD(m.parameters(), lr=1)\nfor x in d:\n    m(x).sum().backward()\n    o.step()\n") == [("m", "o")]


def test_bfloat16_is_asked_for_separately():
    source = "import torch\nm = Net().bfloat16()\no = torch.optim.SGD(m.parameters(), lr=1)\n"
    assert trained(source) == [] and trained(source, "bfloat16") == [("m", "o")]


def test_conditions_that_exclude_each_other():
    source = """
    import torch
    if not args.train_te:
        te.half()
    o = torch.optim.AdamW(chain(unet.parameters(), te.parameters()) if args.train_te else unet.parameters())
    """
    assert trained(source) == []


def test_nothing_trains_after_the_cast():
    source = """
    import torch
    o = torch.optim.SGD(m.parameters(), lr=1)
    for x in d:
        m(x).sum().backward()
        o.step()
    m.half()
    export(m)
    """
    assert trained(source) == []


def test_a_cast_undone_or_handed_to_code_that_adds_float32_trainables():
    for after in ("m.float()", "m = get_peft_model(m, cfg)", "cast_training_params(m, dtype=torch.float32)", "add_lora_layers(m)"):
        source = f"import torch\nm.half()\n{after}\no = torch.optim.SGD(m.parameters(), lr=1)\n"
        assert trained(source) == [], after
    partial = "import torch\nm.half()\nm.bn.float()\no = torch.optim.SGD(m.parameters(), lr=1)\n"
    assert trained(partial) == [("m", "o")]


def test_a_submodule_cast_does_not_cover_the_whole_model():
    source = "import torch\nm.backbone.half()\no = torch.optim.SGD(m.parameters(), lr=1)\np = torch.optim.SGD(m.backbone.layer1.parameters(), lr=1)\n"
    assert trained(source) == [("m.backbone", "p")]


def test_a_cast_in_init_precedes_the_other_methods():
    source = """
    import torch
    class Lit:
        def __init__(self):
            self.net = Net().half()
        def configure_optimizers(self):
            return torch.optim.Adam(self.net.parameters())
    """
    assert trained(source) == [("self.net", None)]


# --- in-place averages ----------------------------------------------------------------------


def test_an_average_decayed_in_place():
    source = """
    import copy, torch
    ema = copy.deepcopy(model).half()
    for e, p in zip(ema.parameters(), model.parameters()):
        e.mul_(0.999).add_(p, alpha=0.001)
    """
    found = model(source)
    assert [a.module[0] for a in found.facts(Precision).averages] == ["mod:<module>:ema"]
    assert averaged(source) == ["ema"]


def test_the_decayed_side_of_a_zip_is_the_average():
    # the model itself is cast too, but only `ema` is decayed
    source = """
    import copy, torch
    model.half()
    ema = copy.deepcopy(model).float()
    for e, p in zip(ema.parameters(), model.parameters()):
        e.lerp_(p.float(), 0.001)
    """
    assert averaged(source) == []


def test_a_checkpoint_copy_is_no_average():
    source = """
    import copy, torch
    for e, p in zip(ema.parameters(), model.parameters()):
        e.mul_(0.999).add_(p, alpha=0.001)
    torch.save({"ema": copy.deepcopy(ema).half()}, "ckpt.pt")
    """
    assert averaged(source) == []


def test_an_optimizer_a_helper_returns_is_wrapped_by_its_caller():
    # DeepSpeed's engine: the basic optimizer is built in one method, wrapped in another.
    source = """
    import torch
    class Engine:
        def __init__(self, model, params=None):
            self.module = model
            self.module.half()
            if params is None:
                params = self.module.parameters()
            basic = self._basic_optimizer(params)
            self.optimizer = self._configure_fp16_optimizer(basic)
        def _basic_optimizer(self, params):
            optimizer = torch.optim.Adam(params, lr=1e-3)
            return optimizer
        def step(self):
            self.optimizer.step()
    """
    assert trained(source) == []
    assert trained(source.replace("self._configure_fp16_optimizer(basic)", "basic")) == [("self.module", "optimizer")]


def test_the_names_a_function_returns_are_its_own():
    # Looked for among its statements, under any control flow; not in nested definitions.
    from amplint.analyses.module_paths import _returned

    function = cst.parse_module(
        textwrap.dedent(
            """
            def f(a):
                if a: return a.b
                for x in a:
                    with x:
                        try:
                            return x
                        except E:
                            return
                        else:
                            return (y)
                match a:
                    case 1:
                        return z
                def g():
                    return nested
                class C:
                    def h(self):
                        return method
                k = lambda: lam
                return w if a else v
            """
        )
    ).body[0]
    assert _returned(function) == {"a.b", "x", "y", "z", None}


def test_a_copy_made_after_the_cast_has_the_models_dtype():
    source = """
    import copy, torch
    model.half()
    ema = copy.deepcopy(model)
    for e, p in zip(ema.parameters(), model.parameters()):
        e.mul_(0.999).add_(p, alpha=0.001)
    """
    assert averaged(source) == ["ema"]


def test_a_copy_made_before_the_cast_keeps_float32():
    source = """
    import copy, torch
    ema = copy.deepcopy(model)
    for e, p in zip(ema.parameters(), model.parameters()):
        e.mul_(0.999).add_(p, alpha=0.001)
    model.half()
    """
    assert averaged(source) == []


def test_a_copy_cast_back_first_keeps_float32():
    source = """
    import copy, torch
    model.half()
    model.float()
    ema = copy.deepcopy(model)
    for e, p in zip(ema.parameters(), model.parameters()):
        e.mul_(0.999).add_(p, alpha=0.001)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    """
    assert averaged(source) == []


def test_a_dict_of_copied_tensors_is_decayed_through_its_subscript():
    source = """
    import torch
    model.half()
    ema = {n: p.detach().clone() for n, p in model.named_parameters()}
    shadow = {n: p.detach().clone().float() for n, p in model.named_parameters()}
    for n, p in model.named_parameters():
        ema[n].mul_(0.999).add_(p, alpha=0.001)
    for n, p in model.named_parameters():
        shadow[n].mul_(0.999).add_(p.float(), alpha=0.001)
    """
    # The float32 `shadow` is no average of `model` (the loop iterates `model`, it decays `shadow`).
    assert averaged(source) == ["ema"]


def test_a_container_filled_in_a_loop_with_copies():
    source = """
    import torch
    model.half()
    ema, shadow = {}, []
    for n, p in model.named_parameters():
        ema[n] = p.detach().clone()
        shadow.append(p.detach().clone().float())
    for n, p in model.named_parameters():
        ema[n].mul_(0.999).add_(p, alpha=0.001)
    for s, p in zip(shadow, model.parameters()):
        s.mul_(0.999).add_(p.float(), alpha=0.001)
    """
    assert averaged(source) == ["ema"]


def test_a_loop_over_the_container_of_copies():
    source = """
    import torch
    model.half()
    ema = {n: p.detach().clone() for n, p in model.named_parameters()}
    params = dict(model.named_parameters())
    for name, e in ema.items():
        e.mul_(0.999).add_(params[name], alpha=0.001)
    """
    assert averaged(source) == ["ema"]


def test_a_decay_through_a_local_alias_of_the_container():
    source = """
    import torch
    model.half()
    ema = [p.clone() for p in model.parameters()]
    for i, p in enumerate(model.parameters()):
        e = ema[i]
        e.mul_(0.999).add_(p, alpha=0.001)
    """
    assert averaged(source) == ["ema"]


def test_a_pipeline_cast_casts_the_modules_it_holds():
    source = """
    import torch
    def validate(pipeline, dtype):
        pipeline.to("cuda", dtype=dtype)
    def train(unet, vae, loader):
        optimizer = torch.optim.AdamW(unet.parameters())
        for step, batch in enumerate(loader):
            unet(batch).mean().backward()
            optimizer.step()
            if step % 100 == 0:
                pipeline = StableDiffusionPipeline.from_pretrained("x", unet=accelerator.unwrap_model(unet), vae=vae)
                validate(pipeline, torch.float16)
    """
    found = model(source).facts(Precision)
    cast = next(c for c in found.casts if c.name == "pipeline")
    assert sorted(cast.held.values()) == ["unet", "vae"]
    assert trained(source) == [("pipeline", "optimizer")]


def test_a_cast_in_a_helper_called_after_training_is_not_trained():
    source = """
    import torch
    def validate(pipeline, dtype):
        pipeline.to("cuda", dtype=dtype)
    def train(unet, loader):
        optimizer = torch.optim.AdamW(unet.parameters())
        for batch in loader:
            unet(batch).mean().backward()
            optimizer.step()
        validate(StableDiffusionPipeline(unet=unet), torch.float16)
    if __name__ == "__main__":
        train(load(), loader)
    """
    assert trained(source) == []


# --- what runs after a call -----------------------------------------------------------------


def after(source, marker):
    found = model(source)
    record = next(r for r in found.index.calls if (getattr(r.node.func, "attr", None) or r.node.func).value == marker)
    statements = found.facts(Precision).successors.statements_after(record)
    return sorted(
        r.node.func.value for r in found.index.calls
        if id(r.node) in calls_within(statements) and isinstance(r.node.func, cst.Name)
    )


def test_successors_stop_at_return_and_skip_the_other_branch():
    source = """
    def f():
        a()
        if c:
            mark()
            b()
            return
        else:
            e()
        g()
    """
    assert after(source, "mark") == ["b", "mark"]


def test_successors_run_a_loop_body_again_and_what_follows_it():
    source = """
    def f():
        for x in y:
            a()
            mark()
            b()
        g()
    """
    assert after(source, "mark") == ["a", "b", "g", "mark"]


# --- placements and device gates ------------------------------------------------------------


def choices(source):
    found = model(source)
    return [sorted(sorted(p.devices) for p in found.facts(Devices).runtime_device_choices(r)) for r in found.autocast_regions]


def test_device_chosen_at_run_time_through_a_helper_and_a_parameter():
    source = """
    import torch
    def get_device():
        if torch.cuda.is_available():
            return torch.device("cuda")
        return torch.device("cpu")
    def step(model, x, device):
        with torch.autocast("cuda"):
            return model(x.to(device))
    device = get_device()
    step(model, x, device)
    """
    assert choices(source) == [[["cpu", "cuda"]]]


@pytest.mark.parametrize(
    "gate",
    [
        "with torch.autocast('cuda', enabled=device.type == 'cuda'):",
        "with torch.autocast('cuda', enabled=use_amp):",
        "if torch.cuda.is_available():\n    with torch.autocast('cuda'):",
    ],
)
def test_gated_regions(gate):
    source = f"import torch\ndevice = torch.device('cuda' if ok else 'cpu')\nuse_amp = amp and torch.cuda.is_available()\nm.to(device)\n{gate}\n        y = m(x)\n"
    source = source.replace("\n        y", "\n    y") if not gate.startswith("if") else source
    assert choices(source) == [[]]


def test_literal_placements_and_single_device_variables_are_no_choice():
    source = "import torch\ncpu_device = torch.device('cpu')\nm.cuda()\nx.to('cuda')\ny.to(cpu_device)\nwith torch.autocast('cuda'):\n    z = m(x)\n"
    assert choices(source) == [[]]


# --- the deprecated API ---------------------------------------------------------------------


def uses(source):
    return [(u.kind, u.deprecated, u.new_text, u.import_to_add) for u in model(source).facts(Deprecations).uses]


def test_replacements_name_the_device_and_move_positional_arguments_to_keywords():
    source = "import torch\ntorch.cuda.amp.autocast(True, torch.bfloat16, False)\ntorch.cpu.amp.GradScaler(1024.0)\n"
    assert uses(source) == [
        ("call", "torch.cuda.amp.autocast", 'torch.amp.autocast("cuda", enabled=True, dtype=torch.bfloat16, cache_enabled=False)', None),
        ("call", "torch.cpu.amp.GradScaler", 'torch.amp.GradScaler("cpu", 1024.0)', None),
    ]


def test_the_spelling_reuses_a_bound_name_or_adds_the_import():
    assert uses("from torch.amp import autocast as ac\nfrom torch.cuda.amp import autocast\nautocast()\n") == [
        ("call", "torch.cuda.amp.autocast", 'ac("cuda")', None)
    ]
    assert uses("try:\n    from torch.amp import autocast\nexcept ImportError:\n    from torch.cuda.amp import autocast\nautocast()\n") == []
    assert uses("from torch import amp\nfrom torch.cuda.amp import GradScaler\nGradScaler()\n") == [
        ("call", "torch.cuda.amp.GradScaler", 'amp.GradScaler("cuda")', None)
    ]
    assert uses("from torch.cuda.amp import GradScaler\nGradScaler()\n") == [
        ("call", "torch.cuda.amp.GradScaler", 'torch.amp.GradScaler("cuda")', "import torch")
    ]


def test_star_arguments_have_no_safe_rewrite_for_autocast():
    assert uses("import torch\ntorch.cuda.amp.autocast(*args)\n")[0][2] is None
    assert uses("import torch\ntorch.cuda.amp.autocast(**kwargs)\n")[0][2] == 'torch.amp.autocast("cuda", **kwargs)'


def test_the_old_import_alias_is_recorded_for_the_fix():
    found = model("from torch.cuda.amp import autocast\nwith autocast():\n    pass\n").facts(Deprecations).uses
    assert found[0].import_alias is not None and found[0].import_alias.name.value == "autocast"
    assert model("import torch\ntorch.cuda.amp.autocast()\n").facts(Deprecations).uses[0].import_alias is None


# --- which models a loss is computed from, and whether an optimizer holds them ------------------


def feeds(body, loss="loss", optimizer="opt", header="opt = torch.optim.SGD(model.parameters(), lr=0.1)\n"):
    """Whether `loss` (the last assignment to it in `body`) is computed from a model that the
    optimizer `optimizer` holds."""
    m = model("import torch\nmodel = Net()\ncritic = Critic()\n" + header + textwrap.dedent(body))
    unit = m.units[0]
    tensor = cst.parse_expression(loss)
    return m.facts(Precision).trained_module_feeds(tensor, unit, m.identity(unit, optimizer))


@pytest.mark.parametrize(
    "body",
    [
        "loss = crit(model(x), y)",
        "out, aux = model(x)\nloss = 0.4 * crit(aux, y)",
        "h = model.encoder(x)\nloss = h.pow(2).mean()",
        "loss = model(x).logits.mean()",
        "loss = model.forward(x).sum()",
        "ddp = torch.nn.parallel.DistributedDataParallel(model)\nloss = ddp.module(x).sum()",
        "loss = crit(model(x), y)\nloss += 0.1 * reg",
        "loss = compute_loss(model, batch)",  # the model handed over whole
        "loss = sum(p.pow(2).sum() for p in model.parameters())",
    ],
)
def test_a_loss_computed_from_the_optimizers_model_feeds_it(body):
    assert feeds(body)


@pytest.mark.parametrize(
    "body",
    [
        "loss = crit(critic(x), y)",  # another model, another optimizer
        "fake = model(z)\nloss = critic(fake.detach()).mean()",  # cut off the graph
        "loss = crit(critic(x), model(x).item())",
        "loss = compute_loss(batch)",  # a helper: which model it runs is not known here
        "loss = compute_loss(critic, batch)",
        "loss = batch_loss",  # not computed here at all
    ],
)
def test_a_loss_not_traceably_computed_from_the_optimizers_model_does_not_feed_it(body):
    assert not feeds(body)


def test_an_optimizer_built_elsewhere_holds_no_known_model():
    m = model(
        """
        def train(model, opt, x):
            loss = model(x).sum()
        """
    )
    unit = next(u for u in m.units if u.name == "train")
    assert m.facts(Precision).trained_by(m.identity(unit, "opt")) == frozenset()
    assert not m.facts(Precision).trained_module_feeds(cst.parse_expression("loss"), unit, m.identity(unit, "opt"))


def test_an_optimizer_of_a_submodule_is_fed_by_the_whole_models_output():
    assert feeds("loss = model(x).sum()", header="opt = torch.optim.SGD(model.head.parameters(), lr=0.1)\n")
    assert not feeds("loss = model.encoder(x).sum()", header="opt = torch.optim.SGD(model.head.parameters(), lr=0.1)\n")


# --- adapters (peft, diffusers) ----------------------------------------------------------------

_LORA = """
import torch
from peft import LoraConfig, get_peft_model, inject_adapter_in_model
def main(unet, loader, args):
{body}
    optimizer = torch.optim.AdamW(filter(lambda p: p.requires_grad, unet.parameters()), lr=1e-4)
    for x in loader:
        unet(x).mean().backward()
        optimizer.step()
"""


def lora(*lines):
    return _LORA.format(body="\n".join("    " + line for line in lines))


@pytest.mark.parametrize(
    "adapter",
    [
        "unet.add_adapter(LoraConfig(r=4))",
        "unet.add_adapter(config, adapter_name='lora')",
        "inject_adapter_in_model(LoraConfig(r=4), unet)",
        "unet = get_peft_model(unet, cfg, autocast_adapter_dtype=False)",
        "LoraLoaderMixin.load_lora_into_unet(sd, network_alphas=None, unet=unet)",
    ],
)
def test_adapters_added_after_a_float16_cast_are_trained_in_float16(adapter):
    # peft builds them in the dtype of the layers they wrap: they are what the optimizer trains
    source = lora("unet.requires_grad_(False)", "unet.to('cuda', dtype=torch.float16)", adapter)
    assert trained(source) == [("unet", "optimizer")]
    m = model(source)
    precision = m.facts(Precision)
    (cast, _), = precision.trained_in_low_precision("float16")
    assert adapters_added(precision, cast) is not None


def test_a_weight_dtype_that_may_be_float16_makes_the_adapters_maybe_float16():
    source = lora(
        "unet.requires_grad_(False)",
        "weight_dtype = torch.float32",
        "if args.mixed_precision == 'fp16':",
        "    weight_dtype = torch.float16",
        "elif args.mixed_precision == 'bf16':",
        "    weight_dtype = torch.bfloat16",
        "unet.to('cuda', dtype=weight_dtype)",
        "unet.add_adapter(LoraConfig(r=4))",
    )
    (cast, _), = model(source).facts(Precision).trained_in_low_precision("float16")
    assert cast.dtypes == frozenset({"float16", "bfloat16", "float32"})


@pytest.mark.parametrize(
    "upcast",
    [
        "cast_training_params(unet, dtype=torch.float32)",
        "cast_training_params([unet, text_encoder])",
        "for p in unet.parameters():\n            if p.requires_grad:\n                p.data = p.to(torch.float32)",
    ],
)
def test_adapters_upcast_after_they_are_added_are_float32(upcast):
    source = lora(
        "unet.requires_grad_(False)",
        "unet.to('cuda', dtype=torch.float16)",
        "unet.add_adapter(LoraConfig(r=4))",
        "if args.mixed_precision == 'fp16':",
        "    " + upcast,
    )
    assert trained(source) == []


@pytest.mark.parametrize(
    "adapter",
    [
        "unet = get_peft_model(unet, cfg)",  # upcasts float16 adapters to float32 (peft >= 0.12)
        "unet.add_adapter('second', cfg)",  # peft's PeftModel.add_adapter: the same
    ],
)
def test_peft_model_adapters_are_upcast(adapter):
    assert trained(lora("unet.half()", adapter)) == []


def test_bfloat16_adapters_and_no_float16_at_all_are_left_alone():
    for dtype in ("torch.bfloat16", "torch.bfloat16 if args.mixed_precision == 'bf16' else torch.float32"):
        source = lora("unet.requires_grad_(False)", f"unet.to('cuda', dtype={dtype})", "unet.add_adapter(LoraConfig(r=4))")
        assert trained(source) == []
        assert trained(source, "bfloat16") != [] or "float32" in dtype


def test_adapters_added_before_the_cast_are_cast_with_it():
    # `.to(dtype)` casts every parameter the module holds, the adapters' too
    source = lora("unet.requires_grad_(False)", "unet.add_adapter(LoraConfig(r=4))", "unet.to('cuda', dtype=torch.float16)")
    assert trained(source) == [("unet", "optimizer")]
    precision = model(source).facts(Precision)
    (cast, _), = precision.trained_in_low_precision("float16")
    assert adapters_added(precision, cast) is None  # the message of a plain cast


def test_reading_or_loading_adapter_state_changes_no_dtype():
    # diffusers' checkpoint hooks read the trained adapters every few steps
    source = lora(
        "unet.requires_grad_(False)",
        "unet.half()",
        "unet.add_adapter(LoraConfig(r=4))",
        "state = get_peft_model_state_dict(accelerator.unwrap_model(unet))",
        "set_peft_model_state_dict(unet, state)",
        "unet.set_adapters(['default'])",
    )
    assert trained(source) == [("unet", "optimizer")]


def test_an_add_adapter_not_given_a_config_first_is_not_peft():
    # AdapterHub's `add_adapter(name, config=...)`: what it builds is not known here
    source = lora("unet.requires_grad_(False)", "unet.half()", "unet.add_adapter(task_name, config='seq_bn')")
    assert trained(source) == []


def test_adapters_of_an_inference_model_are_not_trained():
    source = "import torch\ndef main(unet, x):\n    unet.half()\n    unet.add_adapter(cfg)\n    with torch.no_grad():\n        return unet(x)\n"
    assert trained(source) == []


# --- frozen modules ---------------------------------------------------------------------------


def test_a_frozen_module_cast_to_float16_with_nothing_trainable_is_not_trained():
    assert trained(lora("unet.requires_grad_(False)", "unet.to('cuda', dtype=torch.float16)")) == []
    assert trained(lora("unet.to('cuda', dtype=torch.float16)", "unet.requires_grad_(False)")) == []


@pytest.mark.parametrize(
    "lines",
    [
        # unfrozen again, whole or in part, by name or per parameter
        ("unet.requires_grad_(False)", "unet.half()", "unet.conv_out.requires_grad_(True)"),
        ("unet.requires_grad_(False)", "unet.half()", "for p in unet.conv_out.parameters():\n        p.requires_grad = True"),
        ("unet.requires_grad_(False)", "unet.half()", "unfreeze_last_layers(unet)"),
        # given trainable parameters by a helper: they are cast with the module
        ("unet.requires_grad_(False)", "add_lora_layers(unet)", "unet.half()"),
        # frozen on one way only
        ("if args.freeze:\n        unet.requires_grad_(False)", "unet.half()"),
        # frozen only after the optimizer took it (for evaluation)
        ("unet.half()", "optimizer = torch.optim.AdamW(unet.parameters())", "for x in loader:\n        unet(x).sum().backward()\n        optimizer.step()", "unet.requires_grad_(False)"),
        # the rest of the module is frozen, not what is trained
        ("unet.encoder.requires_grad_(False)", "unet.half()"),
    ],
)
def test_a_module_that_may_be_trainable_again_is_still_trained(lines):
    assert trained(lora(*lines)) != []


def test_every_adapter_call_says_where_its_module_is_and_what_it_does():
    from amplint.semantic.pytorch.frameworks import ADAPTER_CALLS

    for entry in ADAPTER_CALLS:
        assert entry.effect in ("creates", "upcasts", "keeps"), entry
        assert entry.method or entry.module_keywords or entry.module_position >= 0, entry
        assert not entry.upcast_keyword or entry.effect == "upcasts", entry
