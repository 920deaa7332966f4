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

The language server (issue 42, target: `initialize` answered within 0.5 s): `amplint server`
is started as an editor starts it, sent `initialize` at once, and timed from its start to the
answer, in wall seconds and in the CPU seconds it had used by then (from /proc), beside
`python -c pass` started the same way (from its start to its exit). The best and the median
of --repeat starts each:

    server initialize   wall and CPU to the answer
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from typing import Dict, List, Optional, Sequence, Tuple

TARGET = 0.15  # CPU seconds above Python's own start-up
INITIALIZE_TARGET = 0.5  # wall seconds from the server's start to its answer to `initialize`

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


def process_cpu(pid: int) -> Optional[float]:
    """CPU seconds (user + system) a live process has used, from /proc; None elsewhere."""
    try:
        with open(f"/proc/{pid}/stat") as handle:
            fields = handle.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def python_started(python: str, cwd: str, env: Dict[str, str]) -> Tuple[float, float]:
    """`python -c pass` started as the server is: wall seconds to its exit, and its CPU."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    subprocess.run([python, "-c", "pass"], cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def initialize_answered(command: Sequence[str], cwd: str, env: Dict[str, str]) -> Tuple[float, Optional[float]]:
    """Wall seconds from starting the language server to its answer to `initialize`, and the
    CPU seconds it had used by then."""
    body = json.dumps({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {"processId": os.getpid(), "rootUri": None, "capabilities": {}}}).encode()
    started = time.perf_counter()
    server = subprocess.Popen([*command, "server"], cwd=cwd, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    try:
        assert server.stdin is not None and server.stdout is not None
        server.stdin.write(b"Content-Length: %d\r\n\r\n" % len(body) + body)
        server.stdin.flush()
        length = 0
        while True:
            line = server.stdout.readline()
            if not line:
                raise RuntimeError("the server ended before answering initialize")
            if not line.strip():
                break
            if line.lower().startswith(b"content-length:"):
                length = int(line.split(b":")[1])
        answer = json.loads(server.stdout.read(length))
        wall = time.perf_counter() - started
        cpu = process_cpu(server.pid)
        if "result" not in answer:
            raise RuntimeError(f"initialize failed: {answer}")
        return wall, cpu
    finally:
        server.kill()
        server.wait()


def server_start(python: str, amplint: Sequence[str], repeat: int, cwd: str, env: Dict[str, str]) -> None:
    """The language server's answer to `initialize`, beside Python's start."""
    try:
        import pygls  # noqa: F401
    except ImportError:
        print("\nserver initialize: pygls is not installed (pip install 'amplint[lsp]')")
        return
    runs: Dict[str, List[Tuple[float, float]]] = {"python -c pass": [], "server initialize": []}
    for _ in range(max(1, repeat)):
        runs["python -c pass"].append(python_started(python, cwd, env))
        wall, cpu = initialize_answered(amplint, cwd, env)
        runs["server initialize"].append((wall, cpu if cpu is not None else float("nan")))
    print(f"\n{'language server':<18} {'wall best':>9} {'median':>7} {'CPU best':>9} {'median':>7}   ({repeat} starts)")
    for name, measured in runs.items():
        walls, cpus = [w for w, _ in measured], [c for _, c in measured]
        print(f"{name:<18} {min(walls):9.3f} {statistics.median(walls):7.3f} {min(cpus):9.3f} {statistics.median(cpus):7.3f}")
    print(f"target: initialize answered within {INITIALIZE_TARGET} s of the server's start (wall)")


def main(argv: Sequence[str] = ()) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=15, help="runs of each call; the least CPU counts (default: 15)")
    parser.add_argument("--importtime", action="store_true", help="also list the slowest top-level imports of each call")
    parser.add_argument("--server-only", action="store_true", help="measure only the language server's answer to initialize")
    options = parser.parse_args(argv)
    python = sys.executable
    amplint = [python, "-m", "amplint"]
    env = {k: v for k, v in os.environ.items() if k not in ("AMPLINT_CACHE_DIR", "PYTHONPROFILEIMPORTTIME")}
    with tempfile.TemporaryDirectory() as directory:
        if options.server_only:
            server_start(python, amplint, options.repeat, directory, env)
            return 0
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
        server_start(python, amplint, options.repeat, directory, env)
        if options.importtime:
            for name, command in calls.items():
                if name != "python -c pass":
                    print(f"\n{name}: slowest imports")
                    print("\n".join(slowest_imports(command, directory, env)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
