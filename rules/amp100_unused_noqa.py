from __future__ import annotations

from typing import Iterator

from amplint.lint.noqa import UNUSED_NOQA
from amplint.lint.rule import Flagged, Report, Rule
from amplint.semantic import SemanticModel


class UnusedNoqa(Rule):
    """A `# noqa` directive names an amplint code that suppressed nothing, or no amplint rule.

    ## What it does
    Flags `# noqa: AMPxxx` and `# amplint: noqa: AMPxxx` comments where a listed code
    suppressed no finding on that line (or, for a file-wide directive, in that file), and
    `AMPxxx` codes that are no amplint rule (`# noqa: AMP030`). A blanket `# amplint: noqa`
    that suppressed nothing is flagged too. Like ruff's `RUF100`, it runs after every other
    rule, and it judges only the codes whose rules ran on the file: a code that is not
    selected, or is ignored for the file, is left alone. Codes of other tools (`# noqa:
    E501`) and a plain `# noqa`, which flake8, ruff and pylint read as well, are never
    flagged. The finding is a warning, and only a directive that names `AMP100` suppresses
    it (`# noqa: AMP003, AMP100`).

    ## Why is this bad?
    A stale suppression hides the next real mistake on its line: once the code is fixed,
    the comment is dead, and the AMP bug someone reintroduces there later goes unreported.
    An unknown code (a typo such as `AMP03`) suppresses nothing, so the finding it was meant
    to silence is still reported and the comment only misleads the reader.

    ## What goes wrong at runtime
    Nothing: a comment never changes what runs. The cost is the next AMP mistake on that
    line, which amplint will not report.

    ## Example
    ```python
    scaler.unscale_(optimizer)
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)  # noqa: AMP003
    ```

    ## Use instead
    ```python
    scaler.unscale_(optimizer)
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    ```

    ## Fix safety
    Safe (as ruff's `RUF100`): the fix takes the unused and unknown `AMPxxx` codes out of the
    directive (`# noqa: AMP003, E501` becomes `# noqa: E501`), or removes the whole directive
    when it names nothing else; a line that held only the directive goes, and any other text
    of the comment stays a comment. A comment never changes what runs, and only codes that
    suppressed nothing are taken out, so no finding appears or disappears. `--fix` applies it
    last, to the fixed file: a directive that another fix left with nothing to suppress is
    removed in the same run.
    """

    code = UNUSED_NOQA
    name = "unused-noqa"
    severity = "warning"
    # Read from comments, not the tree: the engine never parses a file for this check alone.
    triggers = ("noqa", "NOQA")

    def check(self, model: SemanticModel) -> Iterator[Report]:
        # The engine runs this check after the other rules (amplint.lint.noqa.unused_directives):
        # which directives they used is known only once their findings are placed.
        return iter(())

    VALID = (
        # The directive suppresses a real finding.
        """
import torch
with torch.autocast("cuda", dtype=torch.bfloat16):
    loss = model(x).sum()
    loss.backward()  # noqa: AMP006
""",
        # Other tools' codes and a plain `# noqa` are theirs.
        """
import torch
x = torch.ones(3)  # noqa: E501
y = torch.zeros(3)  # noqa
""",
        # A `# noqa` inside a string is not a comment.
        """
s = "# noqa: AMP003"
""",
    )

    INVALID = (
        Flagged(
            """
import torch
loss.backward()  # noqa: AMP030
""",
            at=((3, 18),),
        ),
    )
