"""`amplint verify --report`: the HTML page's structure (from a fake run, no torch), and the
real page rendered by a real headless browser: one figure per prediction in the DOM the
browser built, and a screenshot that is not blank and shows both scripts' curves."""

import math
import os
import re
import shutil
import struct
import subprocess
import zlib
from collections import Counter
from pathlib import Path

import pytest

from amplint.harness.html import COLOURS, Chart, label_width, render_html
from amplint.harness.runner import Row, VerifyRun
from amplint.harness.verdict import CONFIRMED, ERROR, NOT_REPRODUCED, SKIPPED
from amplint.lint.rule import Prediction, Rule

FIGURE = re.compile(r'<figure class="prediction[ "]')


def fake_run():
    stuck = Prediction("sgd", "loss_moved", "The loss is stuck <at> its first value & stays.", compare="buggy", at_most=0.001)
    near_one = Prediction(
        "adam", "true_loss", "No difference.", compare="buggy/fixed", at_least=0.999, at_most=1.001, kind="control"
    )
    blows_up = Prediction("sgd", "diverged", "NaN after a while.", compare="buggy-fixed", at_least=1)
    history = {
        "loss": {"true": [0.12, 0.12, 0.12, 0.12], "logged": [0.12, 0.12, 0.12, 0.12]},
        "update size": {"update": [6.7e-7, 6.7e-7, 6.7e-7, 6.7e-7]},
    }
    fixed_history = {
        "loss": {"true": [0.12, 0.09, 0.07, 0.05], "logged": [0.12, 0.09, 0.07, 0.05]},
        "update size": {"update": [0.044, 0.03, 0.02, 0.015]},
    }
    diverging = {"loss": {"true": [0.12, 1e6, math.inf, math.nan]}, "skipped steps": {"so far": [0, 0, 0, 0]}}
    rows = [
        Row("AMP001", "unscaled-backward", stuck, "cpu", "float16", CONFIRMED, buggy=9.8e-5, fixed=0.8, value=9.8e-5,
            history={"buggy": history, "fixed": fixed_history}),
        Row("AMP001", "unscaled-backward", near_one, "cpu", "bfloat16", NOT_REPRODUCED, buggy=0.0123, fixed=0.0120,
            value=1.025, history={"buggy": fixed_history, "fixed": fixed_history}),
        Row("AMP005", "scaled-loss-plain-step", blows_up, "cpu", "float16", CONFIRMED, buggy=1.0, fixed=0.0, value=1.0,
            history={"buggy": diverging, "fixed": {"loss": {"true": [0.12, 0.1, 0.08, 0.07]}}}),
        Row("AMP005", "scaled-loss-plain-step", blows_up, "cpu", "bfloat16", SKIPPED, "the claim is about float16 only"),
        Row("AMP005", "scaled-loss-plain-step", stuck, "cpu", "float16", ERROR, "fixtures/AMP005/buggy.py (float16): timed out",
            history={"buggy": None, "fixed": None}),
    ]
    return VerifyRun(rows, "cpu", "2.13.0+cpu", 2, 12.3)


