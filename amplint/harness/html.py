"""`amplint verify --report page.html`: one self-contained HTML page of what the fixtures did.

Per rule, what a sceptic needs before the curves: the lines where buggy.py and fixed.py differ,
side by side, and the regime they train in (`pair`). Per prediction, one `<figure>`: the
claim, the measured check and the verdict; that the effect was shown able to fail (judged
again with buggy.py replaced by fixed.py, and under each perturbation when the run had
them); beside small inline-SVG charts of the scenario's per-step histories, buggy.py against
fixed.py. Which charts there are is up to the fixtures (each prints `{"history": {scenario:
{panel: {line: [value per step]}}}}`), so a new rule's pair needs no change here. No
JavaScript, no fonts or styles from the network, no plotting library: a page that opens
anywhere, years from now.
"""

from __future__ import annotations

import html
import math
import re
from typing import Dict, Iterable, List, Optional, Sequence, Tuple

from pathlib import Path

from amplint import __version__
from amplint.harness.pair import dedented, side_by_side, setup
from amplint.harness.report import check_text, count_text, summary_counts, verdict_text, verdict_word
from amplint.harness.runner import AS_WRITTEN, DTYPES, Row, VerifyRun, judged_as_identical
from amplint.harness.verdict import CONFIRMED, ERROR, NOT_REPRODUCED, SKIPPED, measured_text, value_text

SIDES = ("buggy", "fixed")
COLOURS = {"buggy": "#e8590c", "fixed": "#1971c2"}
# The first line of a panel is solid, the next dashed, then dotted.
DASHES = ("", "6 3", "1.5 3")
VERDICT_CLASSES = {CONFIRMED: "confirmed", NOT_REPRODUCED: "not-reproduced", SKIPPED: "skipped", ERROR: "error"}
# The header's counts (report.summary_counts), coloured as the verdicts they count.
COUNT_CLASSES = {
    "effects confirmed": "confirmed",
    "controls held": "confirmed control",
    "effects not reproduced": "not-reproduced",
    "controls not held": "not-reproduced control",
    SKIPPED: "skipped",
    "errors": "error",
}

# Chart geometry, in SVG user units (= CSS pixels). LEFT is the least left margin: a chart
# whose tick labels are longer widens it to fit them (`Chart.left`); BOTTOM holds the step
# numbers and the axis title under them.
WIDTH, HEIGHT = 204, 142
LEFT, RIGHT, TOP, BOTTOM = 40, 8, 10, 30
# A generous width for one character of a 10px tick label (digits are ~5.6px wide), and the
# gap between a label and the plot.
CHAR_WIDTH, LABEL_GAP = 6.2, 4
# A panel whose positive values span this factor or more is drawn on a log scale.
LOG_SPAN = 100.0

