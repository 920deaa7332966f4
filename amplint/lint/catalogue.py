"""What a run needs to know of each rule before any file needs analysing: its code, its name
and the words a file must contain for it to find anything (`Rule.triggers`, `Rule.requires`).

Importing the rules imports LibCST and the semantic layer (most of a short run's CPU), and a
file that mentions none of a rule's words is never parsed for it. So the command line
resolves `--select` against this catalogue, and a run whose files mention no AMP code (most
of a pre-commit run) never imports the rules at all (`amplint.run.driver`). The rule classes are
the one source: `python -m amplint.docs` writes their metadata into `rule_catalogue`, a module
of data, and tests/test_startup.py fails, naming that command, when it is stale.

The text pre-check (`might_use_amp`, `rules_matching_words`) lives here too, for rule classes
and catalogue entries alike.
"""

from __future__ import annotations

import functools
import itertools
from typing import Dict, FrozenSet, Iterable, Iterator, List, NamedTuple, Optional, Sequence, Tuple, TypeVar

from amplint.lint import rule_catalogue


class RuleEntry(NamedTuple):
    code: str
    name: str
    triggers: Tuple[str, ...]
    requires: Tuple[str, ...] = ()


# In amplint.rules.ALL_RULES order.
RULES = tuple(RuleEntry(*row) for row in rule_catalogue.RULES)


# A rule class or a catalogue entry: anything with `triggers` and `requires`.
R = TypeVar("R")


def might_use_amp(source: str, rules: Optional[Sequence[object]] = None) -> bool:
    """Whether a file can match any of `rules` (default: all), by a text search far cheaper
    than a parse: each rule names the words its findings need (`Rule.triggers`, and one of
    `Rule.requires` when it has them); a file with none of them is not parsed at all."""
    seen: Dict[str, bool] = {}
    sets = _word_sets(tuple((rule.triggers, rule.requires) for rule in (RULES if rules is None else rules)))  # type: ignore[attr-defined]
    return any(_has_words(source, triggers, requires, seen) for triggers, requires in sets)


# What a function with none of the rules' words may still do that a module's summary exports
# and another module's code decides: a read of the gradients (`p.grad.norm()`, `p.grad ** 2`)
# or a clip. A module of such helpers (`utils.grad_norm`) is analysed when a linted module that
# imports it names one (`amplint.project.link`). (A backward or a step alone is left out: it is in
# most files without AMP code, and analysing them all would cost a fifth of a run.) So is a
# hook after which a framework steps through its scaler (`frameworks.STEPPED_AFTER_HOOKS`): a
# Trainer subclass's `training_step` whose backward another module's settings decide.
HELPER_WORDS = (".grad.", ".grad ", ".grad)", ".grad,", ".grad\n", "clip_grad_", "def training_step(")
# ... and a helper that shards the module it is handed with FSDP (`def shard_model(m): return
# FSDP(m, ...)`, `amplint.analyses.sharding`): the importer's GradScaler then serves a
# sharded model (AMP017).
WRAP_WORDS = ("FSDP(", "FullyShardedDataParallel(")
# ... and a copy of a module that a class's `__init__` keeps and a method decays in place, whose
# dtype the importing module's cast decides (an EMA class: `self.ema = deepcopy(model)`, `{n:
# p.detach().clone() for ...}`, then `e.mul_(d)`; `Precision.export`): only the class counts, as
# what an importer must name, and only with a decay word in its text too.
COPY_WORDS = ("deepcopy(", ".clone()")
DECAY_WORDS = ("mul_(", "lerp_(", "*=", "copy_(")


def helper_names(source: str) -> FrozenSet[str]:
    """The functions (and the classes of the methods) whose text holds a helper word, by a
    text search: `grad_norm` for `def grad_norm(model): ... p.grad ...`. What another module
    must name to call one of them (a helper that calls another is found by the outer name
    only if that one holds a word too); and the classes whose methods hold a copy word
    (`COPY_WORDS`). A dunder method counts through its class only."""
    if not any(word in source for word in HELPER_WORDS + WRAP_WORDS + COPY_WORDS):
        return frozenset()
    helpers = ((start, False) for word in HELPER_WORDS + WRAP_WORDS for start in _occurrences(source, word))
    copies = ((start, True) for word in COPY_WORDS for start in _occurrences(source, word))
    return _defining(source, itertools.chain(helpers, copies), methods=True)


# What a checkpointing helper does that a module's summary exports (its `state` table,
# `amplint.analyses.saved_state`) and an importer's AMP007 decides: it saves or restores an
# optimizer's state (`self.optimizer.state_dict()`, `opt.load_state_dict(...)`). Such a
# module (`checkpoint.py` with a `Checkpointer` class) has no AMP word; it is analysed when
# a linted module that imports it names the class or the top-level function, never for a
# method's name alone (`save` and `load` are in most files). A model's own `state_dict()`
# (the most common kind) is not one.
STATE_WORD = "state_dict("
# A cast of a module to a half dtype, in a function another module may hand a module it trains
# (a validation helper: `model.half() if half else model.float()`).
CAST_WORDS = (".half()", ".bfloat16()")


