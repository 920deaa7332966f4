"""What a rule is: its metadata, its documentation, its examples, and one query over the semantic model.

A rule module reads like its documentation (Fixit's layout, ruff's doc sections): the class
docstring is the rule's page, `VALID` and `INVALID` are its examples and its tests, and
`check` is a short query over the `SemanticModel`. `PREDICTIONS` state what the runtime harness
(`amplint verify`) measures when the mistake is made, and the docs quote them.
"""

from __future__ import annotations

import inspect
import textwrap
from dataclasses import dataclass
from typing import ClassVar, Iterator, Optional, Tuple, Union

import libcst as cst

from amplint.lint.evidence import Needs
from amplint.lint.fix import Fix
from amplint.semantic import AMP_VOCABULARY, EventKind, Occurrence, SemanticModel, source_text
from amplint.lint.titles import bounded

DOC_SECTIONS = ("What it does", "Why is this bad?", "What goes wrong at runtime", "Example", "Use instead", "Fix safety")
DOCS_URL = "https://github.com/amplint/amplint/blob/main/docs/rules.md#{code}"


SEVERITIES = ("error", "warning")


@dataclass(frozen=True)
class Message:
    """What a finding says: a short title (what is wrong, in the user's names), and help (why it
    matters and what to write instead). Output formats lay them out as ruff does: the title
    on the finding's first line, `help:` under the code frame."""

    title: str
    help: Optional[str] = None

    @classmethod
    def split(cls, text: str) -> "Message":
        """A one-sentence message as title and help, at its first colon outside code:
        "`x` does y: why it matters. What to write." -> title "`x` does y", help the rest."""
        in_code = False
        for index, character in enumerate(text):
            if character == "`":
                in_code = not in_code
            elif character == ":" and not in_code and text[index + 1 : index + 2] == " ":
                rest = text[index + 2 :].strip()
                return cls(text[:index], rest[:1].upper() + rest[1:])
        return cls(text)


@dataclass(frozen=True)
class Report:
    """A rule's finding before it has a file position: the node to point at and what to say.

    `message` is the title; a rule may pass a `Message` instead, which supplies both."""

    node: cst.CSTNode
    message: Union[str, Message]
    help: Optional[str] = None
    # How to correct it, as changes to the tree the rule was given (`amplint.lint.fix`).
    fix: Optional[Fix] = None
    # The event the finding is about, when it is reported where a unit runs it (`node` is
    # then `occurrence.call_site`): one mistake is one finding, at the innermost place that
    # shows it (`amplint.lint.engine.run_rules`).
    occurrence: Optional[Occurrence] = None

    def __post_init__(self) -> None:
        if isinstance(self.message, Message):
            object.__setattr__(self, "help", self.message.help if self.help is None else self.help)
            object.__setattr__(self, "message", self.message.title)
        # One line, long code elided (the code frame shows it whole).
        object.__setattr__(self, "message", bounded(self.message))


def quote(occurrence: "Occurrence") -> str:
    """An event as a message names it: `` `scaler.step(opt)` ``, or through a helper,
    `` `apply_step(scaler, opt)` (which calls `s.step(opt)`) ``."""
    text = occurrence.event.describe()
    if occurrence.via:
        verb = "reads" if occurrence.kind is EventKind.GRADIENT_READ else "calls"
        return f"`{source_text(occurrence.call_site)}` (which {verb} {text})"
    return text


@dataclass(frozen=True)
class Flagged:
    """An example the rule must flag: its source, and the 1-based (line, column) of each finding."""

    source: str
    at: Tuple[Tuple[int, int], ...]


KINDS = ("effect", "control")
DEVICES = ("cpu", "cuda")


@dataclass(frozen=True)
class Prediction:
    """One claim the harness checks: what separates `buggy.py` from `fixed.py` in one scenario.

    `amplint verify` runs `fixtures/<CODE>/buggy.py` and `fixed.py` with `--scenario scenario`
    and an autocast dtype from `dtypes`; each prints `quantity`. The two values are combined
    as `compare` says (`buggy/fixed`, `fixed/buggy`, `buggy-fixed`, or the buggy run alone
    against a stated reference: `buggy`), and the claim holds when the result lies within
    `at_least`..`at_most`. `claim` is the sentence the rule's documentation quotes.

    `kind` says what a confirmation is evidence of. An `effect` claims the mistake does
    something (the update shrinks, the loss is NaN): it must fail when buggy.py is replaced by
    fixed.py (a test checks). A `control` claims that, in some regime, it makes no difference
    ("within 0.1% of the fixed run"): it holds by design when nothing differs, so it is
    reported apart ("22 controls held") and never counted as evidence of harm.

    `devices` and `dtypes` are what the claim is about: a run on another device or at another
    dtype skips it. Where a device's autocast differs (CUDA refuses `binary_cross_entropy`,
    runs softmax in float32), its behaviour is a claim of its own with its own `devices`.

    `expected` asserts the mechanism, not only the size: an arithmetic expression over the
    quantities both scripts report (`buggy.loss_scale * fixed.logged_grad_norm /
    fixed.max_norm`) giving what the mechanism predicts the comparison to be. The claim then
    bounds comparison / expected, so `[0.95, 1.05]` reads "what the docs' mechanism
    predicts, within 5%". `happened`, an expression of the same kind, must be positive
    before anything is compared: the evidence that the mechanism occurred at all (at least
    one overflow), so that nothing-against-nothing is never a match.
    """

    scenario: str
    quantity: str
    claim: str
    compare: str = "fixed/buggy"
    at_least: Optional[float] = None
    at_most: Optional[float] = None
    # The autocast dtypes the claim is about; a plain `amplint verify` runs the first.
    dtypes: Tuple[str, ...] = ("float16", "bfloat16")
    expected: Optional[str] = None
    kind: str = "effect"
    devices: Tuple[str, ...] = DEVICES
    happened: Optional[str] = None
    # The numbers the rule's "What goes wrong at runtime" quotes from this claim's measurements,
    # as (which, text): `("value", "65,000x")`, `("buggy", "6.7e-7")`, `("fixed", "0.044")`, or
    # `("within", "0.01%")` for a ratio that is 1 to within that. `value` is the bounded
    # comparison; the text is the number as written there, first in the text.
    # A test checks each against the last measurement, at every dtype the claim is about, so
    # the docs cannot drift from what `amplint verify` measures (amplint.harness.quotes).
    quotes: Tuple[Tuple[str, str], ...] = ()

    @property
    def dtype(self) -> str:
        return " or ".join(self.dtypes)

    @property
    def device(self) -> str:
        return " or ".join(self.devices)

    @property
    def is_control(self) -> bool:
        return self.kind == "control"