STYLE = """
:root { --ink: #212529; --muted: #6c757d; --rule: #dee2e6; --paper: #ffffff; --wash: #f8f9fa;
        --buggy: #e8590c; --fixed: #1971c2; --ok: #2b8a3e; --bad: #c92a2a; --skip: #868e96; --err: #e67700; }
* { box-sizing: border-box; }
body { margin: 0; background: var(--wash); color: var(--ink);
       font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, "Helvetica Neue", Arial, sans-serif; }
main { max-width: 1260px; margin: 0 auto; padding: 20px 24px 48px; }
header { background: var(--paper); border: 1px solid var(--rule); border-radius: 8px; padding: 16px 20px; }
h1 { font-size: 22px; margin: 0 0 2px; letter-spacing: -0.01em; }
h1 span { color: var(--muted); font-weight: 400; }
.meta { color: var(--muted); margin: 0 0 10px; }
.chips { display: flex; flex-wrap: wrap; gap: 8px; margin: 6px 0 10px; }
.chip { border-radius: 999px; padding: 2px 10px; font-weight: 600; font-size: 13px; border: 1px solid transparent; }
.chip.confirmed { background: #ebfbee; color: var(--ok); border-color: #b2f2bb; }
.chip.not-reproduced { background: #fff5f5; color: var(--bad); border-color: #ffc9c9; }
.chip.skipped { background: #f1f3f5; color: var(--skip); border-color: #dee2e6; }
.chip.error { background: #fff9db; color: var(--err); border-color: #ffec99; }
.chip.zero { opacity: 0.45; }
.chip.control { border-style: dashed; }
.kind { color: var(--muted); font-size: 12px; border: 1px dashed var(--rule); border-radius: 4px; padding: 0 5px; }
.how { margin: 0; color: var(--muted); }
.key { display: inline-flex; align-items: center; gap: 4px; margin-right: 12px; color: var(--ink); }
nav { margin-top: 10px; display: flex; flex-wrap: wrap; gap: 6px 14px; }
nav a { color: var(--ink); text-decoration: none; border-bottom: 1px dotted var(--muted); }
nav a small { color: var(--muted); }
section { margin-top: 22px; }
h2 { font-size: 17px; margin: 0 0 2px; }
h2 code { font-size: 15px; color: var(--muted); font-weight: 500; }
.summary { margin: 0 0 8px; color: var(--muted); }
figure { margin: 10px 0; background: var(--paper); border: 1px solid var(--rule); border-left: 5px solid var(--ok);
         border-radius: 7px; padding: 12px 14px; display: grid; grid-template-columns: 300px 1fr; gap: 14px; }
figure.not-reproduced { border-left-color: var(--bad); }
figure.skipped { border-left-color: var(--skip); }
figure.error { border-left-color: var(--err); }
figcaption { min-width: 0; }
.title { display: flex; align-items: baseline; gap: 8px; flex-wrap: wrap; margin-bottom: 4px; }
.title b { font-size: 15px; }
.dtype { color: var(--muted); font-size: 12px; border: 1px solid var(--rule); border-radius: 4px; padding: 0 5px; }
.badge { margin-left: auto; font-weight: 700; font-size: 12px; text-transform: uppercase; letter-spacing: 0.04em; }
.badge.confirmed { color: var(--ok); } .badge.not-reproduced { color: var(--bad); }
.badge.skipped { color: var(--skip); } .badge.error { color: var(--err); }
.claim { margin: 0 0 8px; }
.claim code, .summary code { font: 12.5px ui-monospace, SFMono-Regular, Menlo, Consolas, monospace;
  background: #f1f3f5; border-radius: 3px; padding: 0 3px; }
dl { display: grid; grid-template-columns: auto 1fr; gap: 1px 10px; margin: 0; font-size: 12.5px; }
dt { color: var(--muted); }
dd { margin: 0; font-family: ui-monospace, SFMono-Regular, Menlo, Consolas, monospace; overflow-wrap: anywhere; }
dd.buggy { color: var(--buggy); } dd.fixed { color: var(--fixed); }
.reason { margin: 8px 0 0; color: var(--muted); font-size: 12.5px; }
.plots { display: flex; flex-wrap: wrap; gap: 10px 12px; align-content: flex-start; }
.panel { width: 204px; }
.panel h3 { font-size: 12.5px; font-weight: 600; margin: 0 0 1px; display: flex; justify-content: space-between; }
.panel h3 small { color: var(--muted); font-weight: 400; }
.lines { font-size: 11px; color: var(--muted); height: 15px; }
.none { color: var(--muted); font-style: italic; align-self: center; }
.proof { margin: 8px 0 0; font-size: 12.5px; }
.proof b.ok { color: var(--ok); } .proof b.bad { color: var(--bad); }
.pair { display: grid; grid-template-columns: minmax(260px, 1fr) 2fr; gap: 14px; margin: 8px 0 4px; }
.pair h3 { font-size: 13px; margin: 0 0 4px; }
.setup, .diff { background: var(--paper); border: 1px solid var(--rule); border-radius: 7px; padding: 8px 10px;
  max-height: 260px; overflow: auto; }
.setup pre { margin: 0 0 6px; font: 11.5px/1.35 ui-monospace, SFMono-Regular, Menlo, Consolas, monospace; white-space: pre-wrap; }
.setup dt { font-size: 12px; }
.diff table { border-collapse: collapse; width: 100%; table-layout: fixed;
  font: 11.5px/1.35 ui-monospace, SFMono-Regular, Menlo, Consolas, monospace; }
.diff col.n { width: 30px; }
.diff th { font: 600 12px system-ui, sans-serif; text-align: left; padding: 0 4px 3px; }
.diff td { padding: 0 6px 0 4px; white-space: pre-wrap; overflow-wrap: anywhere; vertical-align: top; }
.diff td.n { color: var(--muted); text-align: right; user-select: none; }
.diff td.del { background: #fff0eb; } .diff td.add { background: #e7f5ff; }
.diff tr.gap td { color: var(--muted); text-align: center; background: var(--wash); }
svg text { font: 10px system-ui, -apple-system, "Segoe UI", Roboto, Arial, sans-serif; fill: #868e96; }
svg .mark { font-weight: 700; font-size: 10px; }
svg .axis { font-style: italic; }
"""


