"""Prometheus /metrics: the text format, auth, live queue depth and breaker state, and — the point of
multiprocess mode — counts made in a worker process showing on the API's /metrics."""

from __future__ import annotations

import httpx
import pytest
from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families

from assay import observability
from tests.conftest import API_KEY, REPO, wait_for, worker_env
from tests.dashboard.support import api_process, judge_runtime, make_app, score_in_process
from tests.fakes.anthropic_server import FakeAnthropic

EXAMPLES = REPO / "examples" / "kql_items.jsonl"


def samples(text: str) -> list[tuple[str, dict[str, str], float]]:
    return [(s.name, s.labels, s.value) for family in text_string_to_metric_families(text) for s in family.samples]


def total(text: str, name: str, **labels: str) -> float:
    return sum(v for n, ls, v in samples(text) if n == name and all(ls.get(k) == x for k, x in labels.items()))


@pytest.fixture
def client(clean_db):
    with TestClient(make_app(), headers={"Authorization": f"Bearer {API_KEY}"}) as c:
        yield c


def test_metrics_need_credentials_and_are_prometheus_text(client):
    assert client.get("/metrics", headers={"Authorization": ""}).status_code == 401
    r = client.get("/metrics")
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain")
    text = r.text
    names = {n for n, _, _ in samples(text)}
    assert {"assay_queue_depth", "assay_queue_unacked", "assay_metrics_source_up"} <= names
    assert total(text, "assay_metrics_source_up", source="broker") == 1
    assert total(text, "assay_metrics_source_up", source="breaker") == 1
    for queue in ("metrics", "judge", "control"):
        assert any(n == "assay_queue_depth" and ls == {"queue": queue} for n, ls, _ in samples(text))


def test_queue_depth_is_read_from_the_broker(client):
    before = total(client.get("/metrics").text, "assay_queue_depth", queue="control")
    r = client.post("/api/v1/batches?suite=kql", content=EXAMPLES.read_bytes())  # enqueues its planner
    assert r.status_code == 202
    after = total(client.get("/metrics").text, "assay_queue_depth", queue="control")
    assert after == before + 1


def test_breaker_state_per_model(client):
    from assay.scoring.judge.wiring import build_breaker
    from assay.settings import get_settings

    settings = get_settings()
    breaker = build_breaker(settings)
    model = "metrics-test-model"
    try:
        for _ in range(settings.breaker_threshold):
            breaker.record_failure(model)
        text = client.get("/metrics").text
        assert total(text, "assay_judge_breaker_state", model=model, state="open") == 1
        assert total(text, "assay_judge_breaker_state", model=model, state="closed") == 0
        assert total(text, "assay_judge_breaker_failures", model=model) == settings.breaker_threshold
    finally:
        breaker.record_success(model)
    assert total(client.get("/metrics").text, "assay_judge_breaker_state", model=model, state="closed") == 1


def test_recording_never_raises():
    observability.judge_usage("m", object(), price="not a price")  # nonsense in, nothing out
    observability.score_finished(None, None, None)  # type: ignore[arg-type]


def test_counts_made_in_this_process(client):
    """Scoring here (as the embedded runner does) counts scores, judge calls, their latency, tokens, cost."""
    def now() -> str:
        return client.get("/metrics").text

    def scored(text: str) -> float:
        return sum(total(text, "assay_items_scored_total", suite="kql", outcome=o) for o in ("passed", "failed", "errored"))

    r = client.post("/api/v1/batches?suite=kql", content=EXAMPLES.read_bytes())
    batch_id = r.json()["batch_id"]
    before = now()
    with FakeAnthropic() as fake:
        score_in_process(batch_id, judge_runtime(fake.base_url))
    after = now()
    assert scored(after) == scored(before) + 4
    for name, labels in [
        ("assay_judge_requests_total", {"outcome": "ok"}),
        ("assay_judge_request_duration_seconds_count", {"outcome": "ok"}),
        ("assay_judge_judgments_total", {"outcome": "verdict"}),
    ]:
        assert total(after, name, **labels) == total(before, name, **labels) + 4, name
    assert total(after, "assay_judge_tokens_total", type="input") > total(before, "assay_judge_tokens_total", type="input")
    assert total(after, "assay_judge_cost_usd_total") > total(before, "assay_judge_cost_usd_total")