def state_names(source: str) -> FrozenSet[str]:
    """The top-level functions and classes whose code saves or restores an optimizer's
    state, by a text search: `Checkpointer` for a method that calls `self.optimizer.state_dict()`."""
    if STATE_WORD not in source:
        return frozenset()
    import re

    found = (m.start() for m in re.finditer(r"\w*opt\w*\.(?:load_)?state_dict\(", source, re.I))
    return _defining(source, ((start, False) for start in found), methods=False)


# A top-level import, read from the text: `from <dots><module> import <names, or (names) over
# lines>`, or `import <modules>`.
IMPORT_LINE = r"^(?:from[ \t]+(\.*)([\w.]*)[ \t]+import[ \t]*(\([^)]*\)|[^\n]*)|import[ \t]+([^\n]*))"


def text_imports(source: str) -> List[Tuple[str, int, List[str]]]:
    """The file's top-level imports, by a text search (a cheap look: its tree decides):
    (module, relative level, the names imported from it). `from ..pkg.mod import (a, b)` over
    any number of lines gives ("pkg.mod", 2, ["a", "b"]); `import pkg.mod as m, os` gives
    ("pkg.mod", 0, []) and ("os", 0, [])."""
    import re

    found: List[Tuple[str, int, List[str]]] = []
    for dots, module, names, plain in re.findall(IMPORT_LINE, source, re.M):
        if plain:
            found.extend((name, 0, []) for name in re.findall(r"([\w.]+)(?:[ \t]+as[ \t]+\w+)?", plain))
        else:
            found.append((module, len(dots), [name for name in re.findall(r"\w+", names) if name != "as"]))
    return found


def import_words(source: str) -> Tuple[str, ...]:
    """The names on the file's top-level imports (`from .train_loop import AMPTrainer`:
    `train_loop`, `AMPTrainer`; read as `text_imports` reads them): kept with a file skipped
    for having no AMP words, so that a later run can tell, without reading it again, whether
    it may import a module another module's summary names (`amplint.project.link`)."""
    import re

    text = " ".join(" ".join(match) for match in re.findall(IMPORT_LINE, source, re.M))
    return tuple(sorted(set(re.findall(r"\w+", text)) - {"as"}))


def cast_names(source: str) -> FrozenSet[str]:
    """The top-level functions whose text casts something to a half dtype, by a text search:
    `run` for `def run(model, half=True): model.half() if half else model.float()`. What
    another module must name to call one (`amplint.analyses.parameter_casts`)."""
    if not any(word in source for word in CAST_WORDS):
        return frozenset()
    return _defining(source, ((start, False) for word in CAST_WORDS for start in _occurrences(source, word)), methods=False)


# What `project.summary._constants` exports, as text: an assignment whose value names a half dtype
# (`torch.float16`, `torch.half`, `bfloat16`), or is a string that chooses a half precision
# (`frameworks.HALF_SETTINGS`, a test keeps the two the same) written as the value itself, a
# `field(default=...)` or a branch of a conditional expression, or is True/False or 16 for a
# name with a precision word (`vocabulary.PRECISION_NAME_WORDS`).
_SETTING = r"[\"'](?i:fp16|bf16|16|16[-_]mixed|bf16[-_]mixed|float16|bfloat16|half)[\"']"
_HALF_VALUE = rf"\b(?:float16|bfloat16)\b|\.half\b(?!\s*\()|^\s*{_SETTING}|default\s*=\s*{_SETTING}|\belse\s+{_SETTING}|{_SETTING}\s+if\b"
_FLAG_VALUE = r"^[ \t]*(?:True|False|16)\b"
# `vocabulary.PRECISION_NAME_WORDS`, which a test keeps the same.
_NAME_WORDS = ("fp16", "bf16", "amp", "half", "precision", "mixed", "autocast")
_FLAG_NAME = r"(?:^|_)(?:%s)(?:_|$)" % "|".join(_NAME_WORDS)
# An assignment line (its indent, name and value); and the words a value needs.
_LINE = r"([ \t]*)([A-Za-z]\w*)[ \t]*(?::[^=\n]*)?=(?!=)(.*)"
_VALUE_WORDS = ("16", ".half")


