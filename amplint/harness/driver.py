"""The child side of `amplint verify`: run fixture scripts one after another in one process.

Started as `python -m amplint.harness.driver SPEC`, where SPEC is a JSON list of
`{"label": "fixtures/AMP003/buggy.py (float16)", "script": PATH, "argv": [...]}`. Importing
torch and building the first optimizer (which imports `torch._dynamo`) costs 2-4 s of CPU in
every fresh process; running many scripts in one process pays that once. Each script still
runs as `__main__` with fresh globals, its own argv, its own folder first on sys.path (as
`python path/to/script.py` would have it) and its own captured stdout, and an exception in
one is reported for that script alone. Before each script a line on stderr names it, so that
the parent can time each script and, when it has to kill a hung process, say which one hung.

Each finished script adds one JSON line to stdout, `{"label", "stdout", "error"}`, flushed at
once so that what finished before a hang still reaches the parent.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import runpy
import sys
from typing import Dict, List, Optional

STARTING = "amplint-verify: starting "


def run_one(script: str, argv: List[str]) -> Dict[str, Optional[str]]:
    captured = io.StringIO()
    saved_argv, saved_path = sys.argv, list(sys.path)
    sys.argv = [script] + list(argv)
    sys.path.insert(0, os.path.dirname(os.path.abspath(script)))
    error: Optional[str] = None
    try:
        with contextlib.redirect_stdout(captured):
            runpy.run_path(script, run_name="__main__")
    except SystemExit as stop:
        if stop.code not in (None, 0):
            error = f"exited with {stop.code}"
    except Exception as exception:  # one broken script must not hide its twin's measurements
        message = str(exception).strip().splitlines()
        error = f"raised {type(exception).__name__}" + (f": {message[0]}" if message else "")
    finally:
        sys.argv, sys.path[:] = saved_argv, saved_path
    return {"stdout": captured.getvalue(), "error": error}


def main(argv: List[str]) -> int:
    for run in json.loads(argv[0]):
        print(STARTING + run["label"], file=sys.stderr, flush=True)
        report = {"label": run["label"], **run_one(run["script"], run["argv"])}
        sys.stdout.write(json.dumps(report) + "\n")
        sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
