"""The rounds of the second phase (`amplint.project.link`): a file is linted again only where
its analysis looks up something an imported summary has; elsewhere it keeps its first result,
which is the one a relint would give. A summary that changes is passed on round after round
(a chain of modules, a cycle of imports)."""

import json
import os
import textwrap

from amplint.lint.diagnostics import FileResult
from amplint.lint.engine import lint_source
from amplint.project.link import link
from amplint.rules import ALL_RULES
from amplint.semantic.foreign import ExternalModules

STEPS = """
def scaled_step(scaler, optimizer):
    scaler.step(optimizer)
    scaler.update()
"""

# Deferred (no rule needs its code alone), analysed for the module that imports it. What
# `scaled_step` does it learns in the first round, so its summary changes then.
UPDATE = """
from .steps import scaled_step


def update(scaler, optimizer, loss):
    scaler.scale(loss).backward()
    scaled_step(scaler, optimizer)
"""

TRAIN = """
import torch

from .update import update


def train(model, optimizer, loader):
    scaler = torch.amp.GradScaler("cuda")
    with torch.autocast("cuda"):
        for x in loader:
            loss = model(x)
            update(scaler, optimizer, loss)
"""


def _write(tmp_path, files):
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    paths = []
    for name, text in files.items():
        (package / name).write_text(textwrap.dedent(text))
        paths.append(str(package / name))
    return paths


class _Relint:
    """Lints jobs as the driver does (whole, with the summaries), and notes each round."""

    def __init__(self):
        self.rounds = []

    def __call__(self, jobs):
        self.rounds.append(sorted(os.path.basename(path) for path, _ in jobs))
        return [
            lint_source(open(path).read(), path, ALL_RULES, external=ExternalModules(path, used) if used else None, whole=True)
            for path, used in jobs
        ]


def _first(paths):
    return [lint_source(open(path).read(), path, ALL_RULES) for path in paths]


def _codes(result: FileResult):
    return [(f.row, f.code) for f in result.findings]


def test_a_summary_that_changes_reaches_the_next_module_in_a_later_round(tmp_path):
    paths = _write(tmp_path, {"steps.py": STEPS, "update.py": UPDATE, "train.py": TRAIN})
    relint = _Relint()
    results = link(_first(paths), relint)
    # The deferred modules first, for their summaries; train.py's update() runs backward()
    # (round 1) and, once update.py knows what scaled_step does, a step too (round 2): both
    # under an autocast region that spans the loop.
    assert relint.rounds == [["steps.py", "update.py"], ["train.py", "update.py"], ["train.py"]]
    assert _codes(results[2]) == [(12, "AMP004"), (12, "AMP006")]


def test_an_import_cycle_ends(tmp_path):
    first = """
    import torch

    from . import second


    def scaled_step(scaler, optimizer):
        scaler.step(optimizer)
        scaler.update()


    def train(model, optimizer, loader):
        scaler = torch.amp.GradScaler("cuda")
        with torch.autocast("cuda"):
            for x in loader:
                loss = model(x)
                second.update(scaler, optimizer, loss)
    """
    second = """
    from .first import scaled_step


    def update(scaler, optimizer, loss):
        scaler.scale(loss).backward()
        scaled_step(scaler, optimizer)
    """
    paths = _write(tmp_path, {"first.py": first, "second.py": second})
    relint = _Relint()
    results = link(_first(paths), relint)
    # Each learns from the other, round after round, and the rounds stop.
    assert 2 <= len(relint.rounds) <= 4
    assert _codes(results[0]) == [(17, "AMP004"), (17, "AMP006")]


def test_a_file_whose_analysis_looks_up_nothing_a_summary_has_keeps_its_first_result(tmp_path):
    # It imports the module and names `scaled_step` (its own method, a comment), but calls
    # none of the module's functions: by its text alone it would be linted again.
    evaluate = """
    import torch

    from .steps import scaled_step as _unused  # scaled_step


    class Loop:
        def scaled_step(self, optimizer):
            optimizer.step()

        def run(self, model, x, optimizer):
            with torch.autocast("cuda"):
                loss = model(x)
                loss.backward()
            self.scaled_step(optimizer)
    """
    paths = _write(tmp_path, {"steps.py": STEPS, "evaluate.py": evaluate})
    first = _first(paths)
    assert first[1].lookups is not None and not any(function == "scaled_step" for _, _, function in first[1].lookups)
    relint = _Relint()
    results = link(first, relint)
    assert relint.rounds == [["steps.py"]]  # deferred: analysed for its summary, which evaluate.py imports
    assert results[0].summary is not None
    assert results[1] is first[1] and _codes(first[1]) == [(12, "AMP002"), (14, "AMP006")]
    # ... which is what linting it again gives, to the last field.
    again = relint([(paths[1], {paths[0]: results[0].summary})])[0]
    assert (again.findings, again.summary, again.skipped_functions, again.error) == (first[1].findings, first[1].summary, first[1].skipped_functions, first[1].error)


