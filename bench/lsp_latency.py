#!/usr/bin/env python3
"""Editor latency: how long `amplint server` takes to publish diagnostics after an edit.

    python bench/lsp_latency.py                    # 20 edits of a ~1,000-line training script
    python bench/lsp_latency.py --edits 50 --lines 1500
    python bench/lsp_latency.py --file /tmp/corpus/yolov5/train.py   # a real script of yours
    python bench/lsp_latency.py --server "python -m amplint server"   # another build's server
    python bench/lsp_latency.py --json

It starts the server over stdio the way an editor does, opens a training script made of the
repository's own runtime fixtures (`fixtures/AMP*/buggy.py`, joined until the file has
`--lines` lines: real training loops with real AMP mistakes, a dense file for its size), waits
for its first diagnostics, then makes `--edits` edits one at a time, each changing the value
on its last line (`LEARNING_RATE = ...`, an incremental change as editors send them), and measures
the wall time from sending the change to receiving `textDocument/publishDiagnostics` for
that version. Edits are `--pause` seconds apart, longer than a lint, so each one is a
keystroke after a pause, not a burst. It also reports the server's CPU (with its workers)
per edit, read from /proc where there is one. Then `--bursts` bursts of typing (five
keystrokes 80 ms apart): the time from each burst's last keystroke to its diagnostics, and
how many of a burst's earlier versions were published (the server drops them: 0).

A script people run, never a test: nothing asserts on time. The issue's target is a median
of 300 ms or less on the development machine.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from typing import Any, Dict, List, Optional

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EDITED = "LEARNING_RATE = "
TYPING_KEYS, TYPING_GAP = 5, 0.08  # a burst: five keystrokes 80 ms apart


def training_script(lines: int) -> str:
    """The fixtures' buggy scripts joined until there are `lines` lines."""
    parts = []
    count = 0
    for path in sorted(glob.glob(os.path.join(REPO, "fixtures", "AMP*", "buggy.py"))):
        with open(path, encoding="utf-8") as handle:
            text = handle.read()
        parts.append(f"\n\n# ---- {os.path.relpath(path, REPO)}\n\n" + text)
        count += text.count("\n") + 4
        if count >= lines:
            break
    return "".join(parts)


def with_edited_line(text: str) -> str:
    """`text` and, last, the line the edits change."""
    return text + ("" if text.endswith("\n") or not text else "\n") + f"{EDITED}0.001\n"


class Client:
    """A minimal LSP client over the server's stdin and stdout: requests, notifications, and
    every publishDiagnostics with the time it arrived."""

    def __init__(self, command: List[str], cwd: str) -> None:
        self.stderr = tempfile.TemporaryFile()
        self.process = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.stderr, cwd=cwd)
        self.ids = 0
        self.responses: Dict[int, Any] = {}
        self.published: List[tuple] = []  # (arrival, uri, version, number of diagnostics)
        self.condition = threading.Condition()
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        stream = self.process.stdout
        assert stream is not None
        while True:
            length = None
            while True:
                line = stream.readline()
                if not line:
                    return
                if line in (b"\r\n", b"\n"):
                    break
                name, _, value = line.decode("ascii").partition(":")
                if name.strip().lower() == "content-length":
                    length = int(value)
            if length is None:
                continue
            message = json.loads(stream.read(length))
            now = time.perf_counter()
            with self.condition:
                if message.get("method") == "textDocument/publishDiagnostics":
                    params = message["params"]
                    self.published.append((now, params["uri"], params.get("version"), len(params["diagnostics"])))
                elif "id" in message and "method" not in message:
                    self.responses[message["id"]] = message
                self.condition.notify_all()

    def send(self, message: Dict[str, Any]) -> None:
        body = json.dumps({"jsonrpc": "2.0", **message}).encode("utf-8")
        assert self.process.stdin is not None
        self.process.stdin.write(b"Content-Length: %d\r\n\r\n" % len(body) + body)
        self.process.stdin.flush()

    def request(self, method: str, params: Any, timeout: float = 60) -> Any:
        self.ids += 1
        ident = self.ids
        self.send({"id": ident, "method": method, "params": params})
        with self.condition:
            if not self.condition.wait_for(lambda: ident in self.responses, timeout):
                raise TimeoutError(f"no answer to {method}")
            return self.responses.pop(ident)

    def notify(self, method: str, params: Any) -> None:
        self.send({"method": method, "params": params})

    def wait_published(self, uri: str, version: int, timeout: float = 120) -> tuple:
        def found() -> Optional[tuple]:
            return next((p for p in self.published if p[1] == uri and p[2] == version), None)

        with self.condition:
            if not self.condition.wait_for(lambda: found() is not None, timeout):
                raise TimeoutError(f"no diagnostics for version {version} within {timeout} s; the server said:\n{self.said()}")
            result = found()
            assert result is not None
            return result

    def said(self) -> str:
        """The last of what the server wrote on standard error."""
        self.stderr.seek(0)
        return self.stderr.read().decode("utf-8", "replace")[-4000:]

    def close(self) -> None:
        try:
            self.request("shutdown", None, timeout=10)
            self.notify("exit", None)
            self.process.wait(timeout=10)
        except Exception:
            self.process.kill()
            self.process.wait()


