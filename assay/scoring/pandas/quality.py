"""Code quality: lint findings (ruff, run as a subprocess on the code as text: nothing is executed)
and AST smells, mapped to 0..1 with every finding listed.

Score = ``max(0, 1 − Σ penalties)``:

- ruff ``F`` (pyflakes: undefined names, unused imports, redefinitions) 0.10 each; ``B``
  (bugbear) 0.10; ``PD`` (pandas-vet: ``inplace=True``, ``.ix``, ...) 0.05; anything else
  selected (``E4/E7/E9``, ``W``, ``PERF``, ``C4``) 0.05; at most three findings of one rule count;
- smells: a row loop (``iterrows``, ``itertuples``, ``apply(axis=1)``, ``for i in range(len(df))``)
  0.20; chained assignment (``df[m]['b'] = ...``, a no-op under pandas' copy-on-write) 0.20;
  growing a frame in a loop (``pd.concat`` / ``.append`` inside ``for``) 0.15; ``exec``/``eval``
  of strings 0.20;
- code that does not parse scores 0.

Rules are fixed here (not read from any config file: ``--isolated``); frames, ``df``, ``dfs``,
``pd`` and ``np`` are declared builtins so the predefined names are not "undefined". Style-only
pandas-vet rules are off, so equivalent idioms score the same (``pd.merge`` / ``.merge``,
``.isnull()`` / ``.isna()``, ``.at``, ``.values``, ``unstack``, the name ``df``); so is
``B018`` on the final expression, which is the answer by convention.
"""

from __future__ import annotations

import ast
import json
import os
import subprocess
from dataclasses import dataclass
from typing import Any

SELECT = ("E4", "E7", "E9", "F", "W", "B", "PERF", "PD", "C4")
IGNORE = ("E501", "E712", "W291", "W292", "W293", "W391", "PD003", "PD004", "PD008", "PD009", "PD010", "PD011", "PD013", "PD015", "PD901")
LINT_PENALTY = {"F": 0.10, "B": 0.10, "PD": 0.05}
DEFAULT_LINT_PENALTY = 0.05
SMELL_PENALTY = {"row_loop": 0.20, "chained_assignment": 0.20, "frame_grown_in_loop": 0.15, "dynamic_code": 0.20}
PER_RULE_CAP = 3


class RuffUnavailable(Exception):
    pass


@dataclass(frozen=True)
class Finding:
    source: str  # "ruff" or "ast"
    code: str
    message: str
    line: int | None

    def to_dict(self) -> dict[str, Any]:
        return {"source": self.source, "code": self.code, "message": self.message, "line": self.line}


def ruff_binary() -> str:
    try:
        from ruff.__main__ import find_ruff_bin
    except ImportError as exc:
        raise RuffUnavailable("ruff is not installed (pip install ruff)") from exc
    return str(find_ruff_bin())


def ruff_version() -> str:
    try:
        return subprocess.run([ruff_binary(), "--version"], capture_output=True, text=True, timeout=10, env={"PATH": "/usr/bin:/bin"}).stdout.strip()
    except (OSError, subprocess.SubprocessError, RuffUnavailable):
        return "unavailable"


def lint(code: str, predefined: list[str]) -> list[Finding]:
    """Ruff's findings for ``code`` (line numbers are the code's own)."""
    tree = _parse(code)
    prefix = ""
    if tree is not None and not any(
        isinstance(n, ast.Import | ast.ImportFrom) and any("pandas" in (a.name or "") for a in n.names) or (isinstance(n, ast.ImportFrom) and n.module == "pandas")
        for n in ast.walk(tree)
    ):
        prefix = "import pandas  # noqa: F401\n"  # pandas-vet rules only apply where pandas is imported
    builtins = sorted(set(predefined) | {"df", "dfs", "pd", "np"})
    command = [
        ruff_binary(), "check", "--isolated", "--no-cache", "--output-format", "json", "--target-version", "py311",
        "--select", ",".join(SELECT), "--ignore", ",".join(IGNORE), "--config", f"builtins = {json.dumps(builtins)}",
        "--stdin-filename", "generated.py", "-",
    ]
    try:
        proc = subprocess.run(
            command, input=prefix + code, capture_output=True, text=True, timeout=30,
            env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": "/nonexistent"}, cwd="/",
        )
    except (OSError, subprocess.SubprocessError) as exc:
        raise RuffUnavailable(f"ruff could not run: {exc}") from exc
    try:
        raw = json.loads(proc.stdout or "[]")
    except ValueError as exc:
        raise RuffUnavailable(f"ruff gave no JSON (exit {proc.returncode}): {proc.stderr[:500]}") from exc
    offset = prefix.count("\n")
    final_line = _final_expression_line(tree)
    findings = []
    for entry in raw:
        line = (entry.get("location") or {}).get("row")
        line = line - offset if isinstance(line, int) else None
        code_ = entry.get("code") or "invalid-syntax"
        if code_ == "B018" and line is not None and line == final_line:
            continue
        findings.append(Finding("ruff", code_, str(entry.get("message", ""))[:300], line))
    return findings


