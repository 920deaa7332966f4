"""Fault-injection families of the reliability rounds: generate, mutate, lint three ways, fix twice.

    python bench/reliability.py programs OUT --grammar 1400 --node 600   # hypothesmith, raw + AMP-ified
    python bench/reliability.py mutants OUT --count 1500 CORPUS...        # mutants of real AMP scripts
    python bench/reliability.py compare DIR                               # -j1/-j2 cold/warm/hash seeds
    python bench/reliability.py fix DIR                                   # then --fix twice on copies
    python bench/reliability.py noqa DIR                                  # and --add-noqa twice, then check

Every command prints one JSON object of counts; `compare` and `fix` keep their evidence (outputs,
diffs) under DIR's sibling `DIR.runs/`. Nothing here is a test: it is what the reliability reports
were measured with, kept so that the next round measures the same thing.
"""

from __future__ import annotations

import argparse
import ast
import hashlib
import io
import json
import keyword
import os
import random
import re
import shutil
import subprocess
import sys
import tokenize
from pathlib import Path

AMP_HEADER = (
    "import torch\n"
    "from torch.cuda.amp import GradScaler, autocast\n"
    "scaler = torch.cuda.amp.GradScaler()\n"
    "optimizer = torch.optim.SGD([], lr=0.1)\n"
)
AMP_WORDS = ["scaler", "optimizer", "autocast", "loss", "backward", "step", "unscale_", "update",
             "model", "zero_grad", "GradScaler", "scale", "amp", "torch"]
INSERTS = [
    "with torch.autocast('cuda'):",
    "with torch.autocast('cuda', dtype=torch.float16):",
    "scaler.scale(loss).backward()",
    "loss.backward()",
    "scaler.step(optimizer)",
    "optimizer.step()",
    "scaler.update()",
    "scaler.unscale_(optimizer)",
    "optimizer.zero_grad()",
    "scaler = torch.cuda.amp.GradScaler()",
    "torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)",
    "pass  # noqa",
    "loss.backward()  # noqa: AMP001",
    "pass  # amplint: noqa",
]


def parses(source: str) -> bool:
    try:
        ast.parse(source)
    except (SyntaxError, ValueError):
        return False
    return True


# ---------------------------------------------------------------- family 1a: hypothesmith programs

def draw(strategy, count: int, seed: int) -> list[str]:
    from hypothesis import HealthCheck, given, settings
    from hypothesis import seed as with_seed

    drawn: list[str] = []

    @with_seed(seed)
    @settings(max_examples=count, database=None, deadline=None, suppress_health_check=list(HealthCheck))
    @given(strategy)
    def collect(source):
        drawn.append(source)

    collect()
    return drawn