def tree_cpu(pid: int) -> Optional[float]:
    """CPU seconds of a process and its children, living and reaped (Linux /proc)."""
    ticks = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
    total = 0.0
    pids = [pid]
    seen = set()
    while pids:
        current = pids.pop()
        if current in seen:
            continue
        seen.add(current)
        try:
            with open(f"/proc/{current}/stat") as handle:
                fields = handle.read().rsplit(")", 1)[1].split()
        except OSError:
            if current == pid:
                return None
            continue
        # utime, stime, cutime, cstime: fields 14-17 of stat, 12-15 after the name.
        total += sum(int(value) for value in fields[11:15]) / ticks
        # Children are listed by the thread that started them (the server's lanes).
        for children in glob.glob(f"/proc/{current}/task/*/children"):
            try:
                with open(children) as handle:
                    pids.extend(int(child) for child in handle.read().split())
            except OSError:
                pass
    return total


def measure(command: List[str], text: str, edits: int, pause: float, bursts: int = 0) -> Dict[str, Any]:
    text = with_edited_line(text)
    edited = text.count("\n") - 1
    with tempfile.TemporaryDirectory(prefix="amplint-lsp-bench-") as workdir:
        path = os.path.join(workdir, "train.py")
        with open(path, "w", encoding="utf-8") as handle:
            handle.write(text)
        uri = "file://" + path
        client = Client(command, workdir)
        try:
            client.request(
                "initialize",
                {"processId": os.getpid(), "rootUri": "file://" + workdir, "capabilities": {}},
            )
            client.notify("initialized", {})
            started = time.perf_counter()
            client.notify(
                "textDocument/didOpen",
                {"textDocument": {"uri": uri, "languageId": "python", "version": 1, "text": text}},
            )
            first = client.wait_published(uri, 1)
            open_latency = first[0] - started
            time.sleep(pause)
            latencies, cpus = [], []
            version = 1

            def edit() -> float:
                """Change the edited line's value; when the change was sent."""
                nonlocal version
                version += 1
                sent = time.perf_counter()
                client.notify(
                    "textDocument/didChange",
                    {
                        "textDocument": {"uri": uri, "version": version},
                        "contentChanges": [
                            {
                                "range": {
                                    "start": {"line": edited, "character": len(EDITED)},
                                    "end": {"line": edited, "character": len(EDITED) + 5},
                                },
                                "text": f"0.00{version % 9 + 1}",
                            }
                        ],
                    },
                )
                return sent

            for _ in range(edits):
                before = tree_cpu(client.process.pid)
                sent = edit()
                arrived = client.wait_published(uri, version)
                latencies.append(arrived[0] - sent)
                after = tree_cpu(client.process.pid)
                if before is not None and after is not None:
                    cpus.append(after - before)
                time.sleep(pause)
            # Typing: bursts of keystrokes `TYPING_GAP` apart; from the last one of each to
            # its diagnostics, and how many versions of a burst were published before its last.
            typing, stale = [], 0
            for _ in range(bursts):
                first_version = version + 1
                for _ in range(TYPING_KEYS - 1):
                    edit()
                    time.sleep(TYPING_GAP)
                sent = edit()
                typing.append(client.wait_published(uri, version)[0] - sent)
                stale += sum(1 for p in client.published if p[1] == uri and first_version <= p[2] < version)
                time.sleep(pause)
        finally:
            client.close()
    return {
        "command": command,
        "lines": text.count("\n"),
        "findings": first[3],
        "edits": edits,
        "open_ms": open_latency * 1000,
        "median_ms": statistics.median(latencies) * 1000,
        "p90_ms": sorted(latencies)[max(0, int(len(latencies) * 0.9) - 1)] * 1000,
        "min_ms": min(latencies) * 1000,
        "max_ms": max(latencies) * 1000,
        "cpu_ms_per_edit": statistics.median(cpus) * 1000 if cpus else None,
        "typing_bursts": bursts,
        "typing_median_ms": statistics.median(typing) * 1000 if typing else None,
        "typing_stale_published": stale,
    }


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--server", default=f"{shlex.quote(sys.executable)} -m amplint server", help="the command that starts the server (default: this Python's amplint)")
    parser.add_argument("--lines", type=int, default=1000, help="lines of the training script made of the fixtures (default: 1000)")
    parser.add_argument("--file", help="lint this file's text instead (it is copied, never changed)")
    parser.add_argument("--edits", type=int, default=20, help="edits measured (default: 20)")
    parser.add_argument("--pause", type=float, default=1.0, help="seconds between edits (default: 1.0)")
    parser.add_argument("--bursts", type=int, default=5, help=f"typing bursts of {TYPING_KEYS} keystrokes {TYPING_GAP * 1000:.0f} ms apart measured after the edits (default: 5)")
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    args = parser.parse_args(argv)
    if args.file:
        with open(args.file, encoding="utf-8") as handle:
            text = handle.read()
    else:
        text = training_script(args.lines)
    result = measure(shlex.split(args.server), text, args.edits, args.pause, args.bursts)
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    cpu = f"{result['cpu_ms_per_edit']:.0f} ms" if result["cpu_ms_per_edit"] is not None else "n/a"
    what = os.path.basename(args.file) if args.file else "training script (fixtures)"
    print(f"amplint server: {result['lines']}-line {what}, {result['findings']} findings, {result['edits']} edits")
    print(f"  first diagnostics after open   {result['open_ms']:7.0f} ms")
    print(f"  edit -> diagnostics, median    {result['median_ms']:7.0f} ms   (target <= 300 ms)")
    print(f"                       p90       {result['p90_ms']:7.0f} ms")
    print(f"                       min..max  {result['min_ms']:.0f}..{result['max_ms']:.0f} ms")
    print(f"  server CPU per edit, median    {cpu:>10}   (the server and its workers)")
    if result["typing_median_ms"] is not None:
        print(
            f"  typing: last key -> diagnostics {result['typing_median_ms']:6.0f} ms   (median of {result['typing_bursts']} bursts; "
            f"{result['typing_stale_published']} earlier versions published)"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