def render_html(run: VerifyRun, title: str = "amplint verify") -> str:
    """The whole page for one `amplint verify` run."""
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>{_e(title)}: {_e(_verdict_summary(run))}</title>",
        f"<style>{STYLE}</style></head><body><main>",
        _header(run, title),
    ]
    evidence = Evidence(run)
    for code, rows in _by_rule(evidence.as_written):
        parts.append(_section(code, rows, run, evidence))
    parts.append("</main></body></html>")
    return "\n".join(parts) + "\n"


def _e(text: object) -> str:
    return html.escape(str(text), quote=True)


def _prose(text: str) -> str:
    """Escaped text with its `code spans` (as the rules write them) set as code."""
    return re.sub(r"`([^`]+)`", r"<code>\1</code>", _e(text))


class Evidence:
    """Per prediction (and dtype), what shows its verdict is about the mistake: how it is judged
    with buggy.py replaced by fixed.py (the swap; from the run's own measurements, see
    runner.judged_as_identical), and its rows under the run's perturbations, if any."""

    def __init__(self, run: VerifyRun) -> None:
        self.as_written = [row for row in run.rows if row.variant == AS_WRITTEN.name]
        self.swapped: Dict[Tuple[int, str], Row] = {}
        if run.planned and run.outputs:
            for row in judged_as_identical(run, "fixed"):
                if row.ran:
                    self.swapped[(id(row.prediction), row.dtype)] = row
        self.perturbed: Dict[Tuple[int, str], List[Row]] = {}
        for row in run.rows:
            if row.variant != AS_WRITTEN.name:
                self.perturbed.setdefault((id(row.prediction), row.dtype), []).append(row)
        self.perturbations = [variant for variant in run.variants if variant != AS_WRITTEN.name]

    def lines(self, row: Row) -> List[str]:
        """HTML sentences for a figure: the swap, then the perturbations."""
        prediction = row.prediction
        if prediction is None or not row.ran:
            return []
        key = (id(prediction), row.dtype)
        said = []
        swapped = self.swapped.get(key)
        if swapped is not None:
            outcome = verdict_word(swapped)
            value = value_text(prediction, swapped.value) if swapped.value is not None else "-"
            if prediction.is_control:
                said.append(
                    f"With buggy.py replaced by fixed.py this control <b>{_e(outcome)}</b> ({_e(value)}), as any control "
                    "does; the test suite breaks it with an edit to buggy.py instead."
                )
            else:
                good = "ok" if swapped.verdict != CONFIRMED else "bad"
                why = swapped.reason if swapped.reason else f"{prediction.compare} = {value}"
                said.append(
                    f'Shown able to fail: with buggy.py replaced by fixed.py this effect is <b class="{good}">{_e(outcome)}</b> '
                    f"({_e(why)})."
                )
        rows = self.perturbed.get(key, [])
        if rows:
            held = [each for each in rows if each.verdict == CONFIRMED]
            values = [each.value for each in rows if each.value is not None and math.isfinite(each.value)]
            spread = f"; values {_e(value_text(prediction, min(values)))} to {_e(value_text(prediction, max(values)))}" if values else ""
            failed = [each.variant for each in rows if each.verdict != CONFIRMED]
            good = "ok" if not failed else "bad"
            said.append(
                f'Perturbed: <b class="{good}">{len(held)} of {len(rows)}</b> {"held" if prediction.is_control else "confirmed"} '
                f"({_e(', '.join(each.variant for each in rows))}{spread})"
                + (f"; not under {_e(', '.join(failed))}." if failed else ".")
            )
        elif not self.perturbations:
            said.append("Not run with other seeds, learning rates or steps here: <code>amplint verify --perturb</code> does.")
        return said