def test_a_result_whose_lookups_are_unknown_is_linted_again(tmp_path):
    # A result from elsewhere (an older cache) does not say what its analysis looks up.
    paths = _write(tmp_path, {"steps.py": STEPS, "train.py": TRAIN.replace(".update import update", ".steps import scaled_step as update")})
    first = _first(paths)
    first[1].lookups = None
    relint = _Relint()
    link(first, relint)
    assert relint.rounds == [["steps.py"], ["train.py"]]


def test_the_lookups_are_what_the_analysis_asks_of_other_modules():
    source = textwrap.dedent(
        """
        import torch
        import pkg.utils as u
        from .loops import Looper
        from .steps import clip, LIMIT


        def train(model, optimizer, scaler, x):
            with torch.autocast("cuda"):
                loss = model(x)
            scaler.scale(loss).backward()
            clip(model)
            u.sync(optimizer)
            loop = Looper(model)
            loop.fit(LIMIT)
            scaler.step(optimizer)
            scaler.update()
        """
    )
    result = lint_source(source, "pkg/train.py", ALL_RULES)
    assert {("steps", 1, "clip"), ("pkg.utils", 0, "sync"), ("loops", 1, "Looper.fit")} <= set(result.lookups)
    assert not any(function == "LIMIT" for _, _, function in result.lookups)
    # Linted with summaries, its lookups are noted the same way (with every rule its words
    # pick running, not only those its marks allow: more of them).
    assert set(result.lookups) <= set(lint_source(source, "pkg/train.py", ALL_RULES, external=ExternalModules("pkg/train.py", {})).lookups)
    steps = lint_source(textwrap.dedent(STEPS).replace("scaled_step", "clip"), "pkg/steps.py", ALL_RULES, whole=True).summary
    assert steps is not None and "clip" in steps["functions"]
    found = lint_source(source, "pkg/train.py", ALL_RULES, external=ExternalModules("pkg/train.py", {"pkg/steps.py": steps}))
    assert {("steps", 1, "clip"), ("pkg.utils", 0, "sync"), ("loops", 1, "Looper.fit")} <= set(found.lookups)


def test_the_lookups_are_kept_in_the_cache_with_the_result(tmp_path):
    from amplint.run import cache
    from amplint.run.driver import _from_payload, _to_payload

    paths = _write(tmp_path, {"steps.py": STEPS, "train.py": TRAIN.replace(".update import update", ".steps import scaled_step as update")})
    result = _first(paths)[1]
    assert result.lookups
    payload = json.loads(json.dumps(_to_payload(result)))
    assert cache.valid_result(payload) and _from_payload(result.path, payload).lookups == result.lookups
    assert not cache.valid_result(dict(payload, lookups=[["steps", "1", None]]))
    unknown = dict(payload)
    del unknown["lookups"]
    assert cache.valid_result(unknown) and _from_payload(result.path, unknown).lookups is None


def test_the_recorder_has_nothing_and_notes_every_way_a_summary_is_read():
    from amplint.semantic.foreign import LookupRecorder

    recorder = LookupRecorder("pkg/train.py")
    functions = recorder.module("steps", 1).functions
    assert functions.get("scaled_step") is None and "Looper.fit" not in functions
    assert recorder.summaries[recorder.path_of("trainers", 1) or ""] == {}  # a summary read whole
    assert list(functions.items()) == [] and recorder.scaler("ext:pkg/steps.py:scaler") is None
    assert recorder.lookups == {("steps", 1, "scaled_step"), ("steps", 1, "Looper.fit"), ("trainers", 1, None), ("steps", 1, None)}


def test_the_recorder_with_summaries_answers_as_they_do_and_notes_what_it_asked():
    from amplint.semantic.foreign import LookupRecorder

    steps = lint_source(textwrap.dedent(STEPS), "pkg/steps.py", ALL_RULES, whole=True).summary
    plain = ExternalModules("pkg/train.py", {"pkg/steps.py": steps})
    recorder = LookupRecorder("pkg/train.py", {"pkg/steps.py": steps})
    functions = recorder.module("steps", 1).functions
    assert functions.get("scaled_step") == plain.module("steps", 1).functions["scaled_step"]
    assert "missing" not in functions and recorder.module("other", 1).functions.get("f") is None
    assert recorder.raw("steps", 1) is steps and recorder.path_of("steps", 1) == "pkg/steps.py"
    assert recorder.lookups == {("steps", 1, "scaled_step"), ("steps", 1, "missing"), ("other", 1, "f"), ("steps", 1, None)}
    # A module without a summary is read whole as nothing, as `ExternalModules` reads it: the
    # caller goes on to the next place the name may come from.
    assert recorder.raw("other", 1) is None and plain.raw("other", 1) is None and ("other", 1, None) in recorder.lookups
    # A base class's methods; whether a name is listed (a class, a function, a state entry).
    recorder.lookups.clear()
    assert recorder.methods("steps", 1, "Looper") == ({}, {}) and recorder.methods("other", 1, "Looper") is None
    assert recorder.lists("steps", 1, "scaled_step") is True and recorder.lists("other", 1, "scaled_step") is None
    assert recorder.lookups == {("steps", 1, "Looper.*"), ("other", 1, "Looper.*"), ("steps", 1, "?scaled_step"), ("other", 1, "?scaled_step")}
    # A scaler of another module: every module asked for counts whole, found there or not.
    recorder.lookups.clear()
    assert recorder.scaler("ext:pkg/steps.py:nothing") is None
    assert recorder.lookups == {("steps", 1, None), ("other", 1, None)}


