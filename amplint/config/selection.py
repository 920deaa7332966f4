"""Which rules run: ruff-style selectors (`ALL`, `AMP`, `AMP00`, `AMP003`) resolved by specificity."""

from __future__ import annotations

from typing import TYPE_CHECKING, Iterable, List, Sequence, Tuple, Type

if TYPE_CHECKING:  # the selection needs codes only: it also runs on amplint.lint.catalogue's entries
    from amplint.lint.rule import Rule


class SelectionError(ValueError):
    pass


def _matches(selector: str, code: str) -> bool:
    return selector == "ALL" or code.startswith(selector)


def validate(selectors: Iterable[str], rules: Sequence[Type[Rule]]) -> List[str]:
    cleaned = []
    for raw in selectors:
        selector = raw.strip().upper()
        if not selector:
            continue
        if selector != "ALL" and not any(rule.code.startswith(selector) for rule in rules):
            known = ", ".join(rule.code for rule in rules)
            raise SelectionError(f"unknown rule selector `{raw.strip()}` (rules: {known}; prefixes and ALL also work)")
        cleaned.append(selector)
    return cleaned


def require_some(selectors: Sequence[str], source: str) -> None:
    """Refuse a selection that names no rule (`--select ""`, `--select ,`, `select = []`):
    it would turn every rule off, and `--select "$RULES"` with the variable unset must not
    switch a CI gate off. An empty --extend-select or --ignore changes nothing, and is allowed."""
    if not any(selector.strip() for selector in selectors):
        raise SelectionError(
            f"{source} names no rule; an empty selection would turn every rule off "
            "(name rule codes, prefixes or ALL, or leave it out for the default)"
        )


def resolve(
    rules: Sequence[Type[Rule]],
    select: Sequence[str],
    extend_select: Sequence[str] = (),
    ignore: Sequence[str] = (),
) -> Tuple[Type[Rule], ...]:
    """Enabled rules. For each rule the most specific matching selector decides, as in ruff:
    `--select AMP --ignore AMP003` drops AMP003, `--select AMP003 --ignore AMP` keeps it;
    at equal specificity `ignore` wins."""
    chosen = []
    for rule in rules:
        best_length, enabled = -1, False
        for selectors, verdict in ((list(select) + list(extend_select), True), (ignore, False)):
            for selector in selectors:
                if _matches(selector, rule.code):
                    length = 0 if selector == "ALL" else len(selector)
                    if length > best_length or (length == best_length and not verdict):
                        best_length, enabled = length, verdict
        if enabled:
            chosen.append(rule)
    return tuple(chosen)
