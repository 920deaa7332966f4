"""The layers of the package, checked on its import graph (every import, also those inside
functions; those under `if TYPE_CHECKING:` too where a test says so).

- A rule imports only the rule surface that rules/README.md lists: `amplint.lint.rule`, the
  names in `amplint.semantic.__all__`, `amplint.analyses.*`, `amplint.semantic.pytorch.*`,
  `amplint.lint.evidence`, `amplint.lint.fix`, `amplint.lint.noqa`.
- The semantic core imports nothing of amplint outside itself (not the fixes, the CLI, the
  output, the LSP server, the driver, the analyses or the project layer built on it) but the
  leaves: modules that import nothing of amplint themselves (the work meter, text escaping,
  import paths).
- Outside the core, the core is imported only through its public surface: the package
  `amplint.semantic` (its `__all__`) and PyTorch's data (`amplint.semantic.pytorch`).
- An analysis imports the core and other analyses only.
- No import cycle anywhere in the package, and none in the core even counting type-only
  imports: nothing the model is built from takes the model back.
- `SemanticModel` keeps general queries (an allow-list, each with two or more clients).
- No module of the core or the analyses is over 800 lines; at most a dozen modules sit at the
  top of `amplint/`, the rest in the pipeline's packages.
"""

import ast
import os
import re
from typing import Dict, List, Set

import pytest

import amplint.semantic

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# Where each top-level package's files are: rules/ ships as `amplint.rules` (pyproject.toml).
PACKAGES = {"amplint": os.path.join(ROOT, "amplint"), "amplint.rules": os.path.join(ROOT, "rules")}

# What a rule may import, as rules/README.md lists it: modules, and packages whose every
# module is open to rules.
RULE_MODULES = ("amplint.lint.rule", "amplint.semantic", "amplint.lint.evidence", "amplint.lint.fix", "amplint.lint.noqa")
RULE_PACKAGES = ("amplint.analyses", "amplint.semantic.pytorch")
# Leaves: they import nothing of amplint, so any layer may use them.
LEAVES = ("amplint.work", "amplint.escape", "amplint.project.import_paths", "amplint.project.summary_reads")



def _modules() -> Dict[str, str]:
    """Every module of the package: dotted name -> file."""
    found: Dict[str, str] = {}
    for package, directory in PACKAGES.items():
        for folder, subfolders, files in os.walk(directory):
            subfolders[:] = sorted(d for d in subfolders if os.path.exists(os.path.join(folder, d, "__init__.py")))
            relative = os.path.relpath(folder, directory)
            prefix = package if relative == "." else package + "." + relative.replace(os.sep, ".")
            if package == "amplint" and prefix.startswith("amplint.rules"):
                continue
            for name in files:
                if name.endswith(".py"):
                    module = prefix if name == "__init__.py" else f"{prefix}.{name[:-3]}"
                    found[module] = os.path.join(folder, name)
    return found


MODULES = _modules()


def _type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(module: str) -> List[ast.stmt]:
    """The import statements of `module` that can run: at any depth, not under TYPE_CHECKING."""
    with open(MODULES[module], encoding="utf-8") as handle:
        tree = ast.parse(handle.read())
    found: List[ast.stmt] = []
    pending: List[ast.AST] = [tree]
    while pending:
        node = pending.pop()
        if isinstance(node, ast.If) and _type_checking(node.test):
            pending.extend(node.orelse)
            continue
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            found.append(node)
        pending.extend(ast.iter_child_nodes(node))
    return found


def _targets(module: str, statement: ast.stmt) -> List[tuple]:
    """(module imported, name taken from it or None) for each amplint module `statement` imports."""
    if isinstance(statement, ast.Import):
        return [(alias.name, None) for alias in statement.names if alias.name in MODULES]
    assert isinstance(statement, ast.ImportFrom)
    base = statement.module or ""
    if statement.level:
        package = module if MODULES[module].endswith("__init__.py") else module.rsplit(".", 1)[0]
        for _ in range(statement.level - 1):
            package = package.rsplit(".", 1)[0]
        base = f"{package}.{base}" if base else package
    found = []
    for alias in statement.names:
        submodule = f"{base}.{alias.name}"
        if submodule in MODULES:
            found.append((submodule, None))  # `from amplint.semantic.pytorch import api`
        elif base in MODULES:
            found.append((base, alias.name))
    return found


def _graph() -> Dict[str, Set[str]]:
    return {m: {target for s in _imports(m) for target, _ in _targets(m, s)} for m in MODULES}


