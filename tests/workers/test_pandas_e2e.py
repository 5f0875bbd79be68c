"""pandas_codegen end to end: API → Redis → a live Celery worker (subprocess) whose sandbox executor
runs the code → Postgres; then the pandas code-generation design's metrics.json / metrics_summary.json from the stored
scores. No judge in the suite (no API key needed)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from assay.scoring import kinds
from tests.conftest import REPO, LiveWorker, worker_env
from tests.workers.test_end_to_end import all_results, submit, wait_finished

# Until assay.scoring.kinds._KIND_MODULES names the kind (see the integration notes), register it
# here for the API in this process, and through a sitecustomize shim for the worker subprocess.
KIND_MODULE = "assay.scoring.kinds.pandas_codegen"
kinds._KIND_MODULES.setdefault("pandas_codegen", KIND_MODULE)

INLINE = REPO / "examples" / "pandas_items.jsonl"
WITH_DATASET = REPO / "examples" / "pandas_dataset_items.jsonl"
HR = REPO / "examples" / "pandas_datasets" / "hr"


@pytest.fixture
def pandas_worker(tmp_path):
    shim = tmp_path / "shim"
    shim.mkdir()
    (shim / "sitecustomize.py").write_text(
        "import assay.scoring.kinds as k\n"
        f"k._KIND_MODULES.setdefault('pandas_codegen', {KIND_MODULE!r})\n"
    )
    env = worker_env()
    env["PYTHONPATH"] = f"{shim}{os.pathsep}{REPO}"
    worker = LiveWorker(env, queues="metrics,judge,control", concurrency=2).start()
    try:
        yield worker
    finally:
        worker.stop()


def _by_id(api_client, batch_id):
    out = {}
    for r in all_results(api_client, batch_id):
        item = api_client.get(f"/api/v1/items/{r['item_id']}").json()
        out[item["external_id"]] = r
    return out


def test_pandas_batch_end_to_end(api_client, pandas_worker, tmp_path):
    files = [("files", (p.name, p.read_bytes(), "application/octet-stream")) for p in sorted(HR.iterdir())]
    r = api_client.post("/api/v1/datasets/files", files=files, data={"name": "hr"})
    assert r.status_code == 201, r.text

    inline_batch = submit(api_client, INLINE.read_bytes(), suite="pandas_codegen")
    dataset_batch = submit(api_client, WITH_DATASET.read_bytes(), suite="pandas_codegen")
    for batch_id in (inline_batch, dataset_batch):
        view = wait_finished(api_client, batch_id, timeout=180)
        assert view["status"] == "completed", view
        assert view["progress"]["errored"] == 0, all_results(api_client, batch_id)

    inline = _by_id(api_client, inline_batch)
    components = {"correctness", "code_quality", "performance", "prompt_understanding", "requirement_coverage", "error_recovery"}
    for r in inline.values():
        assert set(r["components"]) == components
    good = inline["correct-groupby"]
    assert good["passed"] is True and good["components"]["correctness"]["score"] == 1.0
    assert good["components"]["error_recovery"]["status"] == "skipped" and good["partial"] is True
    stuffed = inline["keyword-stuffed"]
    assert stuffed["passed"] is False and stuffed["total_score"] < good["total_score"]
    assert stuffed["components"]["prompt_understanding"]["score"] == 0.0
    recovered = inline["recovered-after-keyerror"]["components"]["error_recovery"]
    assert recovered["status"] == "ok" and recovered["details"]["error_type"] == "column_error"
    assert recovered["details"]["recovery_success"] is True and recovered["details"]["recovery_attempts_count"] == 2
    assert inline["expected-result-only"]["components"]["correctness"]["details"]["truth_source"] == "expected_result"
    bomb = inline["fork-bomb"]
    assert bomb["passed"] is False
    assert bomb["components"]["correctness"]["details"]["error"].startswith("PermissionError")
    assert inline["top-3-wrong-order"]["components"]["correctness"]["score"] == pytest.approx(0.4)

    with_dataset = _by_id(api_client, dataset_batch)
    assert with_dataset["join-sales-per-department"]["passed"] is True
    assert with_dataset["budget-per-head"]["components"]["correctness"]["score"] == 1.0
    fixed = with_dataset["syntax-error-fixed"]["components"]["error_recovery"]["details"]
    assert fixed["error_type"] == "syntax_error" and fixed["recovery_success"] is True
    loop = with_dataset["row-loop"]["components"]["code_quality"]["details"]
    assert any(s["code"] == "row_loop" for s in loop["smells"])

    # The kind's report columns in the CSV export.
    csv_text = api_client.get(f"/api/v1/batches/{inline_batch}/results", params={"format": "csv"}).text
    assert csv_text.splitlines()[0].startswith("Total Score,Score Status,Correctness Score,Code Quality Score")

    # Design 002's files, from the stored scores.
    from assay.scoring.intake import batches as svc
    from assay.scoring.pandas.report import write_metrics_files
    from assay.scoring.store.db import new_session

    session = new_session()
    try:
        import uuid

        metrics_path, summary_path = write_metrics_files(
            svc.iter_results(session, uuid.UUID(inline_batch), status="all"), tmp_path / "out", batch_id=inline_batch
        )
    finally:
        session.close()
    entries = json.loads(Path(metrics_path).read_text())
    assert len(entries) == 6 and all("prompt_understanding" in e and "error_recovery" in e for e in entries)
    summary = json.loads(Path(summary_path).read_text())["summary"]
    # Errors: the KeyError item and the fork bomb; one of them recovered.
    assert summary["errors_encountered"] == 2 and summary["successful_recoveries"] == 1
    assert summary["total_recovery_attempts"] == 2 and summary["items_without_errors"] == 4
    assert 0.0 <= summary["recovery_success_rate"] <= 1.0 and summary["recovery_success_rate"] == pytest.approx(0.5)
    assert summary["average_understanding_score"] is not None and summary["average_coverage_score"] is not None