def constant_names(source: str) -> FrozenSet[str]:
    """The top-level names assigned a precision, and the top-level classes with a field that
    is, by a text search: `AMP_DTYPE` for `AMP_DTYPE = torch.float16`, `MIXED_PRECISION` for
    `MIXED_PRECISION = "fp16"`, `TrainConfig` for its `mixed_precision: str = "bf16"` or `fp16:
    bool = True` (in the class's body, not in its methods). What another module must name to
    read one (`amplint.semantic.foreign`' `constants`)."""
    import bisect
    import re

    names = set()
    # Where each top-level statement starts, with the class it defines and its body's indent
    # (None: an `if`'s, a `try`'s... whose assignments are the module's; "": any other's).
    tops: Optional[List[Tuple[int, Optional[str], str]]] = None
    starts: List[int] = []
    # Only the lines with one of the words are looked at closely (most modules have none).
    lowered = source.lower()
    for line_start in sorted({*_lines_with(source, _VALUE_WORDS), *_lines_with(lowered, _NAME_WORDS)}):
        line_end = source.find("\n", line_start)
        found = re.match(_LINE, source[line_start : line_end if line_end != -1 else len(source)])
        if found is None:
            continue
        indent, name, value = found.groups()
        if not (re.search(_HALF_VALUE, value) or (re.match(_FLAG_VALUE, value) and re.search(_FLAG_NAME, name, re.I))):
            continue
        if not indent:
            names.add(name)
            continue
        if tops is None:
            found_tops = re.finditer(r"^(?:class[ \t]+(\w+)[^\n]*\n(?:[ \t]*(?:#[^\n]*)?\n)*([ \t]+)|(if|elif|else|try|except|finally|with|for|while)\b|[^\s#])", source, re.M)
            tops = [(m.start(), m.group(1) or (None if m.group(3) else ""), m.group(2) or "") for m in found_tops]
            starts = [start for start, _, _ in tops]
        at = bisect.bisect_right(starts, line_start)
        _, owner, body_indent = tops[at - 1] if at else (0, "", "")
        if owner and indent == body_indent:
            names.add(owner)  # a field in a class's body
        elif owner is None:
            names.add(name)  # assigned on a top-level branch: `if AMP: MIXED_PRECISION = "fp16"`
    return frozenset(names)


def _lines_with(text: str, words: Iterable[str]) -> Iterator[int]:
    """Where each line holding one of `words` starts."""
    for word in words:
        at = text.find(word)
        while at != -1:
            yield text.rfind("\n", 0, at) + 1
            end = text.find("\n", at)
            at = text.find(word, end) if end != -1 else -1


def _occurrences(source: str, word: str) -> Iterator[int]:
    start = source.find(word)
    while start != -1:
        yield start
        start = source.find(word, start + 1)


def _defining(source: str, positions: Iterable[Tuple[int, bool]], methods: bool) -> FrozenSet[str]:
    """The functions whose text holds one of `positions`, and the top-level classes of the
    methods that do (with the methods' own names when `methods`). Each position says whether
    it is a copy word's (`COPY_WORDS`), which counts for its class only."""
    import bisect
    import re

    names = set()
    definitions = [(m.start(), m.group(1), m.group(2)) for m in re.finditer(r"^([ \t]*)(?:async[ \t]+)?def[ \t]+(\w+)", source, re.M)]
    starts = [d[0] for d in definitions]
    classes = [(m.start(), m.group(1)) for m in re.finditer(r"^class[ \t]+(\w+)", source, re.M)]
    class_starts = [c[0] for c in classes]
    # Where each top-level statement that opens a block starts: a class's text ends at the next.
    tops = [m.start() for m in re.finditer(r"^(?:class|def|async|@|if|for|while|try|with)\b", source, re.M)]
    for start, copy in positions:
        at = bisect.bisect_left(starts, start)  # the definitions that begin before it
        if at:
            where, indent, name = definitions[at - 1]
            if not copy and (methods or not indent) and not (name.startswith("__") and name.endswith("__")):
                names.add(name)  # a dunder method is named through its class
            owner = bisect.bisect_left(class_starts, where)
            if indent and owner:
                begins = classes[owner - 1][0]
                ends = next((top for top in tops if top > begins), len(source))
                # A copy counts in the constructor only (where `Precision.export` looks for it).
                if not copy or (name == "__init__" and any(decay in source[begins:ends] for decay in DECAY_WORDS)):
                    names.add(classes[owner - 1][1])
    return frozenset(names)


def rules_matching_words(source: str, rules: Sequence[R]) -> List[R]:
    """The rules whose words (`triggers`, and `requires` if any) the source has."""
    seen: Dict[str, bool] = {}
    return [rule for rule in rules if _has_words(source, rule.triggers, rule.requires, seen)]  # type: ignore[attr-defined]


def _has_words(source: str, triggers: Iterable[str], requires: Iterable[str], seen: Dict[str, bool]) -> bool:
    """`seen`: the words already looked for in `source`, so that the rules sharing a word
    (most share `autocast` and `GradScaler`) search the text for it once."""

    def has(word: str) -> bool:
        found = seen.get(word)
        if found is None:
            found = seen[word] = word in source
        return found

    return any(has(word) for word in triggers) and (not requires or any(has(word) for word in requires))


@functools.lru_cache(maxsize=64)
def _word_sets(words: Tuple[Tuple[Tuple[str, ...], Tuple[str, ...]], ...]) -> Tuple[Tuple[FrozenSet[str], FrozenSet[str]], ...]:
    """The rules' (triggers, requires), rules with the same ones merged."""
    return tuple(sorted({(frozenset(triggers), frozenset(requires)) for triggers, requires in words}, key=repr))
