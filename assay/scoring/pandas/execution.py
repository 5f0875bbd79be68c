"""Running an item's code in the sandbox: its dataset, cached runs, error classes, the truth.

Every run goes through the per-process sandbox client (:func:`assay.scoring.sandbox.sandbox_client`),
never through the worker's own interpreter. Runs are cached per process by (code, dataset,
repetitions), so the correctness and performance components of one item share one execution of
the generated code (best of :data:`TIMED_RUNS`) and one of the reference.
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

from assay.scoring.pandas.compare import CTable, Tolerance, compare, from_encoded, from_expected
from assay.scoring.sandbox import DatasetRef, RunResult, sandbox_client

TIMED_RUNS = 3
_CACHE_SIZE = 256

# Design 002's error classes, by exception type (the first match along the class's MRO).
ERROR_CLASSES: dict[str, str] = {
    "KeyError": "column_error",
    "SyntaxError": "syntax_error",
    "TypeError": "type_error",
    "IndexError": "index_error",
    "AttributeError": "attribute_error",
    "ValueError": "value_error",
}


def classify_error(error: dict[str, Any] | None) -> str:
    """``column_error`` / ``syntax_error`` / ``type_error`` / ``index_error`` /
    ``attribute_error`` / ``value_error`` by exception type, else ``other_error`` (timeouts,
    resource limits and sandbox refusals included). Never by message text."""
    if not error:
        return "other_error"
    for name in error.get("mro") or [error.get("type")]:
        if name in ERROR_CLASSES:
            return ERROR_CLASSES[name]
    return "other_error"


def error_text(error: dict[str, Any] | None) -> str | None:
    if not error:
        return None
    kind = error.get("type") or error.get("category") or "Error"
    message = error.get("message") or ""
    return f"{kind}: {message}" if message else str(kind)


# --- datasets ----------------------------------------------------------------------------------------


def dataset_ref(item: Any, loader: Any) -> DatasetRef | None:
    """The item's tables as the executor keeps them: a registered dataset (by content hash, through
    the metric context's loader) or inline frames (keyed by their content)."""
    if getattr(item, "frames", None):
        from assay.scoring.intake.datasets import Table

        tables = [
            Table(name, "json", json.dumps(records, sort_keys=True, separators=(",", ":")).encode())
            for name, records in sorted(item.frames.items())
        ]
        digest = hashlib.sha256(b"".join(t.name.encode() + b"\0" + t.data + b"\0" for t in tables)).hexdigest()
        return DatasetRef(f"inline:{digest}", tables)
    if getattr(item, "dataset", None):
        reference = item.dataset
        if loader is None:
            loader = _store_loader

        def tables() -> list[Any]:
            return list(loader(reference).values())

        return DatasetRef(f"dataset:{reference}", tables)
    return None


def _store_loader(reference: str) -> dict[str, Any]:
    from assay.scoring.intake.datasets import load_tables, resolve
    from assay.scoring.store.db import transaction

    with transaction() as session:
        return load_tables(session, resolve(session, reference).content_hash)


_frames_cache: OrderedDict[str, dict[str, Any]] = OrderedDict()
_runs_cache: OrderedDict[tuple, RunResult] = OrderedDict()
_lock = threading.Lock()


def frames_info(item: Any, loader: Any) -> dict[str, list[str]]:
    """Table name -> column names, as pandas reads them (``df`` alone for a single table)."""
    if getattr(item, "frames", None):
        out = {}
        for name, records in item.frames.items():
            columns: dict[str, None] = {}
            for record in records:
                for key in record:
                    columns.setdefault(str(key), None)
            out[name] = list(columns)
        return out
    ref = dataset_ref(item, loader)
    if ref is None:
        return {}
    with _lock:
        hit = _frames_cache.get(ref.key)
    if hit is None:
        hit = sandbox_client().load(ref)
        with _lock:
            _frames_cache[ref.key] = hit
            while len(_frames_cache) > 64:
                _frames_cache.popitem(last=False)
    return {name: list(info.get("columns", [])) for name, info in hit.items()}


def predefined_names(frames: dict[str, list[str]]) -> set[str]:
    names = set(frames) | {"dfs"}
    if len(frames) == 1:
        names.add("df")
    return names


def run_code(code: str, item: Any, loader: Any, *, repeat: int = 1) -> RunResult:
    """Run ``code`` on the item's dataset in the sandbox (cached per process)."""
    ref = dataset_ref(item, loader)
    key = (hashlib.sha256(code.encode()).hexdigest(), ref.key if ref else None, repeat)
    with _lock:
        hit = _runs_cache.get(key)
        if hit is not None:
            _runs_cache.move_to_end(key)
            return hit
    result = sandbox_client().run(code, dataset=ref, repeat=repeat)
    with _lock:
        _runs_cache[key] = result
        while len(_runs_cache) > _CACHE_SIZE:
            _runs_cache.popitem(last=False)
    return result


def clear_caches() -> None:
    with _lock:
        _runs_cache.clear()
        _frames_cache.clear()


# --- the truth ---------------------------------------------------------------------------------------


class ReferenceFailed(Exception):
    """The item's reference code does not run: the item is wrong, not the generation."""


@dataclass
class Truth:
    table: CTable
    source: str  # "expected_result" or "reference_code"
    reference_agrees: bool | None = None


def resolve_truth(item: Any, loader: Any) -> Truth | None:
    """The expected result (when the item gives one), else the reference code's result; None
    when the item has neither."""
    if getattr(item, "expected_result_given", False):
        truth = Truth(from_expected(item.expected_result), "expected_result")
        if item.reference_code:
            ref = run_code(item.reference_code, item, loader, repeat=TIMED_RUNS)
            if ref.ok and ref.result is not None:
                truth.reference_agrees = compare(truth.table, from_encoded(ref.result), ordered=False)[0] >= 0.999
        return truth
    if item.reference_code:
        ref = run_code(item.reference_code, item, loader, repeat=TIMED_RUNS)
        if not ref.ok or ref.result is None:
            raise ReferenceFailed(f"the reference code did not execute: {error_text(ref.error)}")
        return Truth(from_encoded(ref.result), "reference_code")
    return None


def is_correct(result: RunResult, truth: Truth, ordered: bool, tol: Tolerance | None = None) -> tuple[bool, float]:
    if not result.ok or result.result is None:
        return False, 0.0
    score, _ = compare(truth.table, from_encoded(result.result), ordered=ordered, tol=tol)
    return score >= 0.999, score
