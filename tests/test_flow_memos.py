"""What the flow analysis and its queries keep instead of computing again: each kept answer is
the one computing it afresh gives, is found again only for the very object it was computed
for (a node, a call, a unit, never another that reuses its id), and lives with the file's
model (its size bounded by the file's statements, calls and helpers' ways)."""

import textwrap
from dataclasses import fields

import libcst as cst
import pytest

from amplint import work
from amplint.analyses.precision import Precision
from amplint.semantic import analyze, calls_within
from amplint.semantic.calls import HelperCall
from amplint.semantic.conditions import Condition, _plain_name, alternatives, assumptions, condition
from amplint.semantic.interpreter import _join_core
from amplint.semantic.summaries import call_arguments, rewrite
from amplint.semantic.names import names_read, source_text
from amplint.semantic.types import GradientState
from amplint.semantic.walk import iter_tree


def model(source):
    return analyze(cst.parse_module(textwrap.dedent(source)))


TESTS = [
    "use_amp",
    "self.scaler.is_enabled()",
    "scaler is not None",
    "not (args.fp16 and args.amp == 'pytorch')",
    "args.fp16 or args.bf16",
    "args.mode != 'amp'",
    "bool(self.use_amp)",
    "(a . b)",
]


@pytest.mark.parametrize("test", TESTS)
def test_a_tests_conditions_are_the_same_printed_once(test):
    node = cst.parse_expression(test)
    memo = {}
    for outcome in (True, False):
        assert assumptions(node, outcome, memo) == assumptions(node, outcome)
        assert alternatives(node, outcome, memo) == alternatives(node, outcome)
    # Asked again, the kept conditions are the very ones found first.
    first = alternatives(node, True, memo)
    again = alternatives(node, True, memo)
    assert all(a[0] is b[0] for case, other in zip(first, again) for a, b in zip(case, other))


def test_a_kept_condition_is_never_another_nodes():
    node = cst.parse_expression("args.fp16")
    other = cst.parse_expression("args.bf16")
    stale = Condition("args.bf16", frozenset({"args.bf16"}))
    memo = {id(node): (other, stale)}  # an id reused by another node
    assert assumptions(node, True, memo) == [(Condition("args.fp16", frozenset({"args.fp16"})), True)]
    assert memo[id(node)][0] is node


@pytest.mark.parametrize("code", ["a", "a.b", "self.scaler.enabled", "(a.b)", "((a))", "self.a_long_flag_name"])
def test_a_plain_name_is_its_printed_text_and_counts_as_printed(code):
    node = cst.parse_expression(code)
    assert _plain_name(node) == source_text(node)
    with work.metered() as printed:
        source_text(node)
        names_read(node)
    with work.metered() as read:
        assert condition(node) == Condition(source_text(node), frozenset(names_read(node)))
    with work.metered() as read:
        condition(node)
    assert read.spent == printed.spent  # the work meter counts the same steps either way


@pytest.mark.parametrize("code", ["(a).b", "a .b", "a. b", "a.b()", "a[0].b", "not a", "a.\\\n b", "(a\n).b"])
def test_anything_but_a_plain_name_is_printed(code):
    assert _plain_name(cst.parse_expression(code)) is None


HELPER = """
    import torch
    scaler = torch.cuda.amp.GradScaler()

    def step(opt, use_scaler, clip):
        if use_scaler:
            scaler.unscale_(opt)
        if clip:
            torch.nn.utils.clip_grad_norm_(params, 1.0)
        if use_scaler:
            scaler.step(opt)
        else:
            opt.step()

    def train(model, opt, data, flag):
        for batch in data:
            if flag:
                scaler.scale(model(batch)).backward()
            step(opt, flag, True)
            step(opt, model.fp16, flag)
"""


def helper_calls(found):
    return [item for record in found.index.calls for item in [found.classify(record)] if isinstance(item, HelperCall)]