def test_one_figure_per_prediction_with_its_claim_check_and_curves():
    page = render_html(fake_run())
    figures = page.split('<figure class="prediction')[1:]
    assert len(figures) == len(fake_run().rows)
    stuck, near_one, blows_up, skipped, error = figures
    assert "The loss is stuck &lt;at&gt; its first value &amp; stays." in stuck
    assert "buggy = 9.8e-05, claim &lt;= 0.001" in stuck
    assert stuck.count("<svg") >= 2 and "log scale" in stuck  # update sizes 6.7e-7 vs 0.044
    assert "true" in stuck and "logged" in stuck  # two lines in one panel get a legend
    assert near_one.startswith(' not-reproduced"') and "buggy/fixed = 1.02500, claim in [0.999, 1.001]" in near_one
    # a control is marked as one, and its verdict reads "not held", not "not reproduced"
    assert 'data-kind="control"' in near_one and '<span class="kind">control</span>' in near_one
    assert ">not held</span>" in near_one and 'data-kind="effect"' in stuck
    assert "inf from step 3" in blows_up and "×" in blows_up
    assert "skipped: the claim is about float16 only" in skipped and "<polyline" not in skipped
    assert "timed out" in error and "no per-step curves" in error
    assert "<title>amplint verify: 2 effects confirmed, 1 control not held, 1 skipped, 1 error</title>" in page
    # each rule's line in the header counts its effects and controls apart, skipped claims aside
    assert '<a href="#amp001">AMP001 <small>1/1 effect, 0/1 control</small></a>' in page
    assert '<a href="#amp005">AMP005 <small>1/2 effects</small></a>' in page
    assert ">0 controls held</span>" in page and ">1 control not held</span>" in page


TICK = re.compile(r'<text class="tick" x="([0-9.]+)"[^>]*>(.*?)</text>')


def unclipped(page: str):
    """Every chart's tick labels fit left of the plot, inside the chart; every chart has a step-axis title."""
    charts = re.findall(r'<svg width="\d+" height="\d+" viewBox[^>]*role="img">.*?</svg>', page)
    assert charts
    for chart in charts:
        for x, label in TICK.findall(chart):
            assert float(x) - label_width(label) >= 0, f"the tick label {label!r} runs off the chart at x={x}"
        assert '<text class="axis"' in chart and ">step</text>" in chart
    return len(charts)


def test_tick_labels_are_never_clipped_and_the_step_axis_has_a_title():
    # values whose labels need many digits: the audit's clipped `2.66466e-7` and `0.0904949`
    narrow = {"loss": {"error": [2.66466e-7, 2.66470e-7, 2.66474e-7]}}
    wide = {"loss": {"error": [0.0904949, 0.0904951, -123456.7]}}
    rows = [
        Row("AMP012", "island", Prediction("s", "q", "Claim.", compare="buggy", at_most=1), "cpu", "float16", CONFIRMED,
            buggy=0.0, fixed=0.0, value=0.0, history={"buggy": narrow, "fixed": wide}),
    ]
    page = render_html(VerifyRun(rows, "cpu", "2.13.0+cpu", 1, 1.0))
    assert unclipped(page) == 1
    assert Chart([("buggy", 0, [2.66466e-7, 2.66470e-7])]).left > Chart([("buggy", 0, [1.0, 2.0])]).left


def test_the_page_is_self_contained():
    page = render_html(fake_run())
    assert "<script" not in page
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", page), "nothing may load from the network"
    assert "@import" not in page and "url(" not in page
    assert page.startswith("<!DOCTYPE html>") and page.rstrip().endswith("</html>")


PAIR = """\
\"\"\"FAKE9, {which}: a fake pair.\"\"\"
import argparse, json, sys

# scenario: the weight of the loss
SCENARIOS = {{"s": 1e-4}}
STEPS = 3


def train():
    x = torch.randn(4, 2)  # drawn on the CPU
    return {value}


parser = argparse.ArgumentParser()
parser.add_argument("--scenario", action="append")
args, _ = parser.parse_known_args()
history = {{"panel": {{"line": [1.0, 2.0]}}}}
print(json.dumps({{"torch": "fake", "results": {{"s": {{"q": {value}}}}}, "history": {{"s": history}}}}))
"""