def _verdict_summary(run: VerifyRun) -> str:
    counts = summary_counts(run)
    return ", ".join(count_text(label, count) for label, count in counts.items() if count) or "nothing ran"


def _by_rule(rows: Sequence[Row]) -> List[Tuple[str, List[Row]]]:
    grouped: Dict[str, List[Row]] = {}
    for row in rows:
        grouped.setdefault(row.code, []).append(row)
    return list(grouped.items())


def _anchor(code: str) -> str:
    return code.lower()


def _header(run: VerifyRun, title: str) -> str:
    torch = f"torch {run.torch_version}" if run.torch_version else "torch unknown"
    ran = {row.dtype for row in run.rows if row.ran}
    dtypes = [dtype for dtype in DTYPES if dtype in ran] + sorted(ran - set(DTYPES))
    meta = " · ".join(
        [
            torch,
            f"device {run.device}",
            f"autocast {' and '.join(dtypes) if dtypes else '-'}",
            f"{run.processes} fixture process{'' if run.processes == 1 else 'es'}",
            f"{run.seconds:.1f} s",
            f"amplint {__version__}",
        ]
        + ([f"fixtures from {run.root}"] if run.root else [])
    )
    chips = "".join(
        f'<span class="chip {COUNT_CLASSES[label]}{"" if count else " zero"}">{_e(count_text(label, count))}</span>'
        for label, count in summary_counts(run).items()
    )
    keys = (
        f'<span class="key">{_line_sample("buggy", 0)} buggy.py</span>'
        f'<span class="key">{_line_sample("fixed", 0)} fixed.py</span>'
    )
    links = []
    for code, rows in _by_rule([row for row in run.rows if row.variant == AS_WRITTEN.name]):
        links.append(f'<a href="#{_anchor(code)}">{_e(code)} <small>{_e(_tally(rows))}</small></a>')
    return (
        f"<header><h1>{_e(title)} <span>report</span></h1>"
        f'<p class="meta">{_e(meta)}</p>'
        f'<div class="chips">{chips}</div>'
        f'<p class="how">{keys}Each figure is one prediction: the claim and what was measured, beside the '
        "scenario's curves from both scripts over the training steps. A control claims the mistake makes no "
        "difference in some regime: it holds when nothing differs, so it is counted apart and is no evidence of harm. "
        "Every effect is also judged with buggy.py replaced by fixed.py, where it must fail (the fixtures are seeded and "
        "single-threaded, so fixed.py run in buggy.py's place reports what it reported as itself), and, with "
        "<code>--perturb</code>, with seeds 1 and 2, the learning rates x0.5 and x1.5 and the steps x0.5 and x1.5, where "
        "it must hold. Each rule opens with the lines its two scripts differ in and the setup they train in. Claims "
        f"about another device than this run's ({_e(run.device)}) are skipped, and say so. Where the curves coincide, "
        "the thin blue line runs inside the thick orange one. × marks a NaN or infinite value.</p>"
        f"<nav>{''.join(links)}</nav></header>"
    )