GRAPH = _graph()


def test_the_walk_sees_the_package():
    assert {"amplint.semantic.model", "amplint.analyses.checkpoints", "amplint.rules.amp001_unscaled_backward"} <= set(MODULES)
    assert "amplint.semantic.flow" in GRAPH["amplint.semantic.model"]
    assert "amplint.semantic.pytorch.api" in GRAPH["amplint.semantic.calls"]  # `from ... import api as torch_api`


@pytest.mark.parametrize("module", sorted(m for m in MODULES if m.startswith("amplint.rules.")))
def test_a_rule_imports_only_the_rule_surface(module):
    for statement in _imports(module):
        for target, name in _targets(module, statement):
            if target.startswith("amplint.rules."):
                continue  # a rule's own helpers module, if it has one
            allowed = target in RULE_MODULES or any(target.startswith(p + ".") or target == p for p in RULE_PACKAGES)
            assert allowed, f"{module} imports {target}: not on the rule surface (rules/README.md)"
            if target == "amplint.semantic" and name is not None:
                assert name in amplint.semantic.__all__, f"{module} imports {name}, not in amplint.semantic.__all__"


def test_rules_readme_lists_the_rule_surface():
    with open(os.path.join(ROOT, "rules", "README.md"), encoding="utf-8") as handle:
        text = handle.read()
    for name in RULE_MODULES + RULE_PACKAGES:
        assert f"`{name}" in text, f"rules/README.md does not list {name}"


@pytest.mark.parametrize("module", sorted(m for m in MODULES if m == "amplint.semantic" or m.startswith("amplint.semantic.")))
def test_the_semantic_core_imports_only_itself(module):
    outside = sorted(
        t for t in GRAPH[module] if t != "amplint.semantic" and not t.startswith("amplint.semantic.") and t not in LEAVES
    )
    assert outside == [], f"{module} imports {outside}"


@pytest.mark.parametrize("module", LEAVES)
def test_a_leaf_imports_nothing_of_amplint(module):
    assert GRAPH[module] == set(), f"{module} imports {sorted(GRAPH[module])}"


@pytest.mark.parametrize("module", sorted(m for m in MODULES if m.startswith("amplint.analyses")))
def test_an_analysis_imports_only_the_core_and_other_analyses(module):
    outside = sorted(t for t in GRAPH[module] if not t.startswith(("amplint.semantic", "amplint.analyses")) and t not in LEAVES)
    assert outside == [], f"{module} imports {outside}"