def test_each_rule_shows_its_diff_its_setup_and_that_each_effect_can_fail(tmp_path):
    """What the audit found missing from the page: the mistake in code, the regime, and that
    each effect was shown able to fail (the swap, and the perturbations when run)."""
    from amplint.harness.runner import AS_WRITTEN, PERTURBATIONS, verify

    (tmp_path / "FAKE9").mkdir()
    for which, value in (("buggy", 1000.0), ("fixed", 1.0)):
        (tmp_path / "FAKE9" / f"{which}.py").write_text(PAIR.format(which=which, value=value))
    grows = Prediction("s", "q", "q grows 100x.", compare="buggy/fixed", at_least=100)
    same = Prediction("s", "q", "Control: the same.", compare="buggy/fixed", at_least=0.5, at_most=2000, kind="control")
    rule = type("FakeFAKE9", (Rule,), {"__doc__": "A fake rule.", "code": "FAKE9", "name": "fake", "PREDICTIONS": (grows, same)})

    page = render_html(verify([rule], "cpu", root=tmp_path))
    pair = page.split('<div class="pair" data-code="FAKE9">')[1].split("</div></div>")[0]
    # the diff: the one differing line, side by side, numbered as in each file
    assert '<td class="n">11</td><td class="del">    return 1000.0</td><td class="n">11</td><td class="add">    return 1.0</td>' in pair
    assert "a fake pair" not in pair, "the docstrings differ by design and stay out of the diff"
    # the setup: the constants with their comment, the data, the device and the incidental details
    assert "# scenario: the weight of the loss\nSCENARIOS = {&quot;s&quot;: 1e-4}" in pair and "STEPS = 3" in pair
    assert "x = torch.randn(4, 2)" in pair and "device cpu; as written (seed 0" in pair
    effect, control = page.split('<figure class="prediction')[1:]
    assert 'this effect is <b class="ok">not reproduced</b> (buggy/fixed = 1)' in effect
    assert "this control <b>held</b>" in control
    assert "<code>amplint verify --perturb</code> does" in effect

    perturbed = render_html(verify([rule], "cpu", root=tmp_path, variants=(AS_WRITTEN,) + PERTURBATIONS))
    effect = perturbed.split('<figure class="prediction')[1]
    assert len(perturbed.split('<figure class="prediction')) == 3, "one figure per prediction, not per variant"
    assert 'Perturbed: <b class="ok">6 of 6</b> confirmed (seed 1, seed 2, lr x0.5, lr x1.5, steps x0.5, steps x1.5' in effect


def test_a_rule_without_curves_still_gets_its_figures():
    run = fake_run()
    for row in run.rows:
        row.history = {}
    page = render_html(run)
    assert len(FIGURE.findall(page)) == len(run.rows) and "<polyline" not in page


# --------------------------------------------------------------------------- a real browser

BROWSER_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--hide-scrollbars",
]


@pytest.fixture(scope="module")
def chromium():
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found is None:
        if os.environ.get("AMPLINT_REQUIRE_BROWSER"):
            pytest.fail("AMPLINT_REQUIRE_BROWSER is set (as in CI) but no `chromium` is on PATH")
        pytest.skip("no headless browser: install Debian's `chromium` package (CI does, in .ci/run)")
    return found


def browse(chromium, tmp_path, page: Path, *action: str) -> subprocess.CompletedProcess:
    profile = tmp_path / f"profile-{len(list(tmp_path.iterdir()))}"
    return subprocess.run(
        [chromium, *BROWSER_FLAGS, f"--user-data-dir={profile}", *action, page.as_uri()],
        capture_output=True,
        timeout=120,
        cwd=str(tmp_path),
    )


def test_no_chart_of_the_real_report_clips_a_label(verified):
    assert unclipped(render_html(verified)) >= 300


