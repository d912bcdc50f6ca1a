"""The code has one direction: no import circles between modules, no private names taken
from another package (docs/architecture.md)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from conftest import ROOT

PACKAGE = ROOT / "nsys2prv"


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _imports(path: Path) -> list[tuple[str, list[str]]]:
    """(module imported from, names) of every import in a file, lazy ones included, with
    relative imports resolved."""
    name = _module_name(path)
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out += [(a.name, []) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module != "__future__":
            base = package.split(".")
            if node.level:
                base = base[:len(base) - node.level + 1]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            out.append((module, [a.name for a in node.names]))
    return out


def _graph() -> dict[str, set[str]]:
    modules = {_module_name(p): p for p in PACKAGE.rglob("*.py")}
    graph: dict[str, set[str]] = {m: set() for m in modules}
    for m, path in modules.items():
        for target, names in _imports(path):
            if not target.startswith("nsys2prv"):
                continue
            # `from pkg import module` is an edge to the module, else to the package
            subs = [f"{target}.{n}" for n in names if f"{target}.{n}" in modules]
            for t in subs or [target]:
                if t in modules and t != m:
                    graph[m].add(t)
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_no_import_circles():
    # a package's __init__ importing its own modules (to collect them) is not a circle
    graph = {m: {t for t in ts if not (m and t.startswith(m + "."))} for m, ts in
             _graph().items()}
    assert _cycles(graph) == []


def test_the_check_finds_a_circle():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_no_private_names_across_packages():
    modules = {_module_name(p) for p in PACKAGE.rglob("*.py")}
    found = []
    for path in PACKAGE.rglob("*.py"):
        here = _module_name(path)
        here_pkg = here if path.name == "__init__.py" else here.rsplit(".", 1)[0]
        for target, names in _imports(path):
            if not target.startswith("nsys2prv"):
                continue
            is_package = (ROOT / target.replace(".", "/") / "__init__.py").exists()
            target_pkg = target if is_package else target.rsplit(".", 1)[0]
            for n in names:
                private = n.startswith("_") and not n.startswith("__")
                is_module = f"{target}.{n}" in modules
                if private and not is_module and target_pkg != here_pkg:
                    found.append(f"{here} takes {n} from {target}")
    assert found == []


MACHINE_PATH = re.compile(r"(?<![\w.~$])/(?:work|root|home/\w+)/")


def test_no_machine_paths():
    """Code, tests, docs and benchmarks name no folder of one machine: recordings, tools and
    data come from tests/data, PATH or an environment variable."""
    texts = [p for d in ("nsys2prv", "tests", "benchmarks", "docs", "tools", ".ci", ".github")
             for p in (ROOT / d).rglob("*") if p.is_file() and "data" not in p.parts and
             p.suffix in (".py", ".md", ".sh", ".yml", ".toml", "")]
    texts += [ROOT / "README.md", ROOT / "setup.py", ROOT / "pyproject.toml"]
    found = [f"{p.relative_to(ROOT)}:{n}" for p in texts if "__pycache__" not in p.parts
             for n, line in enumerate(p.read_text(errors="replace").splitlines(), 1)
             if MACHINE_PATH.search(line)]
    assert len(texts) > 100 and found == []