def _cycles(graph: Dict[str, Set[str]]) -> List[Set[str]]:
    """The strongly connected components of more than one module (Tarjan, iteratively)."""
    index: Dict[str, int] = {}
    low: Dict[str, int] = {}
    stack: List[str] = []
    on_stack: Set[str] = set()
    found: List[Set[str]] = []
    counter = 0
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = set()
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.add(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(component)
    return found


def test_the_cycle_finder_finds_cycles():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [{"a", "b", "c"}]
    assert _cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_cycle_in_the_package():
    cycles = [sorted(c) for c in _cycles(GRAPH)]
    assert cycles == []


# --------------------------------------------------------------------------- the core's boundary


def _all_imports(module: str) -> List[ast.stmt]:
    """Every import statement of `module`, those under `if TYPE_CHECKING:` too."""
    with open(MODULES[module], encoding="utf-8") as handle:
        tree = ast.parse(handle.read())
    return [node for node in ast.walk(tree) if isinstance(node, (ast.Import, ast.ImportFrom))]


TYPED_GRAPH = {m: {target for s in _all_imports(m) for target, _ in _targets(m, s)} for m in MODULES}
# Type-only circles left, each a pair of one concern split in two (what a run produces and a
# notebook's cells). A new one is a design cycle: a part that takes its caller back.
TYPE_ONLY_CIRCLES = [["amplint.lint.diagnostics", "amplint.run.notebook"]]


def test_no_circle_in_the_package_even_counting_type_only_imports():
    cycles = sorted(sorted(c) for c in _cycles(TYPED_GRAPH))
    assert cycles == TYPE_ONLY_CIRCLES
    assert not any(m.startswith("amplint.semantic") for cycle in cycles for m in cycle)


def _core(module: str) -> bool:
    return module == "amplint.semantic" or module.startswith("amplint.semantic.")


def _data(module: str) -> bool:
    return module == "amplint.semantic.pytorch" or module.startswith("amplint.semantic.pytorch.")


@pytest.mark.parametrize("module", sorted(m for m in MODULES if not _core(m)))
def test_outside_the_core_only_its_public_surface_is_imported(module):
    """Rules, analyses, the project layer, the engine: the core's names come from the package
    (`amplint.semantic.__all__`), PyTorch's data from `amplint.semantic.pytorch`; never from a
    module of the core, so that the core's parts can change behind it."""
    for statement in _all_imports(module):
        for target, name in _targets(module, statement):
            if not _core(target) or _data(target):
                continue
            assert target == "amplint.semantic", f"{module} imports {target}: import it from amplint.semantic"
            assert name in amplint.semantic.__all__, f"{module} imports {name}, not in amplint.semantic.__all__"


# The public members of `SemanticModel`: general queries, each with two or more clients
# (rules, analyses, the summary writer). A query only one rule needs belongs to that rule, a
# fact family's to its `Analysis` (rules/README.md).
MODEL_QUERIES = {
    "assumptions", "autocast_regions", "call_record", "classify", "exit_states",
    "exported_facts", "facts", "float16_possible", "following", "grad_scalers_built", "identity",
    "is_live", "occurrences_in", "ordered", "plain_grad_scaler", "qualified", "scaler_name",
    "skipped_units", "spelling_in", "states_before", "statement_of", "units", "values",
}
# What it is built from, for the analyses that compute their facts from the same parts.
MODEL_PARTS = {
    "branches", "classifier", "external", "flow", "index", "module", "regions", "resolver", "scaler_facts",
    "scalers", "torch_target",
}


def test_the_semantic_model_keeps_general_queries_only():
    from amplint.semantic.model import SemanticModel

    public = {name for name in vars(SemanticModel) if not name.startswith("_")}
    assert public == MODEL_QUERIES
    assert len(MODEL_QUERIES) <= 25
    with open(MODULES["amplint.semantic.model"], encoding="utf-8") as handle:
        init = next(
            node for node in ast.walk(ast.parse(handle.read())) if isinstance(node, ast.FunctionDef) and node.name == "__init__" and node.args.args[1].arg == "module"
        )
    parts = {
        target.attr
        for node in ast.walk(init)
        if isinstance(node, (ast.Assign, ast.AnnAssign))
        for target in (node.targets if isinstance(node, ast.Assign) else [node.target])
        if isinstance(target, ast.Attribute) and not target.attr.startswith("_")
    }
    assert parts == MODEL_PARTS


# General queries with one client so far, and why they are the model's: what the engine
# reports of every file, and the stable order of what a unit's flow exits with, which any
# fact read off exit states needs for the same input to give the same output.
ONE_CLIENT = {"skipped_units", "exit_states", "ordered"}


@pytest.mark.parametrize("query", sorted(MODEL_QUERIES - {"facts"}))
def test_every_model_query_has_two_clients(query):
    """Clients: the modules outside the model that call it (a rule, an analysis, the summary
    writer, the engine, a fix). A query no one calls goes; one a single client calls belongs to
    that client, unless `ONE_CLIENT` says why not."""
    pattern = re.compile(r"\bmodel\.%s\b" % query)
    clients = set()
    for module, path in MODULES.items():
        if module == "amplint.semantic.model":
            continue
        with open(path, encoding="utf-8") as handle:
            if pattern.search(handle.read()):
                clients.add(module)
    assert len(clients) >= (1 if query in ONE_CLIENT else 2), f"model.{query} is used by {sorted(clients)} only"


LARGEST = 800  # lines: a module of the core or of the analyses past this is two topics


@pytest.mark.parametrize("module", sorted(m for m in MODULES if m.startswith(("amplint.semantic", "amplint.analyses"))))
def test_no_module_of_the_core_or_the_analyses_is_two_topics(module):
    with open(MODULES[module], encoding="utf-8") as handle:
        lines = sum(1 for _ in handle)
    assert lines <= LARGEST, f"{module} has {lines} lines: split it along its topics"


def test_the_top_level_shows_the_pipeline():
    """At most a dozen modules at the top of `amplint/`; everything else in the packages that
    are the pipeline's stages (docs/how-it-works.md draws them)."""
    top = sorted(m for m in MODULES if m.count(".") == 1 and not MODULES[m].endswith("__init__.py"))
    assert len(top) <= 12, top
    packages = sorted(m.split(".")[1] for m in MODULES if m.count(".") == 1 and MODULES[m].endswith("__init__.py"))
    assert packages == ["analyses", "config", "harness", "lint", "lsp", "output", "project", "rules", "run", "semantic"]