class Rule:
    code: ClassVar[str]
    name: ClassVar[str]
    # Words a file must contain for the rule to find anything in it: a file with none of
    # any selected rule's words is not parsed. The semantic layer's own vocabulary by
    # default; a test checks that no example or case the rule flags lacks them.
    triggers: ClassVar[Tuple[str, ...]] = AMP_VOCABULARY
    # And, if not empty, one of these too: a rule about float16 weights needs an optimizer or
    # an in-place average in the file as well, not only the word `float16` (which every
    # inference pipeline's docstring has).
    requires: ClassVar[Tuple[str, ...]] = ()
    # What the code must show besides (`amplint.lint.evidence`): one mark of each group. A file
    # whose words pass but whose CPython tree lacks a group is not parsed for this rule; the
    # same test checks that every example and case the rule flags has them.
    needs: ClassVar[Needs] = ()
    # Whether its findings come from the file's own code alone (no other module's summary
    # can add one): a file that only such rules match by words, and whose marks none of them
    # has, is skipped like a file without the words, not deferred (`amplint.project.link`).
    file_local: ClassVar[bool] = False
    # How output formats present the rule's findings: SARIF level, GitHub ::error/::warning,
    # LSP DiagnosticSeverity, GitLab severity. One of SEVERITIES.
    severity: ClassVar[str] = "error"
    VALID: ClassVar[Tuple[str, ...]] = ()
    INVALID: ClassVar[Tuple[Flagged, ...]] = ()
    PREDICTIONS: ClassVar[Tuple[Prediction, ...]] = ()

    def check(self, model: SemanticModel) -> Iterator[Report]:
        raise NotImplementedError

    # documentation, derived from the docstring
    @classmethod
    def documentation(cls) -> str:
        return textwrap.dedent(inspect.getdoc(cls) or "").strip()

    @classmethod
    def summary(cls) -> str:
        return cls.documentation().splitlines()[0].strip() if cls.documentation() else ""

    @classmethod
    def section(cls, title: str) -> Optional[str]:
        lines = cls.documentation().splitlines()
        try:
            start = lines.index(f"## {title}") + 1
        except ValueError:
            return None
        end = next((i for i in range(start, len(lines)) if lines[i].startswith("## ")), len(lines))
        return "\n".join(lines[start:end]).strip()

    @classmethod
    def fix_kind(cls) -> Optional[str]:
        """"safe" or "unsafe" when the rule has a fix, as its "Fix safety" section says; else None."""
        section = cls.section("Fix safety") or ""
        for kind in ("Safe", "Unsafe"):
            if section.startswith(kind):
                return kind.lower()
        return None

    @classmethod
    def url(cls) -> str:
        return DOCS_URL.format(code=cls.code.lower())

    @classmethod
    def page(cls) -> str:
        """The full page `amplint rule CODE` prints: docstring plus the harness's predictions."""
        fix = f"{cls.fix_kind()} fix" if cls.fix_kind() else "no fix"
        text = f"# {cls.code} {cls.name}\n\nSeverity: {cls.severity} · {fix}\n\n{cls.documentation()}"
        if cls.PREDICTIONS:
            claims = "\n".join(f"- {p.scenario} ({_scope(p)}): {p.claim}" for p in cls.PREDICTIONS)
            text += (
                "\n\n## Measured by `amplint verify`\n"
                f"`amplint verify {cls.code}` runs `fixtures/{cls.code}/buggy.py` against `fixed.py` and checks:\n"
                f"{claims}"
            )
        return text + "\n"


def _scope(prediction: Prediction) -> str:
    """`float16`, `float16, cuda only`, `bfloat16, control`: what a claim is about, as the docs list it."""
    parts = [prediction.dtype]
    if tuple(prediction.devices) != DEVICES:
        parts.append(f"{prediction.device} only")
    if prediction.is_control:
        parts.append("control")
    return ", ".join(parts)
