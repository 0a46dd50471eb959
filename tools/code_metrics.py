"""Structure figures of issue 11, measured on src/gputriage: import cycles (module-
and function-level imports both count; ``if TYPE_CHECKING:`` imports, which never run,
do not), ``_private`` names imported across modules, functions over a cyclomatic-
complexity bound (radon's measure when radon is installed, as issue 11 counted it; else
ruff's mccabe check, which counts fewer), and rules that reach past their declared
inputs (take the whole fact store, or read the snapshot).

    python tools/code_metrics.py [--complexity 25] [--list]
"""

from __future__ import annotations

import argparse
import ast
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

SRC = Path(__file__).resolve().parent.parent / "src"
PACKAGE = "gputriage"


def modules() -> dict[str, Path]:
    found = {}
    for path in sorted((SRC / PACKAGE).rglob("*.py")):
        parts = list(path.relative_to(SRC).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def _resolve(name: str, level: int, here: str, is_package: bool) -> str:
    if not level:
        return name
    base = here.split(".")
    base = base if is_package else base[:-1]
    base = base[: len(base) - (level - 1)]
    return ".".join([*base, name] if name else base)


def imports(mods: dict[str, Path]) -> Iterator[tuple[str, str, list[str]]]:
    """(importer, imported module, names) for every import of the package's own code
    that runs (module- or function-level; ``if TYPE_CHECKING:`` imports never run)."""
    for mod, path in mods.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        is_package = path.name == "__init__.py"
        typing_only = _in_type_checking(tree)
        for node in ast.walk(tree):
            if getattr(node, "lineno", None) in typing_only:
                continue
            if isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name.startswith(PACKAGE):
                        yield mod, alias.name, []
            elif isinstance(node, ast.ImportFrom):
                target = _resolve(node.module or "", node.level, mod, is_package)
                if not target.startswith(PACKAGE):
                    continue
                names = [a.name for a in node.names]
                submodules = [f"{target}.{n}" for n in names if f"{target}.{n}" in mods]
                for sub in submodules:
                    yield mod, sub, []
                yield mod, target, [n for n in names if f"{target}.{n}" not in mods]


def _in_type_checking(tree: ast.AST) -> set[int]:
    lines: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for sub in ast.walk(node):
                if hasattr(sub, "lineno"):
                    lines.add(sub.lineno)
    return lines


def cycles(mods: dict[str, Path]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    graph: dict[str, set[str]] = {m: set() for m in mods}
    for src, dst, _ in imports(mods):
        if dst in graph and dst != src and not src.startswith(dst + "."):
            graph[src].add(dst)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []
    counter = 0
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on.add(root)
        while work:
            node, it = work[-1]
            nxt = next(it, None)
            if nxt is None:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    comp = []
                    while True:
                        w = stack.pop()
                        on.discard(w)
                        comp.append(w)
                        if w == node:
                            break
                    if len(comp) > 1:
                        out.append(sorted(comp))
            elif nxt not in index:
                index[nxt] = low[nxt] = counter
                counter += 1
                stack.append(nxt)
                on.add(nxt)
                work.append((nxt, iter(sorted(graph[nxt]))))
            elif nxt in on:
                low[node] = min(low[node], index[nxt])
    return sorted(out)


def private_imports(mods: dict[str, Path]) -> list[str]:
    """``from x import _name`` across modules (a module's own package included)."""
    return sorted(f"{src} <- {dst}.{n}" for src, dst, names in imports(mods)
                  for n in names if n.startswith("_") and not n.startswith("__"))


def complex_functions(bound: int) -> list[str]:
    try:
        from radon.complexity import cc_visit
    except ImportError:
        return _ruff_complex(bound)
    found = []
    for path in sorted((SRC / PACKAGE).rglob("*.py")):
        for block in cc_visit(path.read_text(encoding="utf-8")):
            if block.complexity > bound:
                found.append(f"{path.relative_to(SRC)}:{block.lineno}: {block.name} "
                             f"({block.complexity})")
    return sorted(found)


def _is_rule(func: ast.FunctionDef) -> bool:
    return any(isinstance(d, ast.Call) and getattr(d.func, "id", "") == "rule"
               for d in func.decorator_list)


def undeclared_reads(mods: dict[str, Path]) -> list[str]:
    """Rules that take the fact store (``facts``) instead of their facts by name, and
    rule modules that import gputriage.facts.store or touch ``.snapshot``."""
    found = []
    for mod, path in mods.items():
        if not mod.startswith(f"{PACKAGE}.rules."):
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef) and _is_rule(node):
                if any(a.arg == "facts" for a in node.args.args):
                    found.append(f"{mod}.{node.name} takes the fact store")
            elif isinstance(node, ast.ImportFrom) and node.module == f"{PACKAGE}.facts":
                found.append(f"{mod} imports {PACKAGE}.facts")
            elif isinstance(node, ast.Attribute) and node.attr in ("snapshot", "_parse"):
                found.append(f"{mod}:{node.lineno} reads .{node.attr}")
    return sorted(found)


def _ruff_complex(bound: int) -> list[str]:
    cmd = [sys.executable, "-m", "ruff", "check", str(SRC), "--select", "C901",
           "--config", f"lint.mccabe.max-complexity={bound}", "--output-format", "json",
           "--no-cache", "--exit-zero"]
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    rows = json.loads(done.stdout or "[]")
    return sorted(f"{Path(r['filename']).relative_to(SRC)}:{r['location']['row']}: "
                  f"{r['message']}" for r in rows)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--complexity", type=int, default=25)
    ap.add_argument("--list", action="store_true", help="list every item, not only counts")
    args = ap.parse_args()
    mods = modules()
    found = {"import cycles": [" <-> ".join(c) for c in cycles(mods)],
             "private names imported across modules": private_imports(mods),
             f"functions with complexity > {args.complexity}":
                 complex_functions(args.complexity),
             "rules reading past their declared facts": undeclared_reads(mods)}
    for title, items in found.items():
        print(f"{title}: {len(items)}")
        if args.list:
            for item in items:
                print(f"  {item}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
