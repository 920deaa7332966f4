"""Lint one file's contents: syntax verdict, cheap pre-check, one parse, one semantic model, every rule.

A notebook's code cells are joined into one source first (amplint.run.notebook), and its findings
are mapped back to cells.

Nothing here imports torch or runs the linted code. A file that fails (syntax error, a bug in
a rule) becomes a per-file error; the caller carries on with the next file.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Dict, FrozenSet, Iterable, Iterator, List, Optional, Sequence, Tuple, Type

import libcst as cst

from amplint.lint import evidence, reparse
from amplint import work
from amplint.lint.catalogue import import_words, might_use_amp, rules_matching_words  # noqa: F401 (the text pre-check; `might_use_amp` for callers)
from amplint.lint.diagnostics import FileError, FileResult, Finding, FixSuggestion, NotAnalysed
from amplint.lint.fix import SAFE, Suggestions
from amplint.lint.noqa import UNUSED_NOQA, might_have_reportable_directives, parse_suppressions, unused_directives, unused_edit
from amplint.run.notebook import CellMap, is_notebook, parse_notebook
from amplint.lint.parse_guard import parse_hazard
from amplint.lint.positions import code_ranges
from amplint.lint.rule import Report, Rule
from amplint.project.ambient import facts as ambient_facts, hazard_rows, hazards_of, names_a_hazard
from amplint.project.summary import export_summary
from amplint.semantic import (
    CodeUnit,
    ExternalModules,
    LookupRecorder,
    SemanticModel,
    analyze,
    imports_of,
    remembered_children,
)
from amplint.run.source import decode_notebook, decode_python, size_error
from amplint.lint.syntax import PythonVersion, parse_module_exactly, python_tree, quiet_collector, recursion_room, syntax_error, where
from amplint.config.torch_target import TorchVersion


def lint_bytes(
    data: bytes,
    path: str,
    rules: Sequence[Type[Rule]],
    external: Optional[ExternalModules] = None,
    target: Optional[PythonVersion] = None,
    whole: bool = False,
    analysis_limit: Optional[float] = 1.0,
    torch_target: Optional[TorchVersion] = None,
    summary: bool = True,
    every_syntax: bool = False,
    hazards: bool = False,
) -> FileResult:
    """Lint a file's contents, read from disk or standard input: a notebook, or Python source.
    `external`: summaries of the other linted modules it may import (see `amplint.project.link`).
    `target`: the Python the project runs on, whose grammar decides what is a syntax error
    (None: the newest grammar amplint knows). `whole`: analysed even where the code alone
    gives no rule what it needs (the second phase of a run: another module decides).
    `analysis_limit`: the factor on the work limits of `amplint.work` (None: no file limit).
    `torch_target`: the oldest torch the project supports (None: `torch_target.ASSUMED`); a
    fix that needs a newer one is unsafe. `summary`: export the module's summary for the files
    that import it (a run's second phase needs it; the editor, linting one file, does not).
    `every_syntax`: a syntax error is reported for a file the engine does not analyse too (by
    default only for those it analyses: the files with some rule's words). `hazards`: work
    out the float16 hazards of its functions for the ambient pass now (a file the way from a
    region in another file reaches: `amplint.project.ambient`); without, its facts say they
    are to come, unless a `# noqa` names one."""
    if is_notebook(path):
        return _lint_notebook(data, path, rules, external, target, whole, analysis_limit, torch_target, summary, every_syntax, hazards)
    source = decode_python(data, path)
    if isinstance(source, FileError):
        return FileResult(path, error=source)
    return lint_source(source, path, rules, external=external, target=target, whole=whole, analysis_limit=analysis_limit, torch_target=torch_target, summary=summary, every_syntax=every_syntax, hazards=hazards)


def _lint_notebook(
    data: bytes,
    path: str,
    rules: Sequence[Type[Rule]],
    external: Optional[ExternalModules],
    target: Optional[PythonVersion],
    whole: bool,
    analysis_limit: Optional[float] = 1.0,
    torch_target: Optional[TorchVersion] = None,
    summary: bool = True,
    every_syntax: bool = False,
    hazards: bool = False,
) -> FileResult:
    text = decode_notebook(data, path)
    notebook = parse_notebook(text, path) if isinstance(text, str) else text
    if isinstance(notebook, FileError):
        return FileResult(path, error=notebook)
    if notebook is None:  # an R or Julia notebook
        return FileResult(path, skipped=True)
    too_large = size_error(path, len(notebook.python.encode("utf-8")), what="code in notebook")
    if too_large:
        return FileResult(path, error=too_large)
    result = lint_source(notebook.python, path, rules, notebook.cells, external, target, whole, analysis_limit, torch_target, summary=summary, every_syntax=every_syntax, hazards=hazards)
    result.skipped_functions = [
        replace(s, file_row=notebook.file_span(s.row, s.column, s.row, s.column)[0]) for s in result.skipped_functions
    ]
    if result.findings:
        # Frames show the cells as written (`%time`, not the `pass` that was parsed).
        result.source = notebook.display
        result.cells = notebook.cells
        result.findings = [_in_cell_columns(f, notebook.cells) for f in result.findings]
        result.findings = [
            replace(f, file_span=notebook.file_span(f.row, f.column, f.end_row, f.end_column))
            for f in result.findings
        ]
    return result


def _in_cell_columns(finding: Finding, cells: CellMap) -> Finding:
    """Columns as the cell is written, where it was parsed dedented."""
    cell = cells.cell_at(finding.row)
    if cell is None or not cell.indent:
        return finding
    end_shift = cell.indent if finding.end_row <= cell.last_row else 0
    return replace(finding, column=finding.column + cell.indent, end_column=finding.end_column + end_shift)


def lint_source(
    source: str,
    path: str,
    rules: Sequence[Type[Rule]],
    cells: Optional[CellMap] = None,
    external: Optional[ExternalModules] = None,
    target: Optional[PythonVersion] = None,
    whole: bool = False,
    analysis_limit: Optional[float] = 1.0,
    torch_target: Optional[TorchVersion] = None,
    summary: bool = True,
    every_syntax: bool = False,
    hazards: bool = False,
) -> FileResult:
    """Lint Python source; `cells` when it is a notebook's joined code cells.

    The work is counted (`amplint.work`): past the file's limit times `analysis_limit` (None:
    no file limit) the file is not linted, whatever the machine and its load.

    The cyclic collector is paused meanwhile: its passes would walk every node of the trees
    again and again (a fifth of the analysis time), and the trees hold no cycles, so they
    are freed as soon as the file is done; the little the analysis leaves in cycles is
    collected with the next young generation, once the trees are gone. The walks over the
    trees remember each node's children meanwhile (`amplint.semantic.walk`)."""
    with recursion_room(), quiet_collector(), remembered_children():
        try:
            with work.metered(analysis_limit):
                return _lint_source(source, path, rules, cells, external, target, whole, torch_target, summary, every_syntax, hazards)
        except work.WorkLimitExceeded:
            return FileResult(path, error=FileError(path, work.limit_message(analysis_limit or 1.0)))


def _lint_source(
    source: str,
    path: str,
    rules: Sequence[Type[Rule]],
    cells: Optional[CellMap],
    external: Optional[ExternalModules] = None,
    target: Optional[PythonVersion] = None,
    whole: bool = False,
    torch_target: Optional[TorchVersion] = None,
    summary: bool = True,
    every_syntax: bool = False,
    hazards: bool = False,
) -> FileResult:
    result = FileResult(path)
    # The unused-noqa check reads comments, never the tree: it alone is no reason to parse.
    parsing_rules = [rule for rule in rules if rule.code != UNUSED_NOQA]
    # The words of the code it runs in other linted modules count too (their summaries' calls).
    matching = rules_matching_words(source if external is None else source + external.words(), parsing_rules)
    # A file with the words is read from CPython's tree, so its syntax verdict comes with it; a
    # file without them can hold no finding, and its syntax errors are the project's own
    # linter's (`every_syntax` asks for them too: the verdict alone, amplint.lint.syntax). A
    # file linted whole without them (a helper module another module imports:
    # amplint.project.link) is analysed for its summary alone: no rule runs on it.
    if not matching and not whole and len(parsing_rules) < len(rules) and names_a_hazard(source):
        whole = True  # its `# noqa: AMP020` is used if a region in another file reaches the line
    if matching or whole:
        tree, result.error = python_tree(source, path, target, cells)
    else:
        tree, result.error = None, syntax_error(source, path, target, cells) if every_syntax else None
    if not matching and whole:
        parsing_rules = []
    found: Optional[FrozenSet[str]] = None  # the code's marks, where the pre-check reads them
    if not matching and not whole:
        result.skipped = True  # not worth a LibCST parse: no rule can match
        result.import_words = import_words(source)
    elif result.error is None and not whole and external is None and tree is not None:
        # The words are there; does the code have what some rule needs (amplint.lint.evidence)?
        # Only the rules that can match run; with none, the file is not parsed unless
        # another module's code decides (amplint.project.link).
        found = evidence.marks(tree)
        parsing_rules = [rule for rule in matching if evidence.satisfied(rule.needs, found)]
        if not parsing_rules and all(rule.file_local for rule in matching):
            result.skipped = True  # no other module's code can give these rules what it lacks
            result.import_words = import_words(source)
        elif not parsing_rules:
            result.skipped = result.deferred = True
            result.imports = evidence.imports(tree)
            result.may_export = bool(found & evidence.EXPORTS)
    cpython_accepts = tree is not None
    # A float16 hazard needs a product and a fill, clamp, epsilon or write (evidence.FLOAT16_HAZARD):
    # without one, the file has none to export for other files' regions. With one, they are
    # worked out where a region's way is known to reach the file (`hazards`: most files
    # never run under another file's autocast), or where a `# noqa` names one (whether it
    # suppresses something is theirs to say); elsewhere the facts say they are to come.
    may_hazard = tree is not None and summary and evidence.FLOAT16_HAZARD in (found if found is not None else evidence.marks(tree))
    later = may_hazard and not hazards and not names_a_hazard(source)
    # In the editor's workers, the statements of the pieces parsed before are kept (amplint.lint.reparse):
    # the file is cut into pieces where it is to be parsed.
    kept = reparse.active()
    to_parse = tree is not None and not result.skipped and result.error is None
    texts = reparse.pieces(source, tree) if kept is not None and to_parse else None
    del tree  # not kept through LibCST's parse
    if result.skipped:
        return _nothing_to_find(result, source, cells, rules)
    if result.error is not None:
        return result
    hazard = parse_hazard(source)
    if hazard is not None:  # LibCST would take minutes or crash on it
        result.error = FileError(path, hazard.message(where(hazard.row, hazard.column, cells)), hazard.row, hazard.column)
        return result
    # LibCST's native parse cannot be counted from inside: it is charged by its size first.
    work.charge(len(source) // work.PARSE_CHARACTERS_PER_STEP)
    try:
        module = kept.parse(texts) if kept is not None and texts is not None else None
        exact = module is not None
        if module is None:
            module, exact = parse_module_exactly(source, cpython_accepts=cpython_accepts)
    except RecursionError:
        result.error = FileError(path, "could not parse: nesting too deep")
        return result
    if isinstance(module, cst.ParserSyntaxError):
        # Python accepts the file (the verdict above), LibCST does not even after
        # normalising it: say so rather than call valid code a syntax error.
        result.error = FileError(
            path,
            f"could not analyse: LibCST cannot parse this valid Python "
            f"(at {where(module.raw_line, module.raw_column + 1, cells)}: {module.message.splitlines()[0]})",
        )
        return result
    # What the analysis looks up in other modules' summaries is noted: linted again with
    # summaries that answer each lookup as these did, the file has this same result (not for a
    # lint that exports no summary: no second phase follows it).
    recorder = LookupRecorder(path, None if external is None else external.summaries) if summary else None
    try:
        model = analyze(module, external if recorder is None else recorder, torch_target)
        reports = run_rules(model, parsing_rules)
        # Fixes are shown only for a tree of the file as written (a normalised one cannot be written back).
        # What other files' regions may report here (hazards of model code: amplint.project.ambient)
        # is not what a `# noqa` on its line would suppress in vain.
        found_hazards = hazards_of(model) if may_hazard and not later else {}
        result.findings = _locate(module, reports, path, source, cells, rules=rules, fixes=exact, latent=hazard_rows(found_hazards))
        result.summary = export_summary(model, path) if summary else None
        result.ambient = ambient_facts(model, module, source if exact else None, found_hazards, later) if summary else None
        result.imports = imports_of(model.index)
        if recorder is not None:
            if result.imports:
                for record in model.index.calls:  # the calls no rule asked about, too
                    model.classify(record)
            result.lookups = tuple(sorted(recorder.lookups, key=repr))
        result.skipped_functions = _not_analysed(module, model.skipped_units, path, cells, source if exact else None)
        if result.findings:
            result.source = source
    except RecursionError:
        result.error = FileError(path, "could not analyse: nesting too deep")
    return result


def _not_analysed(module: cst.Module, units: Sequence[CodeUnit], path: str, cells: Optional[CellMap], source: Optional[str] = None) -> List[NotAnalysed]:
    """Where the functions too complex to follow are: the line and column of their name."""
    names = {id(unit): unit.node.name for unit in units if isinstance(unit.node, cst.FunctionDef)}
    positions = code_ranges(module, names.values(), source) if names else {}
    found = []
    for unit in units:
        name = names.get(id(unit))
        start = positions[name].start if name is not None and name in positions else None
        row, column = (start.line, start.column + 1) if start is not None else (1, 1)
        cell, cell_row = cells.locate(row) if cells is not None else (None, None)
        found.append(NotAnalysed(path, row, column, unit.name if name is not None else "<module>", cell, cell_row))
    return sorted(found)


def _nothing_to_find(result: FileResult, source: str, cells: Optional[CellMap], rules: Sequence[Type[Rule]]) -> FileResult:
    if result.error is None and rules:
        # No rule can fire here, so an `AMPxxx` in a `# noqa` suppresses nothing.
        result.findings = _locate(None, [], path=result.path, source=source, cells=cells, rules=rules)
        result.source = source if result.findings else None
    return result


def run_rules(model: SemanticModel, rules: Sequence[Type[Rule]]) -> List[Tuple[Type[Rule], cst.CSTNode, Report]]:
    """Each rule's reports, one per node; and one per mistake: a report at a call that leads
    to an event (`Report.occurrence`) stands only where no report of the same rule is nearer
    the event: on the event itself, or through fewer helper calls. A caller whose own code
    makes the event a mistake (the call inside its autocast region) keeps its finding."""
    seen: Dict[Tuple[str, int], bool] = {}
    reports = []
    nearest: Dict[Tuple[str, int], int] = {}  # (code, event node) -> fewest helper calls to it
    for rule in rules:
        for report in rule().check(model):
            key = (rule.code, id(report.node))
            if key not in seen:  # one node reached by many paths is one finding
                seen[key] = True
                reports.append((rule, report.node, report))
                event = report.occurrence.node if report.occurrence is not None else report.node
                depth = len(report.occurrence.via) if report.occurrence is not None else 0
                nearest[(rule.code, id(event))] = min(depth, nearest.get((rule.code, id(event)), depth))
    return [
        (rule, node, report)
        for rule, node, report in reports
        if report.occurrence is None
        or len(report.occurrence.via) <= nearest[(rule.code, id(report.occurrence.node))]
    ]


def _locate(
    module: Optional[cst.Module],
    reports: Iterable[Tuple[Type[Rule], cst.CSTNode, Report]],
    path: str,
    source: str,
    cells: Optional[CellMap] = None,
    rules: Sequence[Type[Rule]] = (),
    fixes: bool = True,
    latent: Sequence[Tuple[str, int]] = (),
) -> List[Finding]:
    reports = list(reports)
    unused_noqa = next((rule for rule in rules if rule.code == UNUSED_NOQA), None)
    if not reports and (unused_noqa is None or not might_have_reportable_directives(source)):
        return []
    suppressions = parse_suppressions(source)
    findings = []
    if reports:
        assert module is not None
        # Positions only for files with findings, and only of the nodes that are shown: the
        # reported ones, and what fix suggestions read (the statements they rewrite).
        printed: Dict[int, str] = {}  # the code of the statements printed: what suggestions compare with
        positions = code_ranges(module, _shown(module, reports, fixes), source if fixes else None, printed)
        suggest = Suggestions(module, positions, printed)
        for rule, node, report in reports:
            span = positions[node]
            row, column = span.start.line, span.start.column + 1
            if suppressions.suppresses(row, rule.code):
                continue
            where = (row, column, span.end.line, span.end.column + 1)
            finding = _finding(rule, path, where, str(report.message), report.help, cells)
            if report.fix is not None and fixes:
                finding = replace(finding, fix=suggest(report.fix))
            findings.append(finding)
    for code, row in latent:
        suppressions.suppresses(row, code)  # reported, or not, by the project's ambient pass
    if unused_noqa is not None:
        # After the rules' findings: which directives they used is known only now.
        from amplint.rules import ALL_RULES

        ran = {rule.code for rule in rules}
        for unused in unused_directives(suppressions, ran, {rule.code for rule in ALL_RULES}):
            directive = unused.directive
            if suppressions.suppresses(directive.row, UNUSED_NOQA):
                continue
            where = (directive.row, directive.column, directive.row, directive.end_column)
            finding = _finding(unused_noqa, path, where, unused.title, unused.help, cells)
            edit = unused_edit(source, unused) if fixes else None
            if edit is not None:  # a comment's text, not the tree: no parse needed
                finding = replace(finding, fix=FixSuggestion(unused.fix_title, SAFE, (edit,)))
            findings.append(finding)
    return sorted(findings)


def _shown(module: cst.Module, reports: Sequence[Tuple[Type[Rule], cst.CSTNode, Report]], fixes: bool) -> Iterator[cst.CSTNode]:
    # A fix several findings share (one rewrite of every use of an import) is read once.
    suggested = list({id(report.fix): report.fix for _, _, report in reports if report.fix is not None}.values()) if fixes else []
    yield from (node for _, node, _ in reports)
    for fix in suggested:
        yield from fix.nodes()
    if suggested:
        yield from Suggestions.anchors(module, {id(node) for fix in suggested for node in fix.nodes()})


def _finding(
    rule: Type[Rule],
    path: str,
    span: Tuple[int, int, int, int],
    message: str,
    help: Optional[str],
    cells: Optional[CellMap],
) -> Finding:
    row, column, end_row, end_column = span
    cell, cell_row = cells.locate(row) if cells is not None else (None, None)
    return Finding(
        path=path,
        row=row,
        column=column,
        code=rule.code,
        message=message,
        end_row=end_row,
        end_column=end_column,
        name=rule.name,
        url=rule.url(),
        cell=cell,
        cell_row=cell_row,
        help=help,
        severity=rule.severity,
    )


def lint_text(source: str, rules: Optional[Sequence[Type[Rule]]] = None, path: str = "<string>") -> List[Finding]:
    """Convenience for tests and the API: findings for a snippet, errors raised."""
    from amplint.rules import ALL_RULES

    result = lint_source(source, path, rules if rules is not None else ALL_RULES)
    if result.error is not None:
        raise ValueError(result.error.message)
    return result.findings