def _tally(rows: Sequence[Row]) -> str:
    """A rule's line in the header: `3/3 effects, 2 controls`, apart as the summary counts them
    (skipped claims left out)."""
    effects = [row for row in rows if row.ran and row.prediction is not None and not row.prediction.is_control]
    controls = [row for row in rows if row.ran and row.prediction is not None and row.prediction.is_control]
    plural = {1: ""}
    said = [f"{sum(row.verdict == CONFIRMED for row in effects)}/{len(effects)} effect{plural.get(len(effects), 's')}"] if effects else []
    if controls:
        held = sum(row.verdict == CONFIRMED for row in controls)
        counted = f"{held}/{len(controls)}" if held != len(controls) else f"{len(controls)}"
        said.append(f"{counted} control{plural.get(len(controls), 's')}")
    return ", ".join(said) or "nothing ran"


def _section(code: str, rows: List[Row], run: VerifyRun, evidence: Evidence) -> str:
    summary = _rule_summary(code)
    parts = [
        f'<section id="{_anchor(code)}"><h2>{_e(code)} <code>{_e(rows[0].name)}</code></h2>',
        f'<p class="summary">{_prose(summary)}</p>' if summary else "",
        _pair(code, run),
    ]
    parts.extend(_figure(row, evidence.lines(row)) for row in rows)
    parts.append("</section>")
    return "\n".join(parts)


def _pair(code: str, run: VerifyRun) -> str:
    """The rule's two scripts: the setup they train in, and where they differ, side by side."""
    folder = Path(run.root) / code if run.root else None
    if folder is None or not (folder / "buggy.py").is_file() or not (folder / "fixed.py").is_file():
        return ""
    buggy, fixed = ((folder / f"{which}.py").read_text(encoding="utf-8") for which in ("buggy", "fixed"))
    regime = [f"<dt>run</dt><dd>device {_e(run.device)}; {_e(_variants_text(run))}</dd>"]
    regime += [f"<dt>{_e(what)}</dt><dd><pre>{_e(text)}</pre></dd>" for what, text in setup(buggy)]
    table = [
        '<table><colgroup><col class="n"><col><col class="n"><col></colgroup>'
        "<tr><th colspan=2>buggy.py</th><th colspan=2>fixed.py</th></tr>"
    ]
    for row in dedented(side_by_side(buggy, fixed)):
        if row is None:
            table.append('<tr class="gap"><td colspan=4>⋯</td></tr>')
            continue
        cells = []
        for line, mark in zip(row, ("del", "add")):
            if line is None:
                cells.append('<td class="n"></td><td></td>')
            else:
                style = f' class="{mark}"' if line.changed else ""
                cells.append(f'<td class="n">{line.number}</td><td{style}>{_e(line.text)}</td>')
        table.append(f"<tr>{''.join(cells)}</tr>")
    table.append("</table>")
    return (
        f'<div class="pair" data-code="{_e(code)}"><div class="setup"><h3>Setup (from buggy.py; fixed.py is its twin)</h3>'
        f"<dl>{''.join(regime)}</dl></div>"
        f'<div class="diff"><h3>The mistake: where the scripts differ (docstrings aside)</h3>{"".join(table)}</div></div>'
    )


def _variants_text(run: VerifyRun) -> str:
    perturbations = [variant for variant in run.variants if variant != AS_WRITTEN.name]
    written = "as written (seed 0, the learning rates and steps below)"
    return written + (f", and under {', '.join(perturbations)}" if perturbations else "")


def _rule_summary(code: str) -> str:
    from amplint.rules import ALL_RULES

    for rule in ALL_RULES:
        if rule.code == code:
            return rule.summary()
    return ""


