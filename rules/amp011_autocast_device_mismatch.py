from __future__ import annotations

from typing import Iterator, List

import libcst as cst

from amplint.analyses.devices import Devices, Placement
from amplint.lint.evidence import AUTOCAST
from amplint.lint.rule import Flagged, Message, Prediction, Report, Rule
from amplint.semantic import KNOWN_DEVICES, AutocastRegion, SemanticModel, dotted_name, source_text


class AutocastDeviceMismatch(Rule):
    """A CUDA-only autocast in code whose device is chosen at run time and may be Apple's MPS (or another accelerator).

    ## What it does
    Flags an enabled `torch.autocast("cuda")`, `torch.cuda.amp.autocast()` or any autocast whose
    device type can only be `"cuda"`, when the code around it (its function, the functions
    and class it belongs to, the module's top level, its callers in the file) puts modules or
    tensors on a device chosen at run time that can be an accelerator other than CUDA:
    `device = "mps" if torch.backends.mps.is_available() else "cpu"`, `"cuda" if
    torch.cuda.is_available() else "mps"`, an XPU, an argparse option of the file whose
    `choices` are device names among which is MPS (`--device` with `choices=["cuda", "cpu",
    "mps"]`).

    Not flagged: a choice between CUDA and the CPU only (`"cuda" if torch.cuda.is_available()
    else "cpu"`): the CPU there is the fallback of a machine without a GPU, where a script is
    smoke-tested, not the device whose mixed-precision speed the region is for (on 1,680 real
    training files this idiom was the whole of 161 findings and none was a bug anyone fixed;
    the real fixes were for MPS and accelerator-chosen devices). A device that is unknown at lint time (`args.device` with no `choices`, or one
    that is no device name such as "auto"; a config value; accelerate's `accelerator.device`), code
    that only ever runs on CUDA (`model.cuda()`, `.to("cuda")`), `torch.autocast(device_type=
    device.type)`, and a region gated on the device: `enabled=` reads it (`enabled=device.type
    == "cuda"`, `use_amp = args.amp and torch.cuda.is_available()`), an `if` around it tests
    it, or its function or class requires CUDA (`@pytest.mark.skipif(not
    torch.cuda.is_available(), ...)`).

    ## Why is this bad?
    Autocast is per device type: `autocast("cuda")` switches on autocast for CUDA ops only.
    When the run-time choice falls on the CPU or Apple's MPS, the region changes nothing: the
    forward pass runs in float32, with none of the speed or memory mixed precision was there
    for, and a test run on a laptop never exercises the low-precision code path the GPU run
    will take. Where CUDA is missing altogether, torch says so once with a UserWarning
    ("CUDA is not available ... Disabling autocast"); where CUDA exists but the model was put
    on the CPU, it says nothing.

    ## What goes wrong at runtime
    Nothing raises and nothing is damaged: the run is a plain float32 run. Measured by
    `amplint verify` (on the CPU: 20 SGD steps of a small MLP with the device chosen as
    MPS-if-available-else-CPU): under `autocast("cuda")` the model's output was float32 and
    every step's loss was bit-identical to a run with no autocast at all, while
    `autocast(device_type=device.type)` produced float16 or bfloat16 outputs and losses that
    differ from float32's by up to 2.4e-5 in float16 and 7e-5 in bfloat16 (on a loss of
    0.025): mixed precision at work. The rule's other fix, the CUDA region gated on the device
    (`enabled=device.type == "cuda"`), computes the very same float32 losses, bit for bit; what
    tells the mistake from it is that the mistake asks for CUDA autocast around a model that is
    not on CUDA, at every step (torch disables the region with a warning where CUDA is
    missing). What the mistake costs is mixed precision itself: its speed and memory on that
    device, and any test of the low-precision path. The claims are about the CPU: on CUDA
    there is no mismatch to show, and the fixture refuses `--device cuda`.

    ## Example
    ```python
    device = torch.device("mps" if torch.backends.mps.is_available() else "cpu")
    model = Net().to(device)
    for x, y in loader:
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = loss_fn(model(x.to(device)), y.to(device))
    ```

    ## Use instead
    ```python
    with torch.autocast(device_type=device.type, dtype=torch.bfloat16):
        loss = loss_fn(model(x.to(device)), y.to(device))
    ```
    or gate the region on the device (`enabled=device.type == "cuda"`) when mixed precision is
    meant for CUDA only.

    ## Fix safety
    No fix. The device the region should follow is a runtime value (`device.type`, a variable)
    whose name amplint cannot always choose for you.
    """

    code = "AMP011"
    name = "autocast-device-mismatch"
    severity = "warning"
    # Devices are read from string literals: one naming a device other than CUDA or the CPU.
    requires = tuple(quote + device for device in KNOWN_DEVICES if device not in ("cuda", "cpu") for quote in "\"'")
    needs = ({AUTOCAST},)

    PREDICTIONS = (
        Prediction(
            "sgd",
            "low_precision_output",
            "On the CPU the model's output under the `autocast(\"cuda\")` it asks for is float32, where "
            "`autocast(device.type)` gives the low-precision dtype.",
            compare="buggy-fixed",
            at_most=-1,
            devices=("cpu",),
            happened="buggy.cuda_region_elsewhere",
        ),
        Prediction(
            "sgd",
            "max_diff_from_float32",
            "Every step's loss is bit-identical to a run without autocast: the CUDA region it asks for does nothing.",
            compare="buggy",
            at_most=0,
            dtypes=("float16",),
            devices=("cpu",),
            happened="buggy.cuda_region_elsewhere",
            quotes=(("fixed", "2.4e-5"),),
        ),
        Prediction(
            "sgd",
            "max_diff_from_float32",
            "... and under bfloat16.",
            compare="buggy",
            at_most=0,
            dtypes=("bfloat16",),
            devices=("cpu",),
            happened="buggy.cuda_region_elsewhere",
            quotes=(("fixed", "7e-5"),),
        ),
        Prediction(
            "gated",
            "cuda_region_elsewhere",
            "What tells the mistake from the other fix, a CUDA region gated on the device "
            "(`enabled=device.type == \"cuda\"`): at every step it asks for CUDA autocast around a model "
            "that is not on CUDA (torch disables it with a warning where CUDA is missing), and the gated "
            "region does not.",
            compare="buggy-fixed",
            at_least=1,
            devices=("cpu",),
        ),
        Prediction(
            "gated",
            "max_diff_from_float32",
            "Nothing numerical tells them apart: both compute every loss bit-identical to float32.",
            compare="buggy-fixed",
            at_least=0,
            at_most=0,
            devices=("cpu",),
            kind="control",
        ),
    )

    def check(self, model: SemanticModel) -> Iterator[Report]:
        for region in model.autocast_regions:
            if not region.active or region.possible_devices != frozenset({"cuda"}):
                continue
            # A CPU fallback alone is not what the region is for; another accelerator is.
            choices = [c for c in model.facts(Devices).runtime_device_choices(region) if c.devices - region.possible_devices - {"cpu"}]
            if choices:
                yield Report(region.anchor, Message.split(_message(region, choices, model)))

    VALID = (
        # The device type follows the device.
        """
import torch
device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
model = Net().to(device)
for x in loader:
    with torch.autocast(device_type=device.type, dtype=torch.bfloat16):
        loss = model(x.to(device)).sum()
""",
        # The device is unknown at lint time.
        """
import torch
model = Net().to(args.device)
for x in loader:
    with torch.autocast("cuda"):
        loss = model(x.to(args.device)).sum()
""",
        # Code that only runs on CUDA; results moved to a CPU device for metrics.
        """
import torch
cpu_device = torch.device("cpu")
model = Net().cuda()
for x in loader:
    with torch.cuda.amp.autocast():
        out = model(x.to("cuda"))
    results.append(out.to(cpu_device))
""",
        # Gated on the device: enabled= reads it, or an `if` tests CUDA.
        """
import torch
device = "cuda" if torch.cuda.is_available() else "cpu"
use_amp = args.amp and device == "cuda"
model = Net().to(device)
for x in loader:
    with torch.cuda.amp.autocast(enabled=use_amp):
        loss = model(x.to(device)).sum()
    if torch.cuda.is_available():
        with torch.autocast("cuda"):
            loss = model(x.to(device)).sum()
""",
        # A test that requires CUDA.
        """
import pytest
import torch
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_amp():
    model = Net().to(DEVICE)
    with torch.autocast("cuda"):
        model(torch.randn(2, 3, device=DEVICE))
""",
        # The function moves its model and data to CUDA itself: that code runs on CUDA.
        """
import torch
device = "cuda:0" if torch.cuda.is_available() else "cpu"
model = Net().to(device)
def check_fp16(net, x):
    net.to("cuda")
    with torch.autocast("cuda"):
        return net(x.cuda())
""",
        # CUDA, or the CPU as the fallback of a machine without a GPU.
        """
import torch
device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
model = Net().to(device)
scaler = torch.cuda.amp.GradScaler()
for x, y in loader:
    with torch.cuda.amp.autocast():
        loss = loss_fn(model(x.to(device)), y.to(device))
    scaler.scale(loss).backward()
""",
        # Explicitly disabled region (a float32 island).
        """
import torch
device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
model = Net().to(device)
with torch.cuda.amp.autocast(enabled=False):
    out = model(x.to(device).float())
""",
    )
    INVALID = (
        Flagged(
            """
import torch
if torch.cuda.is_available():
    device = torch.device("cuda")
elif torch.backends.mps.is_available():
    device = torch.device("mps")
else:
    device = torch.device("cpu")
model = Net().to(device)
scaler = torch.cuda.amp.GradScaler()
for x, y in loader:
    with torch.cuda.amp.autocast():
        loss = loss_fn(model(x.to(device)), y.to(device))
    scaler.scale(loss).backward()
""",
            at=((12, 10),),
        ),
        # The device chosen in main, the region in a helper it calls.
        Flagged(
            """
import torch
def train(model, loader, device):
    for x in loader:
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(x.to(device)).sum()
        loss.backward()
def main():
    device = "mps" if torch.backends.mps.is_available() else "cpu"
    model = Net().to(device)
    train(model, loader, device)
""",
            at=((5, 14),),
        ),
    )


def _message(region: AutocastRegion, choices: List[Placement], model: SemanticModel) -> str:
    choice = choices[0]
    others = sorted(choice.devices - region.possible_devices)
    written = source_text(choice.device) if choice.device is not None else "the device"
    name = dotted_name(choice.device) if choice.device is not None else None
    suggestion = "device.type"
    if name is not None:
        values = model.values(choice.unit, name)
        is_device = values and all(
            isinstance(value, cst.Call) and model.qualified(value.func) == "torch.device" for value, _ in values
        )
        # `torch.device(name)` accepts a string or a torch.device; `.type` needs the latter.
        suggestion = f"{name}.type" if is_device else f"torch.device({name}).type"
    return (
        f"`{source_text(region.anchor)}` only switches on autocast for CUDA ops, but the code puts its "
        f"model or data on `{written}`, chosen at run time, which can be {' or '.join(repr(d) for d in others)}: "
        "there the region does nothing and the forward pass runs in float32. Pass the device type "
        f"(`torch.autocast(device_type={suggestion})`), or gate the region on CUDA."
    )
