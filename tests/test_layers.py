"""The layering of docs/contributing.md, enforced: a module imports only from its own
layer or below, and no import cycle exists between modules -- imports under
``if TYPE_CHECKING:`` and inside functions count as much as those at the top.

Each package and root module sits in one layer; a new one must be placed here and in
the guide's table (the last test checks the guide names every one)."""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parent.parent / "src" / "gputriage"
GUIDE = Path(__file__).resolve().parent.parent / "docs" / "contributing.md"

# bottom first: a unit imports from its own layer or any layer below
LAYERS: tuple[tuple[str, ...], ...] = (
    ("__init__", "errors", "vocabulary", "sources", "schemas"),
    ("text", "io", "model", "status"),
    ("knowledge",),
    ("parsers",),
    ("logscan",),
    ("snapshot",),
    ("ingest", "collect", "scenarios"),
    ("facts",),
    ("rules", "next_steps"),
    ("engine",),
    ("results", "state", "drain", "nccl", "weights"),
    ("fleet",),
    ("views",),
    ("watch",),
    ("commands", "assist"),
    ("cli", "__main__"),
)
LAYER_OF = {unit: i for i, units in enumerate(LAYERS) for unit in units}


def module_name(path: Path) -> str:
    parts = path.relative_to(SRC.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def unit_of(module: str) -> str:
    """The layer unit of a module: its top package, or the root module's own name."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


MODULES = {module_name(p): p for p in SRC.rglob("*.py")}


def imported(module: str, path: Path) -> Iterator[tuple[int, str]]:
    """Every gputriage module ``module`` imports, anywhere in its body: (line, name)."""
    is_package = path.name == "__init__.py"
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = module.split(".")
                base = base if is_package else base[:-1]
                base = base[: len(base) - node.level + 1]
                target = ".".join([*base, node.module] if node.module else base)
            else:
                target = node.module or ""
            submodules = [f"{target}.{a.name}" for a in node.names
                          if f"{target}.{a.name}" in MODULES]
            # ``from package import module`` depends on the module, not on the package
            names = submodules if len(submodules) == len(node.names) else [target, *submodules]
        else:
            continue
        for name in names:
            if name in MODULES and name != module:
                yield node.lineno, name


GRAPH = {m: sorted(set(imported(m, p))) for m, p in MODULES.items()}


def test_every_package_and_root_module_has_a_layer() -> None:
    units = {unit_of(m) for m in MODULES}
    assert not units - LAYER_OF.keys(), (
        f"place {sorted(units - LAYER_OF.keys())} in a layer of tests/test_layers.py "
        "and of docs/contributing.md")
    assert not LAYER_OF.keys() - units, f"no such package: {sorted(LAYER_OF.keys() - units)}"


def test_no_module_imports_from_a_higher_layer() -> None:
    upward = [
        f"{MODULES[m].relative_to(SRC.parent)}:{line} imports {target} "
        f"(layer {LAYER_OF[unit_of(target)]} {unit_of(target)} above "
        f"layer {LAYER_OF[unit_of(m)]} {unit_of(m)})"
        for m, edges in GRAPH.items() for line, target in edges
        if LAYER_OF[unit_of(target)] > LAYER_OF[unit_of(m)]
    ]
    assert not upward, "\n".join(upward)


def find_cycle(graph: dict[str, list[str]]) -> list[str] | None:
    """One import cycle as the modules along it, or None (iterative DFS)."""
    state: dict[str, int] = {}  # 1 on the path, 2 done
    for start in sorted(graph):
        if state.get(start):
            continue
        path = [start]
        stack = [iter(graph[start])]
        state[start] = 1
        while stack:
            nxt = next(stack[-1], None)
            if nxt is None:
                state[path.pop()] = 2
                stack.pop()
            elif state.get(nxt) == 1:
                return [*path[path.index(nxt):], nxt]
            elif not state.get(nxt):
                state[nxt] = 1
                path.append(nxt)
                stack.append(iter(graph[nxt]))
    return None


def test_no_import_cycles_typing_only_and_function_level_included() -> None:
    graph = {m: [t for _, t in edges] for m, edges in GRAPH.items()}
    # a package's __init__ importing its own modules is how a package lists them
    cycle = find_cycle(graph)
    assert cycle is None, "import cycle: " + " -> ".join(cycle or ())


def test_the_cycle_finder_finds_one() -> None:
    assert find_cycle({"a": ["b"], "b": ["c"], "c": ["a"]}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": ["b", "c"], "b": ["c"], "c": []}) is None


@pytest.mark.parametrize("source, expected", [
    ("from gputriage.rules import base\n", {"gputriage.rules.base"}),
    ("if TYPE_CHECKING:\n    from gputriage.facts.store import Facts\n", {"gputriage.facts.store"}),
    ("def f():\n    import gputriage.views.console\n", {"gputriage.views.console"}),
])
def test_every_kind_of_import_is_seen(tmp_path: Path, source: str, expected: set[str]) -> None:
    path = tmp_path / "probe.py"
    path.write_text(source)
    assert {name for _, name in imported("gputriage.probe", path)} >= expected


def test_the_guide_names_every_layer_unit() -> None:
    table = GUIDE.read_text().split("<!-- layers -->")[1]
    named = set(re.findall(r"`(\w+)/?`", table))
    missing = [u for u in LAYER_OF if u not in {"__init__", "__main__"} and u not in named]
    assert not missing, f"docs/contributing.md's layer table lacks {missing}"