def _figure(row: Row, evidence: Sequence[str] = ()) -> str:
    prediction = row.prediction
    verdict = VERDICT_CLASSES.get(row.verdict, "error")
    scenario = prediction.scenario if prediction else "-"
    facts = [
        '<figcaption><div class="title">',
        f"<b>{_e(scenario)}</b><span class=\"dtype\">{_e(row.dtype)}</span>",
        f'<span class="kind">control</span>' if prediction is not None and prediction.is_control else "",
        f'<span class="badge {verdict}">{_e(verdict_word(row))}</span></div>',
    ]
    if prediction is not None:
        facts.append(f'<p class="claim">{_prose(prediction.claim)}</p><dl>')
        facts.append(f"<dt>quantity</dt><dd>{_e(prediction.quantity)}</dd>")
        facts.append(f'<dt>buggy</dt><dd class="buggy">{_e(measured_text(prediction, row.buggy))}</dd>')
        facts.append(f'<dt>fixed</dt><dd class="fixed">{_e(measured_text(prediction, row.fixed))}</dd>')
        facts.append(f"<dt>check</dt><dd>{_e(check_text(row))}</dd></dl>")
    if row.reason:
        facts.append(f'<p class="reason">{_e(verdict_text(row))}</p>')
    facts.extend(f'<p class="proof">{line}</p>' for line in evidence)
    facts.append("</figcaption>")
    return (
        f'<figure class="prediction {verdict}" data-code="{_e(row.code)}" data-scenario="{_e(scenario)}" '
        f'data-dtype="{_e(row.dtype)}" data-kind="{_e(row.kind)}" data-verdict="{_e(row.verdict)}">'
        + "".join(facts)
        + _plots(row)
        + "</figure>"
    )


def _plots(row: Row) -> str:
    histories = {side: row.history.get(side) or {} for side in SIDES}
    panels = list(dict.fromkeys(panel for side in SIDES for panel in histories[side]))
    if not panels:
        why = "no per-step curves: " + ("the prediction did not run" if not row.ran else "the scripts recorded none")
        return f'<div class="plots"><p class="none">{_e(why)}</p></div>'
    charts = [_panel(panel, {side: histories[side].get(panel, {}) for side in SIDES}) for panel in panels]
    return '<div class="plots">' + "".join(charts) + "</div>"


def _panel(title: str, lines: Dict[str, Dict[str, List[float]]]) -> str:
    names = list(dict.fromkeys(name for side in SIDES for name in lines[side]))
    series = [
        (side, names.index(name), [_number(value) for value in values])
        for side in SIDES
        for name, values in lines[side].items()
    ]
    chart = Chart(series)
    legend = ""
    if len(names) > 1:
        legend = " ".join(f"{_line_sample('ink', index)} {_e(name)}" for index, name in enumerate(names))
    scale = "log scale" if chart.log else ""
    return (
        f'<div class="panel"><h3><span>{_e(title)}</span><small>{scale}</small></h3>'
        f'<div class="lines">{legend}</div>{chart.svg()}</div>'
    )


