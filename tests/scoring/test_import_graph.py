"""The import graph of ``assay/``, read with ``ast`` (no module is imported): no import cycle anywhere
(ARCHITECTURE.md, invariant 10), ``judge/verdicts.py`` imports no kind (invariant 8), the pipeline
imports none of the features built on it, and the tree keeps the shape a newcomer can read (few
modules at the root of ``assay/scoring``, none over 800 lines).

Imports inside functions count too: a lazy import still ties the modules together. Importing a
submodule counts as importing each of its parent packages (Python runs their ``__init__`` first),
except the importer's own ancestors, which are already being imported."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
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


def with_parent_packages(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    """The graph where importing ``a.b.c`` also imports ``a.b`` and ``a`` (their ``__init__`` runs
    first), leaving out the importer's own ancestors."""
    out: dict[str, set[str]] = {}
    for module, deps in graph.items():
        extended: set[str] = set()
        for dep in deps:
            parts = dep.split(".")
            for end in range(1, len(parts) + 1):
                parent = ".".join(parts[:end])
                if parent in graph and parent != module and not module.startswith(parent + "."):
                    extended.add(parent)
        out[module] = extended
    return out


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


def test_an_import_of_a_submodule_imports_its_parent_packages(tmp_path):
    pkg = tmp_path / "assay"
    (pkg / "feature").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    # The package's __init__ imports a module that imports a sibling submodule of the package: no
    # cycle module to module, but a cycle through the package's __init__.
    (pkg / "feature" / "__init__.py").write_text("from assay.feature import pages\n")
    (pkg / "feature" / "pages.py").write_text("from assay import auth\n")
    (pkg / "feature" / "cookie.py").write_text("")
    (pkg / "auth.py").write_text("from assay.feature.cookie import x\n")
    graph = import_graph(module_files(pkg))
    assert cycles(graph) == []
    assert cycles(with_parent_packages(graph)) == [{"assay.feature", "assay.feature.pages", "assay.auth"}]
    # A module's import of its own package's sibling is no cycle: its package is being imported already.
    assert "assay.feature" not in with_parent_packages(graph)["assay.feature.pages"]


def test_no_import_cycle_anywhere_in_assay():
    graph = with_parent_packages(import_graph(module_files()))
    assert "assay.observability" in graph and "assay.scoring.judge.service" in graph
    found = [sorted(c) for c in cycles(graph)]
    assert found == [], f"import cycles: {found}"


def test_the_pipeline_imports_no_feature_built_on_it():
    """The review queue and calibration react to the pipeline through its hooks (pipeline/hooks.py)."""
    graph = import_graph(module_files())
    features = ("assay.scoring.trust", "assay.scoring.rescoring", "assay.scoring.reports", "assay.scoring.features")
    bad = {
        module: sorted(dep for dep in deps if dep.startswith(features))
        for module, deps in graph.items()
        if module.startswith("assay.scoring.pipeline") and any(dep.startswith(features) for dep in deps)
    }
    assert bad == {}


def test_assay_scoring_keeps_few_modules_at_its_root():
    root = ROOT / "scoring"
    modules = sorted(p.name for p in root.glob("*.py") if p.name != "__init__.py")
    assert len(modules) <= 12, f"{len(modules)} modules at the root of assay/scoring: {modules}"


def test_no_module_is_over_800_lines():
    long = {str(p.relative_to(ROOT.parent)): n for p in ROOT.rglob("*.py") if (n := len(p.read_text().splitlines())) > 800}
    assert long == {}, f"split these by concern: {long}"


def test_observability_imports_no_judge_module():
    graph = import_graph(module_files())
    assert not {m for m in graph["assay.observability"] if m.startswith("assay.scoring.judge")}


def test_verdicts_import_no_kind():
    graph = import_graph(module_files())
    kinds = {m for m in graph["assay.scoring.judge.verdicts"] if m.startswith("assay.scoring.kinds")}
    assert kinds == set(), "judge/verdicts.py must not import a kind (ARCHITECTURE.md, invariant 8)"


def test_the_provider_sdks_are_imported_only_by_a_provider_that_is_built():
    """Each SDK costs about a second of CPU to import: a worker starting, the API, and a judge runtime
    without an Anthropic key must not pay for it (they did: it was imported with the retry policy and
    with every registry). A runtime with the key imports it."""
    probe = """
import json, sys
from pathlib import Path
import assay.api.app, assay.workers.tasks
from assay.scoring.judge.inflight import InProcessInFlight
from assay.scoring.judge.providers.registry import build_registry
from assay.scoring.suites.catalog import load_model_catalog
at_start = 'anthropic' in sys.modules or 'openai' in sys.modules
catalog = load_model_catalog(Path('config'))
def registry(key):
    return build_registry(catalog, anthropic_key=key, anthropic_base_url=None, in_flight=lambda n, c: InProcessInFlight(c), env={})
without_key = sorted(p.name for p in registry(None))
keyless = 'anthropic' in sys.modules
registry('k')
print(json.dumps([at_start, keyless, 'anthropic' in sys.modules, without_key]))
"""
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=ROOT.parent)
    assert done.returncode == 0, done.stderr
    at_start, without_key_imported, with_key_imported, built = json.loads(done.stdout.splitlines()[-1])
    assert not at_start
    assert not without_key_imported and "anthropic" not in built
    assert with_key_imported
