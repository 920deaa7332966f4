"""Two reads of a module's summary (plain JSON), shared by the analysis that asks them of an
imported module (`amplint.semantic.foreign.ExternalModules`) and the second phase that
compares their answers in two sets of summaries (`amplint.project.link`), so that both read
a summary alike.

A leaf (it imports nothing of amplint), like `import_paths`: a warm run compares without
importing LibCST and the semantic core.
"""

from __future__ import annotations

from typing import Any, Dict, Mapping

# Where a summary lists its classes and functions by name.
_LISTING = ("classes", "functions", "state")


def class_methods(summary: Mapping[str, Any], cls: str) -> Dict[str, Any]:
    """The methods of the class `cls` a summary exports: method name -> its function, as
    exported (`Base.fit`, not `Base.fit.inner`), in the summary's order."""
    prefix = cls + "."
    functions = summary.get("functions")
    if not isinstance(functions, Mapping):
        return {}
    return {qualified[len(prefix) :]: function for qualified, function in functions.items() if qualified.startswith(prefix) and "." not in qualified[len(prefix) :]}


def lists_name(summary: Mapping[str, Any], name: str) -> bool:
    """Whether a summary lists the class or function `name` (among its classes, functions or
    state table)."""
    return any(isinstance(summary.get(table), Mapping) and name in summary[table] for table in _LISTING)