def test_a_helpers_conditions_in_each_callers_terms():
    found = model(HELPER)
    calls = helper_calls(found)
    assert len(calls) == 2
    summary = found.flow.summary_for(calls[0])
    ways = [sequence.facts for sequence in summary.sequences if sequence.facts]
    assert ways
    for call in calls:
        arguments = call_arguments(call)
        assert found.flow.call_arguments(call) == arguments
        for facts in ways:
            expected = _in_callers_terms(call, facts, arguments)
            kept = found.flow.facts_at(call, facts)
            assert kept == expected
            assert found.flow.facts_at(call, facts) is kept
    # Each call has its own: `flag` at the first, `model.fp16` at the second.
    texts = [{cond.text for facts in ways for cond, _ in found.flow.facts_at(call, facts) or ()} for call in calls]
    assert "flag" in texts[0] and "model.fp16" in texts[1] and texts[0] != texts[1]
    # `step(opt, flag, True)`: the call's own `True` for `clip` rules out the ways that skip the clip.
    assert any(found.flow.facts_at(calls[0], facts) is None for facts in ways if any(c.text == "clip" and not v for c, v in facts))


def _in_callers_terms(call, facts, arguments):
    """A way's conditions in the caller's terms (`rewrite`), with a `True` the call passes for a
    parameter holding (dropped) or ruling the way out (None)."""
    kept = []
    for cond, value in facts:
        passed = call.argument_for(cond.text) if cond.text in arguments else None
        if isinstance(passed, cst.Name) and passed.value == "True":
            if not value:
                return None
            continue
        mapped = rewrite(cond, arguments)
        if mapped is not None:
            kept.append((mapped, value))
    return frozenset(kept)


def test_a_kept_answer_is_recomputed_for_another_object_with_its_id():
    found = model(HELPER)
    first, second = helper_calls(found)
    found.flow.call_arguments(first)
    found.flow._arguments[(id(second),)] = ((first,), {"stale": None})  # an id reused
    assert found.flow.call_arguments(second) == call_arguments(second)


def test_a_units_calls_and_statements_listed_once_are_what_classifying_gives():
    found = model(HELPER)
    for unit in found.units:
        expected = [(r, found.classify(r)) for r in unit.calls if r.immediate and found.classify(r) is not None]
        assert list(found.flow.items_of(unit)) == expected
        assert found.flow.items_of(unit) is found.flow.items_of(unit)
        for statement, record in found.index.statement_records(unit):
            listed = found.flow.evaluation(statement, unit)
            calls = [(c, found.classify(c)) for c in record.calls if found.classify(c) is not None]
            assert (listed[0] if listed else ()) == tuple(calls)


def test_a_units_occurrences_are_listed_once_and_read_afresh_each_time():
    found = model(HELPER)
    train = next(unit for unit in found.units if unit.name == "train")
    first = list(found.occurrences_in(train))
    assert [o.kind.name for o in first].count("SCALER_STEP") == 2  # one through each call of step
    assert list(found.occurrences_in(train)) == first  # the same objects
    partly = found.occurrences_in(train)
    next(partly)
    assert list(found.occurrences_in(train)) == first  # a new iterator every time


def test_gradient_states_merge_on_every_field_but_the_merged_ones():
    merged = {"plain_backwards", "entry_uses", "mixed"}
    names = [f.name for f in fields(GradientState) if f.name not in merged]
    state = GradientState(scaler="s", entry=True, unscaled=frozenset({"o"}), scaled_since_step=True)
    assert _join_core(state) == tuple(getattr(state, name) for name in names)


NESTED = """
    import torch

    def train(model, data, opt):
        model.half()
        for epoch in range(3):
            for batch in data:
                with torch.no_grad():
                    f(lambda x: g(x))
                if h(batch):
                    opt.step(k())
                    def inner():
                        hidden()
                    class C:
                        body()
                else:
                    opt.zero_grad()
            while check():
                try:
                    m()
                except E(n()):
                    pass
"""


def test_the_calls_a_statement_runs_from_those_nested_in_it():
    found = model(NESTED)
    successors = found.facts(Precision).successors
    statements = [node for node in iter_tree(found.module) if isinstance(node, cst.BaseStatement)]
    assert len(statements) > 10
    for statement in reversed(statements):  # inner statements first, then outer ones
        assert successors.calls_within([statement]) == calls_within([statement])
    for statement in statements:  # and outer first, from a fresh one
        fresh = analyze(found.module).facts(Precision).successors
        assert fresh.calls_within([statement]) == calls_within([statement])