def test_the_real_report_renders_in_a_headless_browser(verified, chromium, tmp_path):
    page = tmp_path / "verify.html"
    page.write_text(render_html(verified), encoding="utf-8")

    # The DOM the browser built from the page: one figure per prediction, each with curves.
    dumped = browse(chromium, tmp_path, page, "--dump-dom")
    dom = dumped.stdout.decode("utf-8", "replace")
    assert dumped.returncode == 0, dumped.stderr.decode(errors="replace")[-2000:]
    figures = dom.split('<figure class="prediction')[1:]
    assert len(figures) == len(verified.rows) > 0
    for row, figure in zip(verified.rows, figures):
        assert f'data-code="{row.code}"' in figure and f'data-dtype="{row.dtype}"' in figure
        if row.ran:  # the CUDA-only claims are skipped on the CPU, with no curves
            assert "<svg" in figure and "<polyline" in figure, f"{row.code} {row.prediction.scenario}: no curves"
            if not row.prediction.is_control:
                assert 'this effect is <b class="ok">not reproduced</b>' in figure, f"{row.code} {row.prediction.scenario}"
    # every rule opens with its pair: the setup, and the lines that differ (in buggy.py, fixed.py or both)
    for code in {row.code for row in verified.rows}:
        pair = dom.split(f'<div class="pair" data-code="{code}">')[1].split('<figure')[0]
        assert "<dt>constant</dt>" in pair and ('class="del"' in pair or 'class="add"' in pair), code

    # What a person sees: not a blank page, and both scripts' curves drawn in their colours.
    shot = tmp_path / "verify.png"
    # tall enough for the header, the first rule's pair and its first figure's curves
    taken = browse(chromium, tmp_path, page, "--window-size=1000,1200", f"--screenshot={shot}")
    assert taken.returncode == 0 and shot.is_file(), taken.stderr.decode(errors="replace")[-2000:]
    width, height, pixels = decode_png(shot.read_bytes())
    assert (width, height) == (1000, 1200)
    colours = Counter(pixels)
    assert len(colours) > 100, f"{len(colours)} distinct colours: the page rendered (nearly) blank"
    (background, most), = colours.most_common(1)
    assert most < 0.9 * len(pixels), f"{most / len(pixels):.0%} of the screenshot is one colour"
    for side, colour in COLOURS.items():
        target = tuple(int(colour[i : i + 2], 16) for i in (1, 3, 5))
        near = sum(count for pixel, count in colours.items() if sum(abs(a - b) for a, b in zip(pixel, target)) < 60)
        assert near > 200, f"hardly any {side} curve pixels ({near}) on the screenshot"


def decode_png(data: bytes):
    """(width, height, pixels as (r, g, b) tuples) of an 8-bit RGB or RGBA, non-interlaced PNG
    (what Chromium writes), with the standard library only."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    position, chunks = 8, {}
    idat = []
    while position < len(data):
        (length,) = struct.unpack(">I", data[position : position + 4])
        kind = data[position + 4 : position + 8]
        body = data[position + 8 : position + 8 + length]
        if kind == b"IDAT":
            idat.append(body)
        else:
            chunks.setdefault(kind, body)
        position += 12 + length
    width, height, depth, colour_type, _, _, interlace = struct.unpack(">IIBBBBB", chunks[b"IHDR"])
    assert depth == 8 and colour_type in (2, 6) and interlace == 0, (depth, colour_type, interlace)
    channels = 3 if colour_type == 2 else 4
    raw = zlib.decompress(b"".join(idat))
    stride = width * channels
    previous = bytearray(stride)
    pixels = []
    for y in range(height):
        start = y * (stride + 1)
        kind, line = raw[start], bytearray(raw[start + 1 : start + 1 + stride])
        if kind == 1:  # Sub
            for i in range(channels, stride):
                line[i] = (line[i] + line[i - channels]) & 0xFF
        elif kind == 2:  # Up
            line = bytearray((a + b) & 0xFF for a, b in zip(line, previous))
        elif kind == 3:  # Average
            for i in range(stride):
                left = line[i - channels] if i >= channels else 0
                line[i] = (line[i] + ((left + previous[i]) >> 1)) & 0xFF
        elif kind == 4:  # Paeth
            for i in range(stride):
                a = line[i - channels] if i >= channels else 0
                b = previous[i]
                c = previous[i - channels] if i >= channels else 0
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 0xFF
        pixels.extend(zip(line[0::channels], line[1::channels], line[2::channels]))
        previous = line
    return width, height, pixels