def test_a_count_made_in_a_worker_shows_on_the_api_metrics(clean_db, live_worker_factory, tmp_path):
    """API and worker are separate processes sharing PROMETHEUS_MULTIPROC_DIR; the API scores nothing."""
    shared = tmp_path / "prom"
    shared.mkdir()
    env = {"PROMETHEUS_MULTIPROC_DIR": str(shared)}
    with FakeAnthropic() as fake:
        worker = live_worker_factory(
            {**env, "ANTHROPIC_API_KEY": "test-key", "ANTHROPIC_BASE_URL": fake.base_url,
             "ASSAY_JUDGE_BACKOFF_BASE_SECONDS": "0.01"}
        )
        with api_process(worker_env(env), log=tmp_path / "api.log") as url:
            auth = {"Authorization": f"Bearer {API_KEY}"}
            r = httpx.post(f"{url}/api/v1/batches?suite=kql", content=EXAMPLES.read_bytes(), headers=auth, timeout=30)
            assert r.status_code == 202, r.text
            batch_id = r.json()["batch_id"]
            wait_for(
                lambda: httpx.get(f"{url}/api/v1/batches/{batch_id}", headers=auth, timeout=10).json()["status"] == "completed",
                timeout=120,
                message="the batch to be scored by the worker",
            )
            text = httpx.get(f"{url}/metrics", headers=auth, timeout=10).text
    scored = sum(total(text, "assay_items_scored_total", suite="kql", outcome=o) for o in ("passed", "failed", "errored"))
    assert scored == 4
    assert total(text, "assay_components_landed_total", queue="metrics") == 12
    assert total(text, "assay_components_landed_total", queue="judge", component="llm_grading", status="ok") == 4
    assert total(text, "assay_judge_requests_total", outcome="ok") == 4
    assert total(text, "assay_judge_request_duration_seconds_count", outcome="ok") == 4
    assert total(text, "assay_judge_tokens_total", type="input") > 0
    assert total(text, "assay_score_cost_usd_total", suite="kql") > 0
    # The counts were written by the worker process (the API only read them).
    assert f"counter_{worker.proc.pid}.db" in {p.name for p in shared.iterdir()}


def test_a_worker_serves_its_own_metrics_with_metrics_port(clean_db, tmp_path):
    """``assay worker --metrics-port``: a worker in another container (no shared multiprocess directory
    with the API) exposes the counts of all its pool processes itself."""
    import os
    import signal
    import subprocess
    import sys

    from tests.faults.conftest import free_port

    port = free_port()
    env = worker_env({"ASSAY_WORKER_METRICS_PORT": str(port)})
    env.pop("PROMETHEUS_MULTIPROC_DIR", None)
    log = tmp_path / "worker.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "assay.cli", "worker", "--queues", "metrics,judge,control", "--pool", "prefork", "--concurrency", "2"],
            env=env, stdout=out, stderr=subprocess.STDOUT, cwd=str(REPO), start_new_session=True,
        )
    try:
        wait_for(lambda: "ready." in log.read_text(errors="replace"), timeout=60, message="the worker to start")
        with TestClient(make_app(), headers={"Authorization": f"Bearer {API_KEY}"}) as api:
            r = api.post("/api/v1/batches", params={"suite": "kql"}, content=EXAMPLES.read_bytes())
            assert r.status_code == 202, r.text
            batch_id = r.json()["batch_id"]
            wait_for(
                lambda: api.get(f"/api/v1/batches/{batch_id}").json()["status"] == "completed",
                timeout=120, message="the batch to be scored by the worker",
            )
        text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=10).text
        # Counted in the prefork children, added up by the exporter in the worker's main process.
        assert total(text, "assay_components_landed_total", queue="metrics") == 12
        assert total(text, "assay_items_scored_total", suite="kql") == 4
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=30)
