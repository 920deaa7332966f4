"""The `amplint` command: `amplint [check] [PATH ...]`, `amplint rule CODE`, `amplint verify`,
`amplint server` (the language server, amplint.lsp).

`amplint - --stdin-filename train.py` lints standard input as if it were that file (editors);
`--stdin-filename` alone implies `-`.

Exit codes: 0 nothing that fails the run, 1 findings at the fail level (`--fail-level`:
`error` findings by default; warnings are reported and exit 0 unless asked), 2 a usage error or
a file that could not be linted (every other file is still linted and reported). A function too
complex to follow within the analysis limit is reported and does not change the exit code.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import TYPE_CHECKING, Callable, Dict, List, Optional, Sequence, TextIO, Tuple, Type

from amplint import __version__, subcommands
from amplint.config.options import FAIL_LEVELS, SYNTAX_ERRORS, TARGET_VERSIONS, ConfigError, PythonVersion, split_codes
from amplint.escape import visible
from amplint.lint.noqa import directives_ignored, ignoring_directives
from amplint.config.per_file import codes_for as _codes_for
from amplint.config.per_file import load_config as _load_config
from amplint.config.per_file import per_file_ignores as _per_file_ignores
from amplint.config.per_file import selected_rules as _selected_rules
from amplint.work import MAX_FACTOR, metered, parse_factor

# Everything else is imported where it is used: `amplint --version` and a run on files that
# mention no AMP code should not pay for LibCST, the rules and every output format
# (bench/startup.py measures it).
if TYPE_CHECKING:
    from amplint.lint.diagnostics import FileError, FileResult, RunReport
    from amplint.lint.fix_loop import FileFix
    from amplint.lint.rule import Rule

# The names of amplint.output.FORMATS (a test keeps them equal), known without importing the
# renderers; `text` is the old name of `full`.
OUTPUT_FORMATS = ("full", "concise", "json", "json-lines", "junit", "github", "gitlab", "pylint", "sarif")
# As amplint.run.cache and amplint.run.driver define them (a test keeps them equal).
CACHE_DIR_NAME, ENV_CACHE_DIR = ".amplint_cache", "AMPLINT_CACHE_DIR"
DEFAULT_BUDGET = 120.0
DEFAULT_MEMORY = 2048

EXIT_CLEAN, EXIT_FINDINGS, EXIT_ERROR = 0, 1, 2

USAGE = """\
amplint [check] [PATH ...] [options]   lint files and directories (default: .)
amplint - --stdin-filename NAME         lint standard input as the file NAME (editors)
amplint rule CODE | --all               show a rule's documentation, or list all rules
amplint verify [CODE ...] [options]     run the fixtures and confirm each rule's runtime failure
amplint server                          the language server (LSP over stdio) for editors"""


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    try:
        if args and args[0] == "rule":
            return rule_command(args[1:])
        if args and args[0] == "verify":
            from amplint.harness.command import main as verify

            return verify(args[1:])
        if args and args[0] == "server":
            from amplint.lsp import main as server

            return server(args[1:])
        if args and args[0] == "check":
            args = args[1:]
        elif args and subcommands.mistyped(args[0]):
            return _usage_error(f"unknown command or path `{args[0]}`; did you mean `amplint {subcommands.mistyped(args[0])}`?")
        return check_command(args)
    except BrokenPipeError:  # `amplint . | head`
        sys.stderr.close()
        return EXIT_ERROR
    except KeyboardInterrupt:
        return 130
    except Exception as error:  # never exit 1 (which reads as "findings") on a crash
        _tell("internal error", f"{type(error).__name__}: {error}")
        return EXIT_ERROR


# --------------------------------------------------------------------------- check


class _Parser(argparse.ArgumentParser):
    """The epilog lists the rules: they are imported for --help only."""

    def format_help(self) -> str:
        from amplint.rules import ALL_RULES

        self.epilog = "Rules: " + ", ".join(f"{r.code} {r.name}" for r in ALL_RULES) + ". `amplint rule CODE` explains one."
        return super().format_help()


def _check_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="amplint",
        usage=USAGE,
        description="Find PyTorch automatic-mixed-precision mistakes that silently ruin training.",
    )
    parser.add_argument("paths", nargs="*", metavar="PATH", help="files or directories to lint (default: .), or - for standard input")
    selection = parser.add_argument_group("rule selection")
    selection.add_argument("--select", action="append", metavar="CODES", help="rules to enable: codes, prefixes or ALL, comma-separated (replaces the config's selection)")
    selection.add_argument("--extend-select", action="append", metavar="CODES", help="rules to enable on top of the selection")
    selection.add_argument("--ignore", action="append", metavar="CODES", help="rules to disable")
    selection.add_argument("--per-file-ignores", action="append", metavar="GLOB:CODES", help="rules to disable in files matching a gitignore-style pattern, e.g. 'tests/*:AMP002,AMP006' (replaces the config's per-file-ignores)")
    selection.add_argument("--extend-per-file-ignores", action="append", metavar="GLOB:CODES", help="per-file ignores on top of the config's")
    files = parser.add_argument_group("file selection")
    files.add_argument("--exclude", action="append", metavar="PATTERNS", help="gitignore-style patterns to skip (replaces the defaults)")
    files.add_argument("--extend-exclude", action="append", metavar="PATTERNS", help="patterns to skip on top of the defaults")
    files.add_argument("--force-exclude", action="store_true", help="apply excludes to files named on the command line too (pre-commit)")
    files.add_argument("--no-respect-gitignore", action="store_true", help="lint files that .gitignore ignores")
    files.add_argument("--target-version", choices=TARGET_VERSIONS, metavar="VERSION", help="the Python the code runs on, py37 to py314: its grammar decides what is a syntax error (default: the config's target-version, else requires-python, else the newest)")
    files.add_argument("--target-torch-version", metavar="VERSION", help="the oldest torch the project supports, e.g. 1.13: a fix that needs a newer torch is unsafe (default: the config's target-torch-version, else the project's torch requirement, else 2.4)")
    files.add_argument("--stdin-filename", metavar="NAME", help="the name standard input is linted and reported as (a .ipynb name reads a notebook); implies -")
    output = parser.add_argument_group("output")
    output.add_argument(
        "--output-format",
        choices=OUTPUT_FORMATS,
        type=lambda name: "full" if name == "text" else name,  # `text`: full's old name
        default=None,  # the config's output-format, else full
        metavar="FORMAT",
        help="full (default: title, location, code frame, help), concise (one line each), json, json-lines, "
        "junit, github (Actions annotations), gitlab (Code Quality), pylint, sarif (code scanning)",
    )
    output.add_argument("-o", "--output-file", metavar="PATH", help="write the findings to this file instead of standard output")
    output.add_argument("--concise", action="store_true", help="the same as --output-format concise")
    output.add_argument("--statistics", action="store_true", help="print the number of findings per rule instead (JSON with a JSON format)")
    output.add_argument("--color", choices=("auto", "always", "never"), default="auto", help="colour the full and concise formats (default: auto; FORCE_COLOR, NO_COLOR)")
    output.add_argument("-q", "--quiet", action="store_true", help="print findings only: no summary line, no progress")
    output.add_argument("--show-settings", action="store_true", help="print the resolved configuration and exit")
    output.add_argument("--show-files", action="store_true", help="print the files that would be linted and exit")
    fixing = parser.add_argument_group("fixes")
    fixing.add_argument("--fix", action=argparse.BooleanOptionalAction, default=False, help="apply the fixes of what is found, in place, and report what remains")
    fixing.add_argument("--unsafe-fixes", action=argparse.BooleanOptionalAction, default=None, help="also apply (and mark) unsafe fixes, which change code the user should look at (default: the config's unsafe-fixes)")
    fixing.add_argument("--diff", action="store_true", help="print the fixes as a unified diff and write nothing; exit 1 when there is something to fix")
    fixing.add_argument("--fix-only", action="store_true", help="apply fixes and report nothing that remains; exit 0 unless a file could not be linted")
    fixing.add_argument("--show-fixes", action="store_true", help="list the fixes applied, per file and rule")
    fixing.add_argument("--fixable", action="append", metavar="CODES", help="rules whose fixes may be applied (replaces the config's fixable; default ALL)")
    fixing.add_argument("--unfixable", action="append", metavar="CODES", help="rules whose fixes are never applied")
    fixing.add_argument("--exit-non-zero-on-fix", action="store_true", help="exit 1 when --fix or --fix-only changed a file, even if nothing remains")
    noqa = parser.add_argument_group("noqa")
    noqa.add_argument("--add-noqa", action="store_true", help="add `# noqa: CODE` to every line with a finding (merged into the line's own directive) and exit; adopts amplint on existing code")
    noqa.add_argument("--ignore-noqa", action="store_true", help="ignore every `# noqa` and `# amplint: noqa` comment: report what they suppress")
    run = parser.add_argument_group("run")
    run.add_argument("--exit-zero", action="store_true", help="exit 0 even when there are findings")
    run.add_argument(
        "--fail-level",
        choices=FAIL_LEVELS,
        help="the lowest severity of finding that fails the run (exit 1): error (warnings are reported and exit 0) or warning (default: the config's fail-level, else error)",
    )
    run.add_argument(
        "--syntax-errors",
        choices=SYNTAX_ERRORS,
        help="whose syntax errors to report: the files amplint analyses, those that mention AMP code (the default: the config's syntax-errors, else analysed), or all the files it is given",
    )
    run.add_argument(
        "--config",
        action="append",
        metavar="PATH|KEY=VALUE",
        help="a configuration file to use instead of the nearest one (amplint.toml, or a pyproject.toml's [tool.amplint]), "
        "or a `KEY = VALUE` TOML line that overrides one setting, e.g. --config \"ignore = ['AMP006']\" (repeatable)",
    )
    run.add_argument("--isolated", action="store_true", help="ignore all configuration files")
    run.add_argument("-j", "--jobs", type=_whole_number(), default=None, metavar="N", help="worker processes, as many as asked for (default: the config's jobs, at most one per CPU; else one per CPU)")
    run.add_argument(
        "--file-budget",
        type=_seconds,
        default=DEFAULT_BUDGET,
        metavar="SECONDS",
        help=f"CPU seconds one file may take, a safety net far above the work limit (--analysis-limit); a file over it is an error (default: {DEFAULT_BUDGET:g}; 0: no limit)",
    )
    run.add_argument(
        "--file-memory",
        type=_whole_number(" of MiB"),
        default=DEFAULT_MEMORY,
        metavar="MIB",
        help=f"MiB of memory a worker may take beyond what it starts with, a safety net; a file past it is an error (default: {DEFAULT_MEMORY}; 0: no limit)",
    )
    run.add_argument(
        "--analysis-limit",
        type=_factor,
        metavar="FACTOR",
        help="multiply the analysis' work limits (steps per function and per file, the same on every machine) by FACTOR, e.g. 4 (default: the config's analysis-limit, else 1)",
    )
    run.add_argument("-n", "--no-cache", action="store_true", help="lint every file, reading and writing no cache")
    run.add_argument(
        "--cache-dir",
        metavar="DIR",
        help=f"where results are cached (default: ${ENV_CACHE_DIR}, else the config's cache-dir, else {CACHE_DIR_NAME} in the project root)",
    )
    run.add_argument("-w", "--watch", action="store_true", help="lint again whenever a linted file (or the configuration) changes; Ctrl-C stops")
    run.add_argument("--watch-runs", type=int, default=None, help=argparse.SUPPRESS)  # tests: stop after N runs
    run.add_argument("--version", action="version", version=f"amplint {__version__}")
    return parser


def check_command(argv: Sequence[str]) -> int:
    options = _check_parser().parse_args(argv)
    if options.watch:
        return _watch(options)
    with directives_ignored(options.ignore_noqa):
        return _check(options)


def _check(options: argparse.Namespace, watched: Optional[List[str]] = None) -> int:
    """One run. `watched`: filled with the files it linted and the configuration it read."""
    from amplint.config import show
    from amplint.lint.catalogue import RULES
    from amplint.config.options import parse_target_version
    from amplint.lint.diagnostics import FileError, RunReport
    from amplint.run.discovery import DEFAULT_EXCLUDES, Discovery, PatternError, check_patterns
    from amplint.output import HUMAN_FORMATS
    from amplint.config.selection import SelectionError, validate

    paths = options.paths or (["-"] if options.stdin_filename is not None else ["."])
    reads_stdin = "-" in paths
    if reads_stdin and len(paths) > 1:
        return _usage_error("`-` (standard input) cannot be combined with other paths")
    if options.stdin_filename is not None and not reads_stdin:
        return _usage_error("--stdin-filename names standard input: pass `-` or no paths, not " + " ".join(paths))
    if options.add_noqa and (options.fix or options.fix_only or options.diff or reads_stdin):
        return _usage_error("--add-noqa edits the files named on the command line: not with --fix, --fix-only, --diff or standard input")
    stdin_name = options.stdin_filename or "-"
    try:
        # Standard input is configured as the file it stands for: its pyproject.toml, its
        # per-file-ignores.
        config = _load_config(options, [stdin_name] if reads_stdin else paths)
        rules = _selected_rules(options, config, RULES)  # their codes: the rules are imported by the files that need them
        per_file = _per_file_ignores(config)
        check_patterns(split_codes(options.exclude) or [], "--exclude")
        check_patterns(split_codes(options.extend_exclude) or [], "--extend-exclude")
    except (ConfigError, SelectionError, PatternError) as error:
        return _usage_error(str(error))
    for note in config.notes:
        _tell("note", note)
    target = parse_target_version(options.target_version) if options.target_version else config.target_version
    torch_target = config.torch()[0]
    analysis_limit = options.analysis_limit if options.analysis_limit is not None else config.analysis_limit
    fail_level = options.fail_level or config.fail_level
    every_syntax = (options.syntax_errors or config.syntax_errors) == "all"
    if options.concise and options.output_format in (None, "full"):
        options.output_format = "concise"
    options.output_format = options.output_format or config.output_format or "full"

    discovery = Discovery(
        root=config.root,
        exclude=split_codes(options.exclude) or config.exclude or DEFAULT_EXCLUDES,
        extend_exclude=[*config.extend_exclude, *(split_codes(options.extend_exclude) or [])],
        respect_gitignore=config.respect_gitignore and not options.no_respect_gitignore,
        force_exclude=options.force_exclude,
    )
    workers = _workers(options.jobs, config.jobs)
    if options.show_settings:
        sys.stdout.write(show.settings(config, rules, discovery, paths, options.output_format, workers, target, fail_level or "error", analysis_limit or 1.0))
        return EXIT_CLEAN
    unsafe = options.unsafe_fixes if options.unsafe_fixes is not None else config.unsafe_fixes
    try:
        fixable = validate(split_codes(options.fixable) or config.fixable, RULES)
        unfixable = validate([*config.unfixable, *(split_codes(options.unfixable) or [])], RULES)
    except SelectionError as error:
        return _usage_error(str(error))
    fixing = options.fix or options.fix_only or options.diff
    stdin_data: Optional[bytes] = None
    if reads_stdin:
        errors: List[FileError] = []
        # An editor passes every file it opens; --force-exclude keeps excluded ones quiet.
        excluded = options.force_exclude and stdin_name != "-" and discovery.is_excluded(stdin_name, is_dir=False)
        files = [] if excluded else [stdin_name]
        codes_by_path = {stdin_name: _codes_for(stdin_name, rules, config, per_file)}
        stdin_data = sys.stdin.buffer.read()

        def lint_all() -> List[FileResult]:
            return [lint_stdin(stdin_name, codes_by_path[stdin_name], options.file_budget, target, stdin_data, analysis_limit, torch_target, options.file_memory, every_syntax)] if files else []

    else:
        files, errors = discovery.files(paths)
        if watched is not None:
            watched.extend([*files, *discovery.walked, *([config.path] if config.path else [])])
        if options.show_files:
            sys.stdout.write(show.files(files))
            _tell_errors(errors)
            return EXIT_ERROR if errors else EXIT_CLEAN
        if not files and not errors:
            # Exactly why, when --force-exclude left out the paths the user named.
            why = "".join(f"; {path} is {reason}" for path, reason in discovery.skipped)
            _tell("warning", f"no Python files or notebooks found under {' '.join(paths)}{why}")
        codes_by_path = {path: _codes_for(path, rules, config, per_file) for path in files}
        from amplint.run import progress
        from amplint.run.cache import open_cache
        from amplint.run.driver import Job, Runner

        cache = None if options.no_cache else open_cache(options.cache_dir, config.root, config.cache_dir)
        if cache is not None and cache.problem:
            _tell("note", f"not caching: {cache.problem}")

        def lint_all() -> List[FileResult]:
            shown = progress.Progress(len(files), enabled=not options.quiet and progress.wanted())
            try:
                # --ignore-noqa changes what a file's result is: part of its cache key.
                settings = {"ignore-noqa": True} if ignoring_directives() else None
                with Runner(workers, options.file_budget, cache, settings, target=target, progress=shown, analysis_limit=analysis_limit, torch_target=torch_target, memory=options.file_memory, every_syntax=every_syntax) as runner:
                    # Files that import linted modules are linted again with what those modules' functions do.
                    # Fixes follow other modules' functions as the lint did: only they need the summaries.
                    return runner.lint_project([Job(path, codes) for path, codes in codes_by_path.items()], facts=fixing)
            finally:
                shown.close()

    results = lint_all()
    if options.add_noqa:
        return _add_noqa(results, errors, paths)
    fixes: List[FileFix] = []
    if fixing:
        from amplint.lint.fix_loop import fix_results, wanted_by, write_fixed

        # Functions are followed as far as the lint followed them, so every fix it showed is found.
        with metered(analysis_limit, limited=False):
            fixes = fix_results(results, codes_by_path, wanted_by(unsafe, fixable, unfixable), target, stdin_data, torch_target)
        for fix in fixes:
            if fix.outcome.error and fix.outcome.count == 0:
                _tell("note", f"{fix.path}: {fix.outcome.error}")
        if options.diff:
            return _print_diff(fixes, results, errors, options.exit_zero)
        if reads_stdin:
            fixed = next((fix.fixed for fix in fixes), stdin_data)
            stdin_data = fixed
            out = getattr(sys.stdout, "buffer", None)
            if out is not None:
                out.write(fixed or b"")
            else:  # a text stream standing in for standard output
                sys.stdout.write((fixed or b"").decode("utf-8", "surrogateescape"))
            sys.stdout.flush()
            results = lint_all()
        else:
            for fix in fixes:
                if fix.changed:
                    problem = write_fixed(fix, paths)
                    if problem is not None:
                        errors.append(FileError(fix.path, problem))
                        fix.fixed = fix.original  # not written: neither changed nor counted as fixed
            changed = {fix.path for fix in fixes if fix.changed}
            if changed:
                # What remains. A file the first pass could not lint (over its CPU budget) was
                # not fixed: its error stands, rather than a second try's findings, which would
                # show as fixable what --fix left alone.
                failed = {r.path: r for r in results if r.error is not None and r.path not in changed}
                results = [failed.get(r.path, r) for r in lint_all()]

    findings = sorted(f for result in results for f in result.findings)
    errors += [result.error for result in results if result.error is not None]
    fixed_errors, fixed_warnings = _fixed_by_severity(fixes)
    report = RunReport(
        findings=findings,
        errors=errors,
        files_checked=len(files),
        sources={r.path: r.source for r in results if r.source is not None},
        notebooks={r.path: r.cells for r in results if r.cells is not None},
        skipped_functions=sorted(s for r in results for s in r.skipped_functions),
        unsafe_fixes=unsafe,
        fixed=fixed_errors + fixed_warnings,
        fixed_warnings=fixed_warnings,
        fail_level=fail_level or "error",
    )
    try:
        if options.fix_only:
            if not options.quiet and report.fixed:
                from amplint.output.text import count_words

                print(f"Fixed {count_words(fixed_errors, fixed_warnings)}.", file=sys.stderr if reads_stdin else sys.stdout)
        else:
            _write(report, options, sys.stderr if reads_stdin and fixing else None)
        if options.show_fixes and report.fixed:
            from amplint.lint.fix_loop import applied_fixes

            (sys.stderr if reads_stdin or options.output_format not in HUMAN_FORMATS else sys.stdout).write(applied_fixes(fixes))
    except OSError as error:
        return _usage_error(f"cannot write {options.output_file}: {error.strerror or error}")
    # Never silently: a function too complex to follow is named, so no one reads its silence
    # as a clean bill of health. Every output format reports it; here for a person reading
    # the terminal when standard output is not for them.
    for skipped in report.skipped_functions if not _human_on_stdout(options, reads_stdin and fixing) else ():
        _tell("note", f"{skipped.path}:{skipped.row}: {skipped.message}")
    _tell_errors(errors)
    status = exit_status(report, exit_zero=options.exit_zero or options.fix_only)
    if status == EXIT_CLEAN and options.exit_non_zero_on_fix and not options.exit_zero and any(fix.changed for fix in fixes):
        return EXIT_FINDINGS
    return status


def exit_status(report: "RunReport", exit_zero: bool = False) -> int:
    """2 if a file could not be linted; 1 for a finding at the report's fail level or worse
    (unless `exit_zero`); else 0. A function not analysed is reported, and changes nothing here: its
    verdict is deterministic (amplint.work), and raising the limit is the way to analyse it."""
    if report.errors:
        return EXIT_ERROR
    if not exit_zero and any(report.fails(finding) for finding in report.findings):
        return EXIT_FINDINGS
    return EXIT_CLEAN


def _add_noqa(results: List[FileResult], errors: List[FileError], paths: Sequence[str]) -> int:
    """`--add-noqa`: mark every finding's line and exit (0, or 2 if a file could not be linted
    or written), as ruff does."""
    from amplint.lint.add_noqa import add_noqa

    added = add_noqa(results, paths)
    for note in added.notes:
        _tell("note", note)
    count = added.directives
    print(f"Added {count} noqa directive{'s' if count != 1 else ''}" + (f" in {added.files} file{'s' if added.files != 1 else ''}." if count else "."), file=sys.stderr)
    errors = errors + added.errors + [result.error for result in results if result.error is not None]
    _tell_errors(errors)
    return EXIT_ERROR if errors else EXIT_CLEAN


# Seconds between two looks at the watched files' modification times.
WATCH_INTERVAL = 0.5


def _watch(options: argparse.Namespace) -> int:
    """`--watch`: a run, then another whenever a linted file, a directory the run walked or
    that holds one, a path given or the configuration file changes (polled: no dependency,
    no threads)."""
    import time

    if options.paths == ["-"] or options.stdin_filename is not None:
        return _usage_error("--watch watches files: not with standard input")
    if options.add_noqa:
        return _usage_error("--watch and --add-noqa: add the directives once, then watch")
    runs, code = 0, EXIT_CLEAN
    while options.watch_runs is None or runs < options.watch_runs:
        if runs:
            print("amplint: file change detected, linting again", file=sys.stderr)
        watched: List[str] = list(options.paths or ["."])
        with directives_ignored(options.ignore_noqa):
            code = _check(options, watched)
        runs += 1
        watched += sorted({os.path.dirname(os.path.abspath(path)) for path in watched})
        before = _stamps(watched)  # before saying so: a change made on reading it counts
        sys.stdout.flush()
        print("amplint: watching for file changes (Ctrl-C stops)", file=sys.stderr, flush=True)
        while options.watch_runs is None or runs < options.watch_runs:
            time.sleep(WATCH_INTERVAL)
            if _stamps(watched) != before:
                break
    return code


def _stamps(paths: Sequence[str]) -> Dict[str, Optional[Tuple[int, int]]]:
    stamps: Dict[str, Optional[Tuple[int, int]]] = {}
    for path in paths:
        try:
            st = os.stat(path)
            stamps[path] = (st.st_mtime_ns, st.st_size)
        except OSError:
            stamps[path] = None
    return stamps


def _print_diff(fixes: List[FileFix], results: List[FileResult], errors: List[FileError], exit_zero: bool = False) -> int:
    """`--diff`: the fixes as a unified diff; exit 1 when there is something to fix (0 with
    `--exit-zero`, as for findings)."""
    from amplint.lint.fix import diff

    from amplint.output.text import count_words

    changed = [fix for fix in fixes if fix.changed]
    for fix in changed:
        sys.stdout.write(diff(fix.text_before, fix.text_after, fix.path))
    if sum(_fixed_by_severity(changed)):
        print(f"Would fix {count_words(*_fixed_by_severity(changed))}.", file=sys.stderr)
    errors = errors + [result.error for result in results if result.error is not None]
    _tell_errors(errors)
    if errors:
        return EXIT_ERROR
    return EXIT_FINDINGS if changed and not exit_zero else EXIT_CLEAN


def _fixed_by_severity(fixes: Sequence["FileFix"]) -> Tuple[int, int]:
    """(errors, warnings) that `fixes` settled; the fixer is imported only when there are some."""
    if not fixes:
        return 0, 0
    from amplint.lint.fix_loop import fixed_by_severity

    return fixed_by_severity(fixes)


def _human_on_stdout(options: argparse.Namespace, elsewhere: bool) -> bool:
    """Whether the report a person reads (a human format, not --statistics) is on the terminal."""
    from amplint.output import HUMAN_FORMATS

    return (
        options.output_format in HUMAN_FORMATS
        and not (options.fix_only or options.statistics or options.output_file or elsewhere)
    )


def _usage_error(message: str) -> int:
    _tell("error", message)
    return EXIT_ERROR


def _tell(kind: str, text: str) -> None:
    """`amplint: KIND: TEXT` on standard error: the one way the command speaks to a person
    outside its report. The text quotes what the linted repository controls (file names,
    code, configuration values), so all of it is made visible (`amplint.escape`): no
    control byte reaches the terminal, no line break starts a line of the repository's (a
    `::error` workflow command in a GitHub Actions log)."""
    print(f"amplint: {kind}: {visible(text)}", file=sys.stderr)


def _tell_errors(errors: Sequence["FileError"]) -> None:
    for error in sorted(errors):
        _tell("error", f"{error.path}: {error.message}")


def lint_stdin(
    name: str,
    codes: Tuple[str, ...],
    budget: float = DEFAULT_BUDGET,
    target: Optional[PythonVersion] = None,
    data: Optional[bytes] = None,
    analysis_limit: float = 1.0,
    torch_target: Optional[Tuple[int, int]] = None,
    memory: int = DEFAULT_MEMORY,
    every_syntax: bool = False,
) -> FileResult:
    """Lint standard input (or `data` read from it) as the file `name`, isolated like any other file."""
    from amplint.lint.diagnostics import FileResult
    from amplint.run.driver import Job, Runner
    from amplint.run.source import size_error

    data = sys.stdin.buffer.read() if data is None else data
    too_large = size_error(name, len(data))
    if too_large:
        return FileResult(name, error=too_large)
    with Runner(1, budget, target=target, analysis_limit=analysis_limit, torch_target=torch_target, memory=memory, every_syntax=every_syntax) as runner:
        return runner.lint([Job(name, codes, data=data)])[0]


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if value < 0 or value != value:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}")
    return value


def _workers(asked: Optional[int], configured: Optional[int]) -> int:
    """Worker processes: `-j N` as given (the user's own choice); the configuration's `jobs`,
    which the linted repository controls, at most one per CPU (`jobs = 5000` in a pull
    request must not fork thousands of workers); 0 or nothing: one per CPU."""
    cpus = os.cpu_count() or 1
    if asked:
        return asked
    return min(configured, cpus) if configured else cpus


def _whole_number(of: str = "") -> Callable[[str], int]:
    """An argument type: a whole number, 0 or more (`of`: what it counts, for the message)."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            value = -1
        if value < 0:
            raise argparse.ArgumentTypeError(f"not a whole number{of}: {text!r}")
        return value

    return parse


def _factor(text: str) -> float:
    try:
        return parse_factor(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a positive factor of at most {MAX_FACTOR:g}: {text!r} (e.g. 4 for four times the default limits)") from None


def _write(report: RunReport, options: argparse.Namespace, default: Optional[TextIO] = None) -> None:
    """The findings, on standard output (or `default`: standard error when standard output
    carries the fixed source) or in the file named by -o."""
    from amplint.output import FORMATS, HUMAN_FORMATS, statistics
    from amplint.output.terminal import use_color

    stream = None
    if options.output_file:
        os.makedirs(os.path.dirname(os.path.abspath(options.output_file)), exist_ok=True)
        stream = open(options.output_file, "w", encoding="utf-8")
    try:
        target = stream if stream is not None else (default or sys.stdout)
        if options.statistics:
            target.write(statistics.render(report, options.output_format))
            return
        human = options.output_format in HUMAN_FORMATS
        # A report file gets colour only when asked for by name: FORCE_COLOR is for terminals
        # and CI logs, not for the artifacts a job uploads.
        color = human and (options.color == "always" if stream is not None else use_color(options.color, target))
        target.write(FORMATS[options.output_format](report, color=color, summary=not options.quiet))
    finally:
        if stream is not None:
            stream.close()


# --------------------------------------------------------------------------- rule


def rule_command(argv: Sequence[str]) -> int:
    import json

    from amplint.rules import ALL_RULES

    parser = argparse.ArgumentParser(prog="amplint rule", description="Show a rule's documentation.")
    parser.add_argument("code", nargs="?", help="a rule code, e.g. AMP003, or its name, e.g. clip-before-unscale")
    parser.add_argument("--all", action="store_true", help="list every rule")
    parser.add_argument(
        "--output-format",
        choices=("text", "json"),
        default="text",
        help="text (default), or json: ruff's object per rule (a list with --all), for tools",
    )
    options = parser.parse_args(argv)
    if options.all or not options.code:
        if options.output_format == "json":
            print(json.dumps([_rule_json(rule) for rule in ALL_RULES], indent=2))
            return EXIT_CLEAN
        width = max(len(rule.name) for rule in ALL_RULES)
        for rule in ALL_RULES:
            fix = (rule.fix_kind() or "").ljust(6)
            print(f"{rule.code}  {rule.name.ljust(width)}  {rule.severity.ljust(7)}  {fix}  {rule.summary()}")
        return EXIT_CLEAN
    wanted = options.code.strip()
    for rule in ALL_RULES:
        if wanted.upper() == rule.code or wanted == rule.name:
            if options.output_format == "json":
                print(json.dumps(_rule_json(rule), indent=2))
            else:
                sys.stdout.write(rule.page())
            return EXIT_CLEAN
    _tell("error", f"unknown rule `{wanted}` (see `amplint rule --all`)")
    return EXIT_ERROR


def _rule_json(rule: Type[Rule]) -> Dict[str, object]:
    """`amplint rule CODE --output-format json`: ruff's keys (name, code, linter, summary, fix,
    explanation), with amplint's severity and documentation URL."""
    return {
        "name": rule.name,
        "code": rule.code,
        "linter": "amplint",
        "summary": rule.summary(),
        "severity": rule.severity,
        "fix": rule.fix_kind(),  # "safe", "unsafe" or null
        "url": rule.url(),
        "explanation": rule.page(),
    }