def test_a_lookup_is_answered_otherwise_only_where_the_summaries_differ_at_it():
    from amplint.project.link import _answered_otherwise

    step = {"params": ["scaler", "optimizer"], "events": [{"kind": "step", "text": "`s.step(o)`"}]}
    steps = {"version": 4, "functions": {"scaled_step": step, "log": {"params": [], "events": []}}}
    logged = {**steps, "functions": {**steps["functions"], "log": {"params": ["x"], "events": []}}}
    asked = [("steps", 1, "scaled_step")]
    here = "pkg/train.py"
    same = lambda before, now, lookups=asked: not _answered_otherwise(here, before, now, lookups)  # noqa: E731
    assert same({"pkg/steps.py": steps}, {"pkg/steps.py": logged})  # another function changed
    assert not same({"pkg/steps.py": steps}, {"pkg/steps.py": {**steps, "functions": {"scaled_step": {**step, "params": []}}}})
    assert not same({"pkg/steps.py": steps}, {"pkg/steps.py": logged}, [("steps", 1, None)])  # read whole
    assert same({"pkg/steps.py": steps}, {"pkg/steps.py": dict(steps)}, [("steps", 1, None)])  # ... the same again
    assert not same({"pkg/steps.py": steps}, {"pkg/steps.py": {**steps, "version": 5}})
    # A module that has a summary only now: what was asked of it decides.
    assert same({}, {"pkg/steps.py": {**steps, "functions": {"log": {}}}})
    assert not same({}, {"pkg/steps.py": steps})
    assert not same({}, {"pkg/steps.py": steps}, [("steps", 1, None)])
    # A name in a fact family, the state table or the constants counts as a function does.
    for table in ({"facts": {"precision": {"scaled_step": {"dtype": "float16"}}}}, {"state": {"scaled_step": {}}}, {"constants": {"scaled_step": {}}}):
        assert not same({"pkg/steps.py": {"version": 4}}, {"pkg/steps.py": {"version": 4, **table}})
    # A class's methods (`Looper.*`): only the methods of that class, and then the scalers.
    looper = {**steps, "functions": {**steps["functions"], "Looper.fit": step, "Looper.fit.inner": {}}}
    methods = [("steps", 1, "Looper.*")]
    assert same({"pkg/steps.py": steps}, {"pkg/steps.py": logged}, methods) and same({}, {"pkg/steps.py": steps}, methods)
    assert not same({"pkg/steps.py": steps}, {"pkg/steps.py": looper}, methods)
    assert same({"pkg/steps.py": looper}, {"pkg/steps.py": {**looper, "functions": {**looper["functions"], "Looper.fit.inner": step}}}, methods)
    assert not same({"pkg/steps.py": looper}, {"pkg/steps.py": {**looper, "scalers": {"s": {}}}}, methods)
    # Whether a name is listed (`?name`): the answer, wherever the summary lists it.
    listed = [("steps", 1, "?Looper")]
    assert not same({}, {"pkg/steps.py": {"version": 4}}, listed)  # None, then False
    assert same({"pkg/steps.py": {"version": 4, "classes": {"Looper": {}}}}, {"pkg/steps.py": {"version": 4, "state": {"Looper": {"x": 1}}}}, listed)
    assert not same({"pkg/steps.py": {"version": 4, "classes": {"Looper": {}}}}, {"pkg/steps.py": {"version": 4, "classes": {}}}, listed)
    # Another module answers (now two files could be `steps`, or another one is nearer).
    assert not same({"pkg/steps.py": steps}, {"steps.py": steps})
    # A summary telling of the classes another module trains is read whole.
    assert not same({"pkg/steps.py": steps}, {"pkg/steps.py": steps, "pkg/fit.py": {"trains_here": {"classes": []}}})