def amp_ify(source: str, rng: random.Random) -> str:
    """Prepend an AMP header and rename about half of the identifiers to AMP words."""
    try:
        tokens = list(tokenize.generate_tokens(io.StringIO(source).readline))
    except (tokenize.TokenError, SyntaxError, IndentationError):
        return AMP_HEADER + source
    names = sorted({t.string for t in tokens if t.type == tokenize.NAME and not keyword.iskeyword(t.string)
                    and not keyword.issoftkeyword(t.string)})
    rng.shuffle(names)
    words = AMP_WORDS[:]
    rng.shuffle(words)
    renames = dict(zip(names[: max(1, len(names) // 2)], words))
    lines = source.splitlines(keepends=True)
    for t in reversed(tokens):  # right to left, so earlier columns stay valid
        if t.type == tokenize.NAME and t.string in renames and t.start[0] == t.end[0]:
            row, col = t.start[0] - 1, t.start[1]
            lines[row] = lines[row][:col] + renames[t.string] + lines[row][t.end[1]:]
    renamed = "".join(lines)
    return AMP_HEADER + (renamed if parses(renamed) else source)


def programs(out: Path, grammar: int, node: int, seed: int) -> dict:
    import hypothesmith

    rng = random.Random(seed)
    seen: set[str] = set()
    counts = {"grammar": 0, "node": 0, "files": 0}
    for kind, strategy, count in [("grammar", hypothesmith.from_grammar(), grammar),
                                  ("node", hypothesmith.from_node(), node)]:
        batch = 0
        while counts[kind] < count and batch < 50:
            for source in draw(strategy, min(200, 2 * (count - counts[kind])), seed * 1000 + batch):
                if source in seen or counts[kind] >= count:
                    continue
                seen.add(source)
                name = f"{kind[0]}{counts[kind]:05d}.py"
                for sub, text in [("raw", source), ("amp", amp_ify(source, rng))]:
                    (out / sub).mkdir(parents=True, exist_ok=True)
                    (out / sub / name).write_text(text, encoding="utf-8", newline="")
                    counts["files"] += 1
                counts[kind] += 1
            batch += 1
    return counts


# ---------------------------------------------------------------- family 1b: mutants of real scripts

def amp_scripts(roots: list[Path], limit: int, rng: random.Random) -> list[Path]:
    found = []
    for root in roots:
        for path in sorted(root.rglob("*.py")):
            try:
                text = path.read_text(encoding="utf-8")
            except (OSError, UnicodeDecodeError):
                continue
            if ("autocast" in text or "GradScaler" in text) and parses(text):
                found.append(path)
    rng.shuffle(found)
    return sorted(found[:limit])


def mutate(source: str, rng: random.Random) -> str:
    lines = source.splitlines(keepends=True) or ["\n"]
    for _ in range(rng.randint(1, 4)):
        i = rng.randrange(len(lines))
        indent = re.match(r"[ \t]*", lines[i]).group()
        op = rng.choice(["delete", "duplicate", "indent", "dedent", "swap", "insert", "insert", "insert"])
        if op == "delete" and len(lines) > 1:
            del lines[i]
        elif op == "duplicate":
            lines.insert(i, lines[i])
        elif op == "indent":
            lines[i] = "    " + lines[i]
        elif op == "dedent" and lines[i].startswith("    "):
            lines[i] = lines[i][4:]
        elif op == "swap":
            a, b = rng.sample(["scaler", "optimizer", "loss", "model", "autocast", "step", "backward"], 2)
            lines[i] = re.sub(rf"\b{a}\b", b, lines[i])
        elif op == "insert":
            line = rng.choice(INSERTS)
            if line.startswith("with "):
                lines.insert(i, f"{indent}{line}\n{indent}    pass\n")
            else:
                lines.insert(i, f"{indent}{line}\n")
    return "".join(lines)


def mutants(out: Path, roots: list[Path], count: int, scripts: int, seed: int) -> dict:
    rng = random.Random(seed)
    chosen = amp_scripts(roots, scripts, rng)
    out.mkdir(parents=True, exist_ok=True)
    made = tried = 0
    while made < count and tried < 20 * count:
        tried += 1
        source_path = rng.choice(chosen)
        mutant = mutate(source_path.read_text(encoding="utf-8"), rng)
        if parses(mutant):
            (out / f"m{made:05d}.py").write_text(mutant, encoding="utf-8", newline="")
            made += 1
    return {"scripts": len(chosen), "tried": tried, "mutants": made}


# ---------------------------------------------------------------- running amplint three ways

def lint(paths: list[str], *args: str, hashseed: str = "0", timeout: int = 3600) -> tuple[int, bytes, bytes]:
    env = dict(os.environ, PYTHONHASHSEED=hashseed, NO_COLOR="1")
    command = [sys.executable, "-m", "amplint", "check", *paths, "--output-format", "json-lines", *args]
    try:
        done = subprocess.run(command, capture_output=True, env=env, timeout=timeout)
    except subprocess.TimeoutExpired as expired:
        return -1, expired.stdout or b"", b"HANG"
    return done.returncode, done.stdout, done.stderr


def chunks(directory: Path, size: int) -> list[list[str]]:
    files = sorted(str(p) for p in directory.rglob("*.py"))
    return [files[i:i + size] for i in range(0, len(files), size)]


def compare(directory: Path, size: int, seeds: tuple[str, str]) -> dict:
    runs = directory.parent / (directory.name + ".runs")
    shutil.rmtree(runs, ignore_errors=True)
    runs.mkdir()
    ways = {
        "j1": ("-j1", "--no-cache"),
        "j2-cold": ("-j2", "--cache-dir", str(directory / ".amplint_fuzz_cache")),
        "j2-warm": ("-j2", "--cache-dir", str(directory / ".amplint_fuzz_cache")),
        "seed2": ("-j1", "--no-cache"),
    }
    counts = {"files": 0, "file_lints": 0, "tracebacks": 0, "internal_errors": 0, "hangs": 0,
              "differences": 0, "seed_differences": 0, "error_rows": 0, "findings": 0, "exit": {}}
    for n, files in enumerate(chunks(directory, size)):
        shutil.rmtree(directory / ".amplint_fuzz_cache", ignore_errors=True)
        counts["files"] += len(files)
        results = {}
        for way, args in ways.items():
            seed = seeds[1] if way == "seed2" else seeds[0]
            rc, out, err = lint(files, *args, hashseed=seed)
            results[way] = (rc, out)
            counts["file_lints"] += len(files)
            (runs / f"{n:03d}-{way}.out").write_bytes(out)
            (runs / f"{n:03d}-{way}.err").write_bytes(err)
            counts["tracebacks"] += err.count(b"Traceback") + out.count(b"Traceback")
            counts["internal_errors"] += (err + out).count(b"internal error")
            counts["hangs"] += rc == -1
        rc, out = results["j1"]
        counts["exit"][str(rc)] = counts["exit"].get(str(rc), 0) + 1
        rows = [json.loads(line) for line in out.splitlines()]
        counts["error_rows"] += sum(row["code"] is None for row in rows)
        counts["findings"] += sum(row["code"] is not None for row in rows)
        for way in ("j2-cold", "j2-warm"):
            if results[way] != results["j1"]:
                counts["differences"] += 1
                print(f"chunk {n}: {way} differs from j1", file=sys.stderr)
        if results["seed2"] != results["j1"]:
            counts["seed_differences"] += 1
            print(f"chunk {n}: PYTHONHASHSEED={seeds[1]} differs from {seeds[0]}", file=sys.stderr)
    shutil.rmtree(directory / ".amplint_fuzz_cache", ignore_errors=True)
    return counts


# ---------------------------------------------------------------- family 2a: --fix twice

def digest_tree(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


def fix(directory: Path, bystanders: int) -> dict:
    """--fix --unsafe-fixes, then --fix again, on copies of the files `compare` found a fix for,
    next to copies of files with findings but no fix (which must not change)."""
    runs = directory.parent / (directory.name + ".runs")
    rows = [json.loads(line) for out in sorted(runs.glob("*-j1.out")) for line in out.read_bytes().splitlines()]
    targets = sorted({row["filename"] for row in rows if row["fix"] is not None})
    others = sorted({row["filename"] for row in rows} - set(targets))[:bystanders]
    chosen = directory.parent / (directory.name + ".fix")
    shutil.rmtree(chosen, ignore_errors=True)
    chosen.mkdir()
    for name in targets:
        shutil.copy2(name, chosen / Path(name).name)
    for name in others:
        shutil.copy2(name, chosen / ("bystander_" + Path(name).name))
    before = digest_tree(chosen)
    rc1, out1, err1 = lint([str(chosen)], "--no-cache", "--fix", "--unsafe-fixes", "--show-fixes")
    after = digest_tree(chosen)
    rc2, _, err2 = lint([str(chosen)], "--no-cache", "--fix", "--unsafe-fixes")
    again = digest_tree(chosen)
    changed = [name for name in before if before[name] != after.get(name)]
    return {
        "targets": len(targets),
        "fixes_offered": sum(row["fix"] is not None for row in rows),
        "changed": len([c for c in changed if not c.startswith("bystander_")]),
        "changed_outside_targets": len([c for c in changed if c.startswith("bystander_")]),
        "do_not_parse": sum(not parses((chosen / name).read_text(encoding="utf-8")) for name in changed),
        "second_run_changes": sum(after[name] != again.get(name) for name in after),
        "tracebacks": (err1 + err2 + out1).count(b"Traceback"),
        "internal_errors": (err1 + err2 + out1).count(b"internal error"),
        "exit": [rc1, rc2],
    }


# ---------------------------------------------------------------- family 2b: --add-noqa twice

def noqa(directory: Path) -> dict:
    """--add-noqa twice on copies of the files `compare` found findings in, then a check: every
    file still parses, the second run adds nothing, and no finding is left unmarked."""
    runs = directory.parent / (directory.name + ".runs")
    rows = [json.loads(line) for out in sorted(runs.glob("*-j1.out")) for line in out.read_bytes().splitlines()]
    targets = sorted({row["filename"] for row in rows if row["code"] is not None})
    chosen = directory.parent / (directory.name + ".noqa")
    shutil.rmtree(chosen, ignore_errors=True)
    chosen.mkdir()
    for name in targets:
        shutil.copy2(name, chosen / Path(name).name)
    before = digest_tree(chosen)
    rc1, out1, err1 = lint([str(chosen)], "--no-cache", "--add-noqa")
    after = digest_tree(chosen)
    rc2, out2, err2 = lint([str(chosen)], "--no-cache", "--add-noqa")
    again = digest_tree(chosen)
    rc3, out3, err3 = lint([str(chosen)], "--no-cache")
    left = [json.loads(line) for line in out3.splitlines()]
    changed = [name for name in before if before[name] != after.get(name)]
    return {
        "files": len(targets),
        "changed": len(changed),
        "do_not_parse": sum(not parses((chosen / name).read_text(encoding="utf-8")) for name in changed),
        "second_run_changes": sum(after[name] != again.get(name) for name in after),
        "findings_left": sum(row["code"] not in (None, "AMP100") for row in left),
        "notes": err1.count(b"amplint: note:"),
        "tracebacks": (err1 + err2 + err3 + out1 + out2 + out3).count(b"Traceback"),
        "internal_errors": (err1 + err2 + err3 + out1 + out2 + out3).count(b"internal error"),
        "exit": [rc1, rc2, rc3],
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("programs")
    p.add_argument("out", type=Path)
    p.add_argument("--grammar", type=int, default=1400)
    p.add_argument("--node", type=int, default=600)
    p.add_argument("--seed", type=int, default=1)
    m = sub.add_parser("mutants")
    m.add_argument("out", type=Path)
    m.add_argument("roots", type=Path, nargs="+")
    m.add_argument("--count", type=int, default=1500)
    m.add_argument("--scripts", type=int, default=150)
    m.add_argument("--seed", type=int, default=1)
    c = sub.add_parser("compare")
    c.add_argument("directory", type=Path)
    c.add_argument("--chunk", type=int, default=250, help="files per amplint run (a hang costs one chunk)")
    c.add_argument("--seeds", nargs=2, default=["0", "1"], metavar="PYTHONHASHSEED")
    f = sub.add_parser("fix")
    f.add_argument("directory", type=Path, help="a directory `compare` has run on")
    f.add_argument("--bystanders", type=int, default=100)
    n = sub.add_parser("noqa")
    n.add_argument("directory", type=Path, help="a directory `compare` has run on")
    args = parser.parse_args(argv)
    if args.command == "programs":
        result = programs(args.out, args.grammar, args.node, args.seed)
    elif args.command == "mutants":
        result = mutants(args.out, args.roots, args.count, args.scripts, args.seed)
    elif args.command == "compare":
        result = compare(args.directory.resolve(), args.chunk, tuple(args.seeds))
    elif args.command == "fix":
        result = fix(args.directory.resolve(), args.bystanders)
    else:
        result = noqa(args.directory.resolve())
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
