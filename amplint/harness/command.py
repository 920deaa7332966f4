"""`amplint verify`: run each rule's buggy and fixed fixture and check the rule's predictions.

`amplint.cli` hands this module the arguments after `verify`. The linter never needs torch;
this command only checks that it is importable, and the fixture scripts (subprocesses) are
the only code that imports it.
"""

from __future__ import annotations

import argparse
import importlib.util
import math
import subprocess
import sys
import tempfile
from typing import List, Optional, Sequence, Tuple, Type

from amplint.harness.report import render_json, render_text
from amplint.harness.runner import (
    ALL_DTYPES,
    AS_WRITTEN,
    DEFAULT_TIMEOUT,
    DTYPES,
    PERTURBATIONS,
    fixture_root,
    mixed_sources,
    rules_root,
    verify,
)
from amplint.lint.rule import Rule

TORCH_MISSING = """\
amplint verify: PyTorch is not installed for this Python ({python}).
The harness runs real training steps, so it needs torch. Install it with

    pip install 'amplint[harness]'

(or any `pip install torch`). Linting does not need PyTorch.
"""

EPILOG = """\
exit status: 0 when every prediction that ran was confirmed; 1 when one was not reproduced,
a fixture crashed or timed out, or nothing could run (e.g. --device cuda without a GPU);
2 for a usage error or when PyTorch is not installed.
"""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="amplint verify",
        description="Run each rule's buggy and fixed training script and check that the measured "
        "difference matches what the rule predicts.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("codes", nargs="*", metavar="CODE", help="rules to verify, or code prefixes (default: all)")
    parser.add_argument(
        "--device", choices=("cpu", "cuda", "auto"), default="cpu", help="where the fixtures run; auto: cuda if available (default: cpu)"
    )
    parser.add_argument(
        "--dtype",
        choices=DTYPES + (ALL_DTYPES,),
        default=None,
        help="autocast dtype; predictions about the other dtype are skipped; all: every prediction at "
        "every dtype it is about (default: each prediction's own, float16 except the bfloat16 controls)",
    )
    parser.add_argument(
        "--fixes",
        action="store_true",
        help="instead, prove the rules' fixes: fix each buggy.py as `amplint --fix --unsafe-fixes` would and "
        "require it to report exactly what fixed.py reports",
    )
    parser.add_argument(
        "--perturb",
        action="store_true",
        help="also judge every prediction with the fixtures' incidental details changed: "
        + ", ".join(variant.name for variant in PERTURBATIONS)
        + "; a claim about the mistake must hold in every one (about 6x the time)",
    )
    parser.add_argument("--output-format", choices=("text", "json"), default="text")
    parser.add_argument(
        "--report",
        metavar="HTML",
        help="also write a self-contained HTML page: per prediction, the buggy and fixed runs' "
        "curves over their steps, the claim and the verdict",
    )
    parser.add_argument(
        "--timeout",
        type=float,
        default=DEFAULT_TIMEOUT,
        metavar="SECONDS",
        help="per fixture script (a buggy or fixed script at one dtype, every scenario): stopped after "
        "running this long, not counting time spent waiting for a CPU on a loaded machine "
        f"(default: {DEFAULT_TIMEOUT:g})",
    )
    return parser


def select_rules(codes: Sequence[str]) -> Tuple[List[Type[Rule]], List[str]]:
    """The rules the codes (or prefixes) name, in registry order; and the codes that name none."""
    from amplint.rules import ALL_RULES

    if not codes:
        # Rules without a runtime claim (AMP100 reads comments) have nothing to run.
        return [rule for rule in ALL_RULES if rule.PREDICTIONS], []
    wanted = [code.upper() for code in codes]
    unknown = [code for code in wanted if not any(rule.code.startswith(code) for rule in ALL_RULES)]
    chosen = [rule for rule in ALL_RULES if any(rule.code.startswith(code) for code in wanted)]
    return chosen, unknown