def _number(value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return math.nan
    return float(value)


def _line_sample(side: str, dash_index: int) -> str:
    colour = COLOURS.get(side, "#495057")
    width = 3 if side == "buggy" else 1.8
    dash = DASHES[dash_index % len(DASHES)]
    dash_attr = f' stroke-dasharray="{dash}"' if dash else ""
    return (
        f'<svg width="22" height="8" viewBox="0 0 22 8" aria-hidden="true" style="vertical-align:middle">'
        f'<line x1="1" y1="4" x2="21" y2="4" stroke="{colour}" stroke-width="{width}"{dash_attr}/></svg>'
    )


class Chart:
    """A small line chart of some per-step series, buggy under fixed."""

    def __init__(self, series: Sequence[Tuple[str, int, List[float]]]) -> None:
        self.series = series
        self.steps = max((len(values) for _, _, values in series), default=0)
        finite = [value for _, _, values in series for value in values if math.isfinite(value)]
        positive = [value for value in finite if value > 0]
        self.constant: Optional[float] = None
        self.log = bool(positive) and min(finite) >= 0 and max(positive) / min(positive) >= LOG_SPAN
        if self.log:
            self.low = math.floor(math.log10(min(positive)))
            self.high = math.ceil(math.log10(max(positive)))
            if self.high == self.low:
                self.high += 1
        elif finite:
            low, high = min(finite), max(finite)
            self.constant = low if low == high else None
            pad = (high - low) * 0.06 or abs(high) * 0.05 or 1.0
            # a non-negative quantity (a loss, a share, a count) keeps its axis at or above 0
            self.low, self.high = (max(0.0, low - pad) if low >= 0 else low - pad), high + pad
        else:
            self.low, self.high = 0.0, 1.0
        self.empty = not finite
        # wide enough for the longest tick label: a label never runs off the chart's edge
        widest = max((label_width(label) for _, label in self._ticks()), default=0.0)
        self.left = max(LEFT, math.ceil(widest + LABEL_GAP + 2))

    # coordinates -------------------------------------------------------------------------

    def x(self, step: int) -> float:
        span = max(1, self.steps - 1)
        return self.left + (WIDTH - self.left - RIGHT) * step / span

    def y(self, value: float) -> float:
        if self.log:
            value = math.log10(value) if value > 0 else self.low
        fraction = (value - self.low) / (self.high - self.low)
        return TOP + (HEIGHT - TOP - BOTTOM) * (1 - fraction)

    # drawing ------------------------------------------------------------------------------

    def svg(self) -> str:
        parts = [
            f'<svg width="{WIDTH}" height="{HEIGHT}" viewBox="0 0 {WIDTH} {HEIGHT}" role="img">',
            f'<rect x="{self.left}" y="{TOP}" width="{WIDTH - self.left - RIGHT}" height="{HEIGHT - TOP - BOTTOM}" '
            'fill="#fcfcfd" stroke="#e9ecef"/>',
        ]
        parts.extend(self._y_axis())
        parts.extend(self._x_axis())
        if self.empty:
            parts.append(
                f'<text x="{(self.left + WIDTH - RIGHT) / 2:.1f}" y="{(TOP + HEIGHT - BOTTOM) / 2:.1f}" '
                'text-anchor="middle">no finite values</text>'
            )
        # buggy first (thick, underneath), fixed on top (thin): identical curves stay visible
        for side in SIDES:
            breaks = []
            for each, dash_index, values in self.series:
                if each == side:
                    parts.extend(self._line(side, dash_index, values))
                    breaks.extend((step, value) for step, value in enumerate(values) if not math.isfinite(value))
            if breaks:
                parts.append(self._break_mark(side, *min(breaks, key=lambda pair: pair[0])))
        parts.append("</svg>")
        return "".join(parts)

    def _y_axis(self) -> Iterable[str]:
        for value, label in self._ticks():
            y = self.y(value)
            yield f'<line x1="{self.left}" y1="{y:.1f}" x2="{WIDTH - RIGHT}" y2="{y:.1f}" stroke="#eef0f2"/>'
            yield f'<text class="tick" x="{self.left - LABEL_GAP}" y="{y + 3.5:.1f}" text-anchor="end">{label}</text>'

    def _ticks(self) -> List[Tuple[float, str]]:
        if self.empty:
            return []
        if self.log:
            decades = list(range(int(self.low), int(self.high) + 1))
            stride = max(1, math.ceil((len(decades) - 1) / 3))
            chosen = decades[::stride]
            if chosen[-1] != decades[-1]:  # the top decade labels the top; never two labels crowded
                chosen[-1 if len(chosen) > 1 and decades[-1] - chosen[-1] < stride else len(chosen):] = [decades[-1]]
            return [(10.0**decade, _power_of_ten(decade)) for decade in chosen]
        if self.constant is not None:
            return [(self.constant, _e(_tick_text(self.constant, 0.0)))]
        low, high = float(self.low), float(self.high)
        return [(value, _e(_tick_text(value, high - low))) for value in (low, (low + high) / 2, high)]

    def _x_axis(self) -> Iterable[str]:
        if self.steps == 0:
            return
        baseline = HEIGHT - BOTTOM
        marks = sorted({0, self.steps - 1} | ({(self.steps - 1) // 2} if self.steps > 4 else set()))
        for step in marks:
            x = self.x(step)
            yield f'<line x1="{x:.1f}" y1="{baseline}" x2="{x:.1f}" y2="{baseline + 3}" stroke="#adb5bd"/>'
            yield f'<text x="{x:.1f}" y="{baseline + 13}" text-anchor="middle">{step + 1}</text>'
        yield f'<text class="axis" x="{(self.left + WIDTH - RIGHT) / 2:.1f}" y="{HEIGHT - 3}" text-anchor="middle">step</text>'

    def _line(self, side: str, dash_index: int, values: List[float]) -> Iterable[str]:
        colour = COLOURS[side]
        width = 3.4 if side == "buggy" else 1.7
        opacity = 0.75 if side == "buggy" else 1.0
        dash = DASHES[dash_index % len(DASHES)]
        dash_attr = f' stroke-dasharray="{dash}"' if dash else ""
        segment: List[str] = []
        segments: List[List[str]] = []
        for step, value in enumerate(values):
            if math.isfinite(value):
                segment.append(f"{self.x(step):.1f},{self.y(value):.1f}")
            elif segment:
                segments.append(segment)
                segment = []
        if segment:
            segments.append(segment)
        for points in segments:
            if len(points) == 1:
                x, y = points[0].split(",")
                yield f'<circle cx="{x}" cy="{y}" r="{width / 2 + 1:.1f}" fill="{colour}" fill-opacity="{opacity}"/>'
            else:
                yield (
                    f'<polyline points="{" ".join(points)}" fill="none" stroke="{colour}" stroke-width="{width}" '
                    f'stroke-opacity="{opacity}" stroke-linejoin="round" stroke-linecap="round"{dash_attr}/>'
                )
        if len(values) <= 6:  # few steps: mark each one
            for step, value in enumerate(values):
                if math.isfinite(value):
                    yield (
                        f'<circle cx="{self.x(step):.1f}" cy="{self.y(value):.1f}" r="{width / 2 + 1.2:.1f}" '
                        f'fill="{colour}" fill-opacity="{opacity}"/>'
                    )

    def _break_mark(self, side: str, step: int, value: float) -> str:
        """× at the first step where a side's curves stop being finite, and what they became."""
        colour = COLOURS[side]
        word = "NaN" if math.isnan(value) else ("inf" if value > 0 else "-inf")
        x = self.x(step)
        y = TOP + 10 + (0 if side == "buggy" else 12)
        flip = x > (self.left + WIDTH) / 2
        return (
            f'<text class="mark" x="{x:.1f}" y="{y}" text-anchor="middle" style="fill:{colour}">×</text>'
            f'<text x="{x + (-6 if flip else 6):.1f}" y="{y}" text-anchor="{"end" if flip else "start"}" '
            f'style="fill:{colour}">{word} from step {step + 1}</text>'
        )


def label_width(label: str) -> float:
    """A tick label's width at most, in pixels: its characters (markup and entities aside)."""
    return len(html.unescape(re.sub(r"<[^>]+>", "", label))) * CHAR_WIDTH


def _power_of_ten(exponent: int) -> str:
    if exponent == 0:
        return "1"
    if exponent == 1:
        return "10"
    return f'10<tspan dy="-4" font-size="7.5">{exponent}</tspan>'


def _tick_text(value: float, span: float) -> str:
    """A y-axis label short enough for the margin, precise enough to tell the ticks apart."""
    if value == 0 or (span > 0 and abs(value) < span * 1e-6):
        return "0"
    digits = 6 if span <= 0 else max(2, min(6, math.ceil(math.log10(abs(value) / span)) + 2))
    text = f"{value:.{digits}g}"
    if "e" in text:  # 3.118e-03 -> 3.118e-3
        mantissa, exponent = text.split("e")
        text = f"{mantissa}e{int(exponent)}"
    return text
