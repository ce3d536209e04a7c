"""The layout's rules (README "Layout"), checked over the source with `ast` so
they stay true: each folder one process or one library, imports only downward.

- `orchestrator/` (the server) imports neither `workers/`, `webui/` nor `cli/`;
  `workers/` and `webui/` do not import `cli/`; nothing imports `cli/`.
- Its engine imports nothing of the SDK but the wire: the generated protobuf
  modules, the two grammars client and server share (`sdk.durations`,
  `sdk.retention`) and the protobuf timestamps' conversions (`sdk.stamps`),
  which import nothing else of the project. (A rule about the
  source: Python still runs `sdk/__init__` when it loads them.)

Only static imports are seen (an `importlib` call is not), and only in the
packages above; `tests/`, `bench/`, `chaos/` and `examples/` may import anything.
- Only `orchestrator/store/` imports SQLAlchemy (and Alembic).
- No import circle among the project's modules (imports made only for type
  checking count: they are circles for a reader all the same).
- No module over 600 lines (generated code aside).
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from collections.abc import Iterator
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("orchestrator", "workers", "sdk", "webui", "cli")
GENERATED = ("sdk", "api")
MAX_LINES = 600


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


@cache
def modules() -> dict[str, Path]:
    found: dict[str, Path] = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            if path.relative_to(ROOT).parts[:2] == GENERATED:
                continue
            found[_module_name(path)] = path
    return found


def _targets(module: str, node: ast.Import | ast.ImportFrom) -> Iterator[str]:
    """The dotted names an import statement reaches (relative imports resolved)."""
    if isinstance(node, ast.Import):
        yield from (alias.name for alias in node.names)
        return
    base = node.module or ""
    if node.level:
        parts = module.split(".")
        if modules()[module].name != "__init__.py":
            parts = parts[:-1]
        parts = parts[: len(parts) - (node.level - 1)]
        base = ".".join([*parts, base] if base else parts)
    for alias in node.names:
        yield f"{base}.{alias.name}"


def _project_module(name: str) -> str | None:
    """The project module a dotted name lands in (the longest known prefix); the
    generated protobuf modules are one, `sdk.api`."""
    if name == "sdk.api" or name.startswith("sdk.api."):
        return "sdk.api"
    parts = name.split(".")
    while parts:
        candidate = ".".join(parts)
        if candidate in modules():
            return candidate
        parts.pop()
    return None


@cache
def imports() -> dict[str, tuple[frozenset[str], frozenset[str]]]:
    """Each module's (project modules, outside top-level packages) imported,
    anywhere in it: module level, functions, `if TYPE_CHECKING:` blocks."""
    out: dict[str, tuple[frozenset[str], frozenset[str]]] = {}
    for module, path in modules().items():
        inside: set[str] = set()
        outside: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if not isinstance(node, ast.Import | ast.ImportFrom):
                continue
            for name in _targets(module, node):
                target = _project_module(name)
                if target is not None:
                    inside.add(target)
                elif name.split(".")[0] not in PACKAGES:
                    outside.add(name.split(".")[0])
                else:  # a project name that is no module: the checks would miss it
                    raise AssertionError(f"{module}: {name} is not a module of the project")
        inside.discard(module)
        out[module] = (frozenset(inside), frozenset(outside))
    return out


def _top(module: str) -> str:
    return module.split(".")[0]


def test_the_rules_see_the_project() -> None:
    """A guard for the checks below: they read real modules and real imports."""
    assert "orchestrator.engine.events" in modules()
    assert "orchestrator.store.schema" in modules()
    assert "sqlalchemy" in imports()["orchestrator.store.schema"][1]
    assert any(_top(m) == "sdk" for m in imports()["workers.decider"][0])


def test_imports_go_only_downward() -> None:
    forbidden = {
        "orchestrator": {"workers", "webui", "cli"},
        "sdk": {"orchestrator", "workers", "webui", "cli"},
        "workers": {"orchestrator", "webui", "cli"},
        "webui": {"orchestrator", "cli"},
    }
    wrong = sorted(
        f"{module} imports {target}"
        for module, (inside, _) in imports().items()
        for target in inside
        if _top(target) in forbidden.get(_top(module), set())
    )
    assert wrong == []
    # The engine is the bottom of the server: pure, below everything else in it.
    above = sorted(
        f"{module} imports {target}"
        for module, (inside, _) in imports().items()
        if module.startswith("orchestrator.engine")
        for target in inside
        if _top(target) == "orchestrator" and not target.startswith("orchestrator.engine")
    )
    assert above == []


# What the server's engine may use of the SDK: the wire itself, modules that
# import nothing else of the project (Python still runs `sdk/__init__` first).
WIRE = frozenset({"sdk.api", "sdk.durations", "sdk.retention", "sdk.stamps"})


def test_the_engine_uses_only_the_wire_of_the_sdk() -> None:
    wrong = sorted(
        f"{module} imports {target}"
        for module, (inside, _) in imports().items()
        if module.startswith("orchestrator.engine")
        for target in inside
        if _top(target) == "sdk" and target not in WIRE
    )
    assert wrong == []
    beyond = sorted(
        f"{module} imports {target}"
        for module in WIRE - {"sdk.api"}
        for target in imports()[module][0]
        if target not in WIRE
    )
    assert beyond == []


def test_only_the_store_speaks_sql() -> None:
    wrong = sorted(
        f"{module} imports {name}"
        for module, (_, outside) in imports().items()
        if not module.startswith("orchestrator.store")
        for name in outside & {"sqlalchemy", "alembic"}
    )
    assert wrong == []


def test_no_import_circle() -> None:
    graph = {module: set(inside) for module, (inside, _) in imports().items()}
    assert _circles(graph) == []


# Where the size rule looks besides the packages: every Python file of the repository.
SIZED = (*PACKAGES, "tests", "bench", "chaos", "examples", "scripts")


def test_no_module_over_the_size_limit() -> None:
    files = [
        path
        for folder in SIZED
        for path in sorted((ROOT / folder).rglob("*.py"))
        if path.relative_to(ROOT).parts[:2] != GENERATED
    ]
    assert len(files) > len(modules())  # the tests and tools are counted too
    long = sorted(
        f"{path.relative_to(ROOT)}: {n} lines"
        for path in files
        if (n := len(path.read_text().splitlines())) > MAX_LINES
    )
    assert long == []


def _circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return sorted(found)


def test_a_circle_is_found() -> None:
    """The circle check itself, on a graph with one circle and one chain."""
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": set()}
    assert _circles(graph) == [["a", "b", "c"]]


def test_loading_the_engine_loads_only_the_wire_of_the_sdk() -> None:
    """At run time too: `sdk/__init__` runs when the engine imports `sdk.api`, and it
    must not load the clients and workers (it names them lazily)."""
    engine = sorted(m for m in imports() if m.startswith("orchestrator.engine"))
    script = (
        "import importlib, json, sys\n"
        f"for name in {engine!r}: importlib.import_module(name)\n"
        "print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in ('sdk', 'grpc'))))"
    )
    out = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, check=True
    )
    loaded = json.loads(out.stdout)
    beyond = [m for m in loaded if m != "sdk" and not m.startswith("sdk.api") and m not in WIRE]
    assert beyond == []