def resolve_device(requested: str, timeout: float) -> Tuple[str, Optional[str]]:
    """(device to report, why nothing can run there or None). Probes CUDA in a subprocess."""
    if requested == "cpu":
        return "cpu", None
    available, problem = _cuda_available(timeout)
    if requested == "auto":
        return ("cuda" if available else "cpu"), None
    if available:
        return "cuda", None
    return "cuda", problem or "CUDA is not available to torch on this machine"


def _cuda_available(timeout: float) -> Tuple[bool, Optional[str]]:
    probe = "import torch; print(torch.cuda.is_available())"
    # From an empty folder, with no script directory on sys.path (-P, Python 3.11+): a
    # `torch.py` in the caller's folder must not stand in for PyTorch. Not -I, which would
    # also drop a user-site PyTorch that the fixture processes do see.
    flags = ["-P"] if sys.version_info >= (3, 11) else []
    try:
        with tempfile.TemporaryDirectory(prefix="amplint-cuda-probe-") as neutral:
            done = subprocess.run(
                [sys.executable, *flags, "-c", probe],
                stdin=subprocess.DEVNULL,
                capture_output=True,
                text=True,
                timeout=timeout,
                cwd=neutral,
            )
    except (subprocess.TimeoutExpired, OSError) as error:
        return False, f"could not check for CUDA: {error}"
    if done.returncode != 0:
        lines = done.stderr.strip().splitlines()
        return False, f"could not check for CUDA: {lines[-1] if lines else 'exit ' + str(done.returncode)}"
    return done.stdout.strip().endswith("True"), None


def main(argv: Optional[List[str]] = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    except SystemExit as stop:  # argparse: --help exits 0, a usage error 2
        return stop.code if isinstance(stop.code, int) else 2
    rules, unknown = select_rules(args.codes)
    if unknown:
        from amplint.rules import ALL_RULES

        known = ", ".join(rule.code for rule in ALL_RULES)
        print(f"amplint verify: no rule matches {', '.join(unknown)} (known: {known})", file=sys.stderr)
        return 2
    if not math.isfinite(args.timeout) or args.timeout <= 0:
        print(f"amplint verify: --timeout must be a positive number of seconds, not {args.timeout:g}", file=sys.stderr)
        return 2
    if importlib.util.find_spec("torch") is None:
        print(TORCH_MISSING.format(python=sys.executable), file=sys.stderr, end="")
        return 2
    report = None
    if args.report:
        try:  # before the run, so that a bad path costs nothing
            report = open(args.report, "w", encoding="utf-8")
        except OSError as error:
            print(f"amplint verify: cannot write the report: {error}", file=sys.stderr)
            return 2

    mixed = mixed_sources(str(fixture_root()), rules_root())
    if mixed:
        print(f"amplint verify: warning: {mixed}", file=sys.stderr)
    device, unavailable = resolve_device(args.device, args.timeout)
    if args.fixes:
        return _prove_fixes(rules, device, unavailable, args)
    variants = (AS_WRITTEN,) + (PERTURBATIONS if args.perturb else ())
    run = verify(rules, device, args.dtype, args.timeout, unavailable=unavailable, variants=variants)
    sys.stdout.write(render_json(run) if args.output_format == "json" else render_text(run))
    if report is not None:
        from amplint.harness.html import render_html

        with report:
            report.write(render_html(run))
        print(f"amplint verify: wrote {args.report}", file=sys.stderr)
    if not any(row.ran for row in run.rows):
        print("amplint verify: no prediction could run", file=sys.stderr)
    return 0 if run.ok else 1


if __name__ == "__main__":
    sys.exit(main())


def _prove_fixes(rules, device: str, unavailable: Optional[str], args: argparse.Namespace) -> int:
    import json

    from amplint.harness.autofix import ok, prove_fixes, render

    if unavailable:
        print(f"amplint verify: {unavailable}", file=sys.stderr)
        return 1
    dtypes = DTYPES if args.dtype == ALL_DTYPES else (args.dtype or "float16",)
    proofs = prove_fixes(rules, device, dtypes, args.timeout)
    if args.output_format == "json":
        sys.stdout.write(json.dumps([proof.as_dict() for proof in proofs], indent=2) + "\n")
    else:
        sys.stdout.write(render(proofs, device))
    return 0 if ok(proofs) else 1