def test_a_nodes_remembered_children_are_the_ones_worked_out_afresh():
    from amplint.semantic.walk import _MEMO, children, remembered_children

    module = cst.parse_module("x = f(a, b[1]) + g(*c)\nif x:\n    y = 2\n")
    nodes = list(iter_tree(module))
    assert _MEMO.get() is None  # no memo outside a lint
    fresh = [tuple(children(node)) for node in nodes]
    with remembered_children():
        first = [children(node) for node in nodes]
        again = [children(node) for node in nodes]
        assert [tuple(kids) for kids in first] == fresh
        assert all(a is b for a, b in zip(first, again))  # the very tuples found first
    assert _MEMO.get() is None  # forgotten with the lint


def test_a_remembered_childrens_node_is_never_another_with_its_id():
    from amplint.semantic.walk import _MEMO, children, remembered_children

    node = cst.parse_expression("f(a)")
    other = cst.parse_expression("g(b, c)")
    with remembered_children():
        _MEMO.get()[id(node)] = (other, tuple(children(other)))  # an id reused by another node
        assert list(map(source_text, children(node))) == ["f", "a"]


def test_the_work_meter_counts_a_remembered_expansion_as_a_step():
    # The file's work limit must not depend on what the walks remember.
    from amplint.semantic.walk import remembered_children

    module = cst.parse_module("for p in params:\n    p.grad.mul_(scale(x) + 1)\n" * 20)

    def spent(remember: bool) -> int:
        with work.metered(1.0) as meter:
            if remember:
                with remembered_children():
                    for _ in range(3):
                        list(iter_tree(module))
            else:
                for _ in range(3):
                    list(iter_tree(module))
        return meter.spent

    assert spent(True) == spent(False) == 3 * len(list(iter_tree(module)))


DEVICE_OPTIONS = """
import argparse
import torch

parser = argparse.ArgumentParser()
parser.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
parser.add_argument("--precision", default="fp16", choices=["fp16", "bf16", "fp32"])
args = parser.parse_args()
DTYPE = torch.float16 if args.precision == "fp16" else torch.bfloat16

def step(model, x, device):
    with torch.autocast(device_type=device, dtype=DTYPE):
        y = model(x)
    with torch.autocast(device_type=device, enabled=args.precision != "fp32"):
        return model(y)

def train(model, opt, loader, scaler):
    for x in loader:
        with torch.autocast(device_type=args.device, dtype=DTYPE):
            loss = model(x)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        with torch.autocast(args.device):
            step(model, x, args.device)
    with torch.autocast(device_type=str(args.device)):
        step(model, x, "cuda" if args.device == "cuda" else "cpu")
"""


def _linted(source, remember):
    from amplint.lint.engine import run_rules
    from amplint.rules import ALL_RULES
    from amplint.semantic import remembered_children
    from amplint.semantic.resolve import Resolver

    real = Resolver._remembered
    if not remember:
        Resolver._remembered = lambda self, query, value, scope, depth, find: find(value, scope, depth)
    try:
        with work.metered(1.0) as meter, remembered_children():
            found = model(source)
            reports = sorted((rule.code, str(report.message)) for rule, _, report in run_rules(found, ALL_RULES))
            regions = [(r.device, sorted(r.possible_devices), r.dtype) for r in found.regions.all]
            return reports, regions, meter.spent, found.resolver
    finally:
        Resolver._remembered = real


def test_a_resolvers_remembered_answers_are_the_ones_found_afresh_and_cost_the_same_work():
    reports, regions, spent, resolver = _linted(DEVICE_OPTIONS, remember=True)
    assert (reports, regions, spent) == _linted(DEVICE_OPTIONS, remember=False)[:3]
    assert regions and all(devices == ["cpu", "cuda"] or devices == ["cuda"] for _, devices, _ in regions)
    assert resolver._answers  # the regions asked, and the answers were kept


def test_a_resolvers_remembered_answer_is_never_another_values():
    from amplint.semantic.resolve import Resolver

    found = model("device = 'cpu'\nother = 'cuda'\n")
    resolver: Resolver = found.resolver
    scope = found.index.module_scope
    cpu, cuda = (statement.body[0].value for statement in found.module.body)
    resolver._answers[("devices", id(cpu), id(scope), 0)] = (cuda, scope, frozenset({"cuda"}), 0)  # an id reused
    assert resolver.devices(cpu, scope) == frozenset({"cpu"})
