#!/usr/bin/env python3
"""What one `amplint` call costs before it has anything to do: CPU seconds (user + system, the
whole process tree) of short calls, beside `python -c pass`, Python's own start-up.

    python bench/startup.py                 # 15 runs of each, the best counts
    python bench/startup.py --repeat 30 --importtime

The target (issue 21): `amplint --version` and a one-file run without findings cost at most
0.15 s of CPU above Python's start-up. The calls measured:

    version          amplint --version
    plain file       amplint --no-cache plain.py     a file that mentions no AMP code: only its
                                                     syntax verdict (no LibCST, no rules)
    plain, cached    amplint plain.py                the same, with the cache (second run on)
    clean AMP file   amplint --no-cache train.py     a correct training loop: parsed and analysed
                                                     (LibCST and the rules are imported)

Runs go round-robin over the calls, so a burst of load from elsewhere hits them alike, and the
least CPU of --repeat runs counts (load only ever adds). `--importtime` also prints the
slowest imports of each call (`python -X importtime`). This is a script people run, never a
test: nothing asserts on time (tests/test_startup.py checks what is imported instead).
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tempfile
import textwrap
from typing import Dict, List, Sequence, Tuple

TARGET = 0.15  # CPU seconds above Python's own start-up

PLAIN = textwrap.dedent(
    """\
    import os


    def read_lines(path):
        with open(path) as handle:
            return [line.rstrip() for line in handle]
    """
)
CLEAN_AMP = textwrap.dedent(
    """\
    import torch

    scaler = torch.amp.GradScaler("cuda")
    for x, y in loader:
        with torch.autocast("cuda", dtype=torch.float16):
            loss = loss_fn(model(x), y)
        scaler.scale(loss).backward()
        scaler.unscale_(optimizer)
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        scaler.step(optimizer)
        scaler.update()
    """
)


def cpu_of(command: Sequence[str], cwd: str, env: Dict[str, str]) -> Tuple[float, int]:
    """CPU seconds of the command and its children (workers included), and its exit code."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    done = subprocess.run(command, cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime), done.returncode


def slowest_imports(command: Sequence[str], cwd: str, env: Dict[str, str], count: int = 8) -> List[str]:
    done = subprocess.run([command[0], "-X", "importtime", *command[1:]], cwd=cwd, env=env, capture_output=True, text=True)
    rows = []
    for line in done.stderr.splitlines():
        if line.startswith("import time:") and "|" in line:
            _, cumulative, name = line[len("import time:") :].split("|", 2)
            if cumulative.strip().isdigit():
                rows.append((int(cumulative), name.rstrip()))
    top = [(us, name) for us, name in rows if name.startswith(" ") and not name.startswith("  ")] or rows
    return [f"{us / 1e6:7.3f} s {name.strip()}" for us, name in sorted(top, reverse=True)[:count]]


def main(argv: Sequence[str] = ()) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=15, help="runs of each call; the least CPU counts (default: 15)")
    parser.add_argument("--importtime", action="store_true", help="also list the slowest top-level imports of each call")
    options = parser.parse_args(argv)
    python = sys.executable
    amplint = [python, "-m", "amplint"]
    env = {k: v for k, v in os.environ.items() if k not in ("AMPLINT_CACHE_DIR", "PYTHONPROFILEIMPORTTIME")}
    with tempfile.TemporaryDirectory() as directory:
        with open(os.path.join(directory, "plain.py"), "w") as handle:
            handle.write(PLAIN)
        with open(os.path.join(directory, "train.py"), "w") as handle:
            handle.write(CLEAN_AMP)
        calls = {
            "python -c pass": [python, "-c", "pass"],
            "version": [*amplint, "--version"],
            "plain file": [*amplint, "--no-cache", "plain.py"],
            "plain, cached": [*amplint, "plain.py"],
            "clean AMP file": [*amplint, "--no-cache", "train.py"],
        }
        best: Dict[str, float] = {}
        for _ in range(max(1, options.repeat)):
            for name, command in calls.items():
                seconds, code = cpu_of(command, directory, env)
                if code not in (0,):
                    print(f"{name}: exit {code} (expected 0)", file=sys.stderr)
                    return 2
                best[name] = min(seconds, best.get(name, seconds))
        base = best["python -c pass"]
        print(f"{sys.version.split()[0]} on {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f}; least CPU of {options.repeat} runs")
        print(f"{'call':<16} {'CPU s':>7} {'above python':>13}")
        for name, seconds in best.items():
            above = "" if name == "python -c pass" else f"{seconds - base:+.3f}" + ("" if seconds - base <= TARGET or name == "clean AMP file" else "  over")
            print(f"{name:<16} {seconds:7.3f} {above:>13}")
        print(f"target: version and plain file at most {TARGET:+.2f} s above python")
        if options.importtime:
            for name, command in calls.items():
                if name != "python -c pass":
                    print(f"\n{name}: slowest imports")
                    print("\n".join(slowest_imports(command, directory, env)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