def test_a_result_linted_with_summaries_is_kept_where_a_changed_summary_answers_its_lookups_alike(tmp_path):
    # monitor.py calls scaled_step and imports update without calling it: when update.py's
    # summary changes (it learns what scaled_step does), nothing monitor.py asked changes.
    monitor = """
    import torch

    from .steps import scaled_step
    from .update import update  # (not called here)


    def run(scaler, optimizer, model, x):
        with torch.autocast("cuda"):
            loss = model(x)
            scaler.scale(loss).backward()
            scaled_step(scaler, optimizer)
    """
    paths = _write(tmp_path, {"steps.py": STEPS, "update.py": UPDATE, "monitor.py": monitor})
    relint = _Relint()
    results = link(_first(paths), relint)
    assert relint.rounds == [["steps.py", "update.py"], ["monitor.py", "update.py"]]
    assert _codes(results[2]) == [(11, "AMP006")]
    # ... which is what linting it again with the summaries it would have had gives.
    again = relint([(paths[2], {paths[0]: results[0].summary, paths[1]: results[1].summary})])[0]
    assert (again.findings, again.summary, again.ambient, again.skipped_functions) == (results[2].findings, results[2].summary, results[2].ambient, results[2].skipped_functions)
    # A result that does not say what its analysis looked up is linted again in that round.
    forgetting = _Forgetting()
    link(_first(paths), forgetting)
    assert forgetting.rounds == [["steps.py", "update.py"], ["monitor.py", "update.py"], ["monitor.py"]]


class _Forgetting(_Relint):
    """Lints as the driver does, and forgets what each analysis looked up."""

    def __call__(self, jobs):
        results = super().__call__(jobs)
        for result in results:
            result.lookups = None
        return results


def test_the_recorder_finds_what_the_summaries_give_where_an_import_has_two_places():
    # The helpers are linted in checkpoint.py, the other place is not: the lint that notes its
    # lookups finds what a plain lint with the same summaries finds (the scaler is saved, never
    # restored), whichever place is tried first.
    from tests.test_protocol_reach import CHECKPOINT_HELPERS, RESUMING

    helpers = lint_source(CHECKPOINT_HELPERS.replace("{scaler_parameter}", "").replace("{scaler_restore}", ""), "pkg/checkpoint.py", ALL_RULES, whole=True).summary
    resuming = RESUMING.replace("{scaler_argument}", "")
    one_place = "from utils.checkpoint import load_checkpoint, save_checkpoint\n"
    assert one_place in resuming
    for first, second in (("fast", "checkpoint"), ("checkpoint", "fast")):
        two_places = f"try:\n    from .{first} import load_checkpoint, save_checkpoint\nexcept ImportError:\n    from .{second} import load_checkpoint, save_checkpoint\n"
        source = resuming.replace(one_place, two_places)
        noted = lint_source(source, "pkg/train.py", ALL_RULES, external=ExternalModules("pkg/train.py", {"pkg/checkpoint.py": helpers}), whole=True)
        plain = lint_source(source, "pkg/train.py", ALL_RULES, external=ExternalModules("pkg/train.py", {"pkg/checkpoint.py": helpers}), whole=True, summary=False)
        assert _codes(noted) == _codes(plain) == [(12, "AMP007")]  # the resume
        # Whether `.fast` has a summary was asked: one there later would be tried first.
        assert ("fast", 1, "") in noted.lookups or first == "checkpoint"


def test_a_scaler_of_another_module_counts_every_module_asked_anything_of():
    from amplint.project.link import _answered_otherwise
    from amplint.semantic.foreign import LookupRecorder

    held = {"version": 4, "functions": {}, "scalers": {"ext:pkg/a.py:s": {"name": "s", "enabled": True}}, "constants": {"X": {"dtypes": ["float16"]}}}
    off = {**held, "scalers": {"ext:pkg/a.py:s": {"name": "s", "enabled": False}}}
    recorder = LookupRecorder("pkg/f.py", {"pkg/a.py": held})
    recorder.constant("a", 1, "X")
    recorder.methods("a", 1, "Looper")
    assert recorder.scaler("ext:pkg/a.py:s").enabled is True
    assert ("a", 1, None) in recorder.lookups
    assert _answered_otherwise("pkg/f.py", {"pkg/a.py": held}, {"pkg/a.py": off}, recorder.lookups)


def test_which_fact_families_a_summary_has_is_a_whole_read():
    from amplint.semantic.foreign import LookupRecorder

    recorder = LookupRecorder("pkg/f.py", {"pkg/a.py": {"version": 4, "facts": {"precision": {"EMA": {}}}}})
    facts = recorder.module("a", 1).facts
    assert facts.get("precision").get("EMA") == {} and recorder.lookups == {("a", 1, "EMA")}
    assert "precision" in facts and list(facts) == ["precision"] and ("a", 1, None) in recorder.lookups