def _parse(code: str) -> ast.Module | None:
    try:
        return ast.parse(code)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None


def _final_expression_line(tree: ast.Module | None) -> int | None:
    if tree is not None and tree.body and isinstance(tree.body[-1], ast.Expr):
        return tree.body[-1].lineno
    return None


def smells(code: str) -> list[Finding]:
    tree = _parse(code)
    if tree is None:
        return []
    found: list[Finding] = []
    loops = [n for n in ast.walk(tree) if isinstance(n, ast.For | ast.While | ast.comprehension)]
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            attr = node.func.attr
            if attr in ("iterrows", "itertuples"):
                found.append(Finding("ast", "row_loop", f".{attr}() walks the rows one by one; use vectorised operations", node.lineno))
            elif attr == "apply" and any(k.arg == "axis" and isinstance(k.value, ast.Constant) and k.value.value in (1, "columns") for k in node.keywords):
                found.append(Finding("ast", "row_loop", ".apply(axis=1) calls Python once per row; use vectorised operations", node.lineno))
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("exec", "eval"):
            found.append(Finding("ast", "dynamic_code", f"{node.func.id}() of a string", node.lineno))
        elif isinstance(node, ast.For):
            it = node.iter
            if (
                isinstance(it, ast.Call) and isinstance(it.func, ast.Name) and it.func.id == "range" and it.args
                and isinstance(it.args[-1], ast.Call) and isinstance(it.args[-1].func, ast.Name) and it.args[-1].func.id == "len"
            ):
                found.append(Finding("ast", "row_loop", "for i in range(len(...)) indexes rows one by one", node.lineno))
        elif isinstance(node, ast.Assign | ast.AugAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                if isinstance(target, ast.Subscript) and isinstance(target.value, ast.Subscript | ast.Call):
                    found.append(Finding("ast", "chained_assignment", "assignment through chained indexing has no effect (copy-on-write); use .loc[rows, col] = ...", node.lineno))
                elif isinstance(target, ast.Subscript) and isinstance(target.value, ast.Attribute) and isinstance(target.value.value, ast.Subscript):
                    found.append(Finding("ast", "chained_assignment", "assignment through chained indexing has no effect (copy-on-write); use .loc[rows, col] = ...", node.lineno))
    for loop in loops:
        if isinstance(loop, ast.comprehension):
            continue
        for node in ast.walk(loop):
            if node is loop:
                continue
            if isinstance(node, ast.Call) and (
                (isinstance(node.func, ast.Attribute) and node.func.attr == "concat")
                or (isinstance(node.func, ast.Attribute) and node.func.attr == "_append")
            ):
                found.append(Finding("ast", "frame_grown_in_loop", "growing a frame inside a loop copies it every time; build a list and concat once", node.lineno))
                break
    return found


def quality_score(code: str, predefined: list[str]) -> tuple[float, dict[str, Any]]:
    """(score, details) for ``code``; raises :class:`RuffUnavailable` when ruff cannot run."""
    if _parse(code) is None:
        findings = lint(code, predefined)
        return 0.0, {
            "reason": "the code does not parse",
            "lint_findings": [f.to_dict() for f in findings],
            "smells": [],
            "lint_count": len(findings),
            "smell_count": 0,
        }
    findings = lint(code, predefined)
    found_smells = smells(code)
    penalty = 0.0
    per_rule: dict[str, int] = {}
    for finding in findings:
        per_rule[finding.code] = per_rule.get(finding.code, 0) + 1
        if per_rule[finding.code] > PER_RULE_CAP:
            continue
        prefix = next((p for p in ("PD", "F", "B") if finding.code.startswith(p)), None)
        penalty += LINT_PENALTY.get(prefix, DEFAULT_LINT_PENALTY) if prefix else DEFAULT_LINT_PENALTY
    for smell in found_smells:
        per_rule[smell.code] = per_rule.get(smell.code, 0) + 1
        if per_rule[smell.code] <= PER_RULE_CAP:
            penalty += SMELL_PENALTY[smell.code]
    score = max(0.0, 1.0 - penalty)
    return score, {
        "quality_score": round(score, 6),
        "lint_findings": [f.to_dict() for f in findings],
        "smells": [s.to_dict() for s in found_smells],
        "lint_count": len(findings),
        "smell_count": len(found_smells),
        "penalty": round(penalty, 6),
        "rules": {"select": list(SELECT), "ignore": list(IGNORE)},
    }
