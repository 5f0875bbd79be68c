"""The import graph of ``assay/``, read with ``ast`` (no module is imported): the judge and
observability are in no import cycle, and ``judge/verdicts.py`` imports no kind (ARCHITECTURE.md,
invariant 8). Imports inside functions count too: a lazy import still ties the modules together."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2] / "assay"


def module_files(root: Path = ROOT) -> dict[str, Path]:
    files = {}
    for path in root.rglob("*.py"):
        parts = list(path.relative_to(root.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        files[".".join(parts)] = path
    return files


def import_graph(files: dict[str, Path]) -> dict[str, set[str]]:
    """module -> the assay modules it imports (``from pkg import mod`` counts as importing ``pkg.mod``)."""

    def known(name: str) -> str | None:
        while name and name not in files:
            name = name.rpartition(".")[0]
        return name or None

    graph: dict[str, set[str]] = {}
    for module, path in files.items():
        package = module if path.name == "__init__.py" else module.rpartition(".")[0]
        deps: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                deps.update(filter(None, (known(alias.name) for alias in node.names)))
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join([*parts, base] if base else parts)
                for alias in node.names:
                    target = f"{base}.{alias.name}"
                    deps.add(target if target in files else known(base) or "")
        deps.discard("")
        deps.discard(module)
        graph[module] = deps
    return graph


def cycles(graph: dict[str, set[str]]) -> list[set[str]]:
    """The strongly connected components with more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[set[str]] = []
    for start, deps in graph.items():
        if start in index:
            continue
        work = [(start, iter(sorted(deps)))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in graph:
                    continue
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = set()
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.add(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(component)
    return found


def guarded(module: str) -> bool:
    return module == "assay.observability" or module.startswith("assay.scoring.judge")


def test_the_cycle_finder_finds_a_cycle_and_its_members():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": set()}
    assert cycles(graph) == [{"a", "b", "c"}]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_the_graph_sees_lazy_and_relative_imports(tmp_path):
    pkg = tmp_path / "assay"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "sub" / "one.py").write_text("def f():\n    from . import two\n")
    (pkg / "sub" / "two.py").write_text("from assay.sub.one import f\n")
    graph = import_graph(module_files(pkg))
    assert graph["assay.sub.one"] == {"assay.sub.two"}
    assert cycles(graph) == [{"assay.sub.one", "assay.sub.two"}]


def test_no_import_cycle_runs_through_the_judge_or_observability():
    graph = import_graph(module_files())
    assert "assay.observability" in graph and "assay.scoring.judge.service" in graph
    bad = [sorted(c) for c in cycles(graph) if any(guarded(m) for m in c)]
    assert bad == [], f"import cycles through the judge or observability: {bad}"


def test_observability_imports_no_judge_module():
    graph = import_graph(module_files())
    assert not {m for m in graph["assay.observability"] if m.startswith("assay.scoring.judge")}


def test_verdicts_import_no_kind():
    graph = import_graph(module_files())
    kinds = {m for m in graph["assay.scoring.judge.verdicts"] if m.startswith("assay.scoring.kinds")}
    assert kinds == set(), "judge/verdicts.py must not import a kind (ARCHITECTURE.md, invariant 8)"
