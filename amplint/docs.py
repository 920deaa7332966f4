"""Documentation generated from rule metadata: the README's rule table and docs/rules.md.

`python -m amplint.docs` rewrites docs/rules.md and the README table; a test fails when
either drifts from the rules.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Sequence, Type

from amplint.lint.rule import Rule
from amplint.rules import ALL_RULES

TABLE_START = "<!-- rules-table:start -->"
TABLE_END = "<!-- rules-table:end -->"


def rules_table(rules: Sequence[Type[Rule]] = ALL_RULES) -> str:
    lines = ["| Code | Name | What it catches | Severity | Fix |", "| --- | --- | --- | --- | --- |"]
    for rule in rules:
        lines.append(
            f"| [{rule.code}](docs/rules.md#{rule.code.lower()}) | `{rule.name}` | {rule.summary()} | "
            f"{rule.severity} | {rule.fix_kind() or '–'} |"
        )
    return "\n".join(lines)


def rules_page(rules: Sequence[Type[Rule]] = ALL_RULES) -> str:
    parts = ["# amplint rules", "", "Generated from the rule modules by `python -m amplint.docs`; do not edit by hand.", ""]
    for rule in rules:
        page = rule.page().replace("\n## ", "\n### ").replace(f"# {rule.code}", f"## {rule.code}", 1)
        parts.append(f'<a id="{rule.code.lower()}"></a>\n\n{page}')
    return "\n".join(parts)


def with_table(readme: str) -> str:
    pattern = re.compile(re.escape(TABLE_START) + ".*?" + re.escape(TABLE_END), re.S)
    return pattern.sub(lambda _: f"{TABLE_START}\n{rules_table()}\n{TABLE_END}", readme)


def main(argv: Sequence[str] = ()) -> int:
    root = Path(argv[0]) if argv else Path.cwd()
    (root / "docs").mkdir(exist_ok=True)
    (root / "docs" / "rules.md").write_text(rules_page())
    readme = root / "README.md"
    readme.write_text(with_table(readme.read_text()))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
