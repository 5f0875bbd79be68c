"""The batch lane with OpenAI judges, end to end: a live worker re-scores a suite on the batch lane
through the OpenAI fake's Batch API (a JSONL file, /v1/batches, the output and error files) via the
real ``openai`` SDK; errored, expired and unusable results go to the realtime lane, and the files
are deleted once the results landed; a suite with an
Anthropic and an OpenAI judge sends each judge's requests to its own provider's batch API."""

from __future__ import annotations

import json
import uuid

import pytest
import yaml
from sqlalchemy import select

from assay.scoring.judge.providers.openai_chat import make_batch_client
from assay.scoring.pipeline.planning import BATCH_LANE_WAITING
from assay.scoring.store.db import transaction
from assay.scoring.store.models import Batch, ProviderBatch, Score, ScoreComponent
from assay.scoring.suites.loader import load_model_catalog
from assay.settings import get_settings
from tests.conftest import wait_for
from tests.fakes.openai_server import FakeOpenAI
from tests.workers.test_end_to_end import all_results, wait_finished
from tests.workers.test_providers_e2e import rubric
from tests.workers.test_rescore_e2e import judge_env

N = 5
ITEMS = [{"id": f"q{n}", "input": f"What is {n} times 3?", "output": f"{3 * n}", "expected": f"{3 * n}"} for n in range(1, N + 1)]


@pytest.fixture
def fake_openai():
    with FakeOpenAI() as fake:
        yield fake


def register(api_client, name: str, components: dict) -> None:
    body = yaml.safe_dump({"name": name, "kind": "generic", "threshold": 0.5, "components": components})
    r = api_client.post("/api/v1/suites", content=body.encode(), headers={"Content-Type": "application/yaml"})
    assert r.status_code in (200, 201), r.text


def score_once(api_client, suite: str) -> None:
    items = "".join(json.dumps(item) + "\n" for item in ITEMS)
    r = api_client.post(f"/api/v1/batches?suite={suite}", content=items, headers={"Content-Type": "application/x-ndjson"})
    assert r.status_code == 202, r.text
    assert wait_finished(api_client, r.json()["batch_id"])["status"] == "completed"


def components(run_id: str, name: str) -> list[ScoreComponent]:
    with transaction() as s:
        rows = s.scalars(
            select(ScoreComponent)
            .join(Score, Score.id == ScoreComponent.score_id)
            .where(Score.batch_id == uuid.UUID(run_id), ScoreComponent.component == name)
            .order_by(Score.position)
        ).all()
        s.expunge_all()
        return list(rows)


def rescore_on_the_batch_lane(api_client, suite: str, judges: list[str]) -> str:
    r = api_client.post("/api/v1/rescore", json={"suite": suite, "lane": "batch", "budget_usd": 100})
    assert r.status_code == 202, r.text
    run_id = r.json()["batch_id"]
    wait_for(
        lambda: all(
            len(comps := components(run_id, name)) == N and all(c.reason == BATCH_LANE_WAITING for c in comps)
            for name in judges
        ),
        timeout=60,
        message="the run's judge components to wait for the batch lane",
    )
    return run_id


def tick_until_finished(api_client, run_id: str) -> dict:
    from assay.workers.tasks import provider_batches

    def finished() -> bool:
        provider_batches.apply_async()  # beat's tick (ASSAY_PROVIDER_BATCH_INTERVAL_SECONDS in production)
        with transaction() as s:
            return s.get(Batch, uuid.UUID(run_id)).status not in ("planning", "running")

    wait_for(finished, timeout=120, interval=1.5, message="the batch-lane run to finish")
    return wait_finished(api_client, run_id)


def provider_batches_of(run_id: str) -> list[ProviderBatch]:
    with transaction() as s:
        rows = s.scalars(select(ProviderBatch).where(ProviderBatch.batch_id == uuid.UUID(run_id))).all()
        s.expunge_all()
        return list(rows)


def test_a_rescore_on_the_batch_lane_with_an_openai_judge(api_client, live_worker_factory, fake_judge, fake_openai):
    suite = "openai_batch_lane"
    register(api_client, suite, {"clarity": rubric("clarity", provider="openai", model="gpt-4.1-mini", seed=1) | {"weight": 1.0}})
    env = judge_env(
        fake_judge, OPENAI_API_KEY="test-key", OPENAI_BASE_URL=fake_openai.api_base, ASSAY_PROVIDER_BATCH_INTERVAL_SECONDS="1"
    )
    live_worker_factory(env)
    score_once(api_client, suite)
    register(api_client, suite, {"clarity": rubric("clarity", provider="openai", model="gpt-4.1-nano", seed=1) | {"weight": 1.0}})
    fake_openai.reset()
    fake_openai.configure(batch_processing_seconds=3.0)

    run_id = rescore_on_the_batch_lane(api_client, suite, ["clarity"])
    scores = [str(c.score_id) for c in components(run_id, "clarity")]
    fake_openai.batch_outcomes({scores[0]: "errored", scores[1]: "expired", scores[2]: "malformed"})
    view = tick_until_finished(api_client, run_id)
    assert view["status"] == "completed" and view["progress"]["completed"] == N, view

    calls = fake_openai.calls()
    assert calls["batch_api"]["upload"] == 1 and calls["batch_api"]["create"] == 1, calls["batch_api"]
    # Batch lane: every request but the expired one was answered; realtime: the errored, expired and unusable.
    assert sum(calls["by_lane"]["batch"].values()) == N - 1
    assert sum(calls["by_lane"]["realtime"].values()) == 3
    batch_calls = [c for c in calls["calls"] if c["lane"] == "batch"]
    assert {c["model"] for c in batch_calls} == {"gpt-4.1-nano"}
    assert all(c["request"]["seed"] == 1 and c["request"]["response_format"]["type"] == "json_schema" for c in batch_calls)
    assert fake_judge.calls()["total"] == 0, "no Anthropic call for an OpenAI judge"

    comps = components(run_id, "clarity")
    assert [c.details.get("lane", "realtime") for c in comps] == ["realtime"] * 3 + ["batch"] * (N - 3)
    assert all(c.status == "ok" and c.details["provider"] == "openai" and c.details["model"] == "gpt-4.1-nano" for c in comps)
    price = load_model_catalog(get_settings().config_dir).models["gpt-4.1-nano"]
    batched = comps[3]
    full_price = (
        batched.usage["input_tokens"] * price.input_per_mtok
        + batched.usage["cache_read_input_tokens"] * price.cache_read_per_mtok
        + batched.usage["output_tokens"] * price.output_per_mtok
    ) / 1e6
    assert batched.cost_usd == pytest.approx(full_price * price.batch_discount, rel=1e-6), "half price on the batch lane"
    assert comps[2].cost_usd > comps[0].cost_usd * 0.99, "the unusable batch answer's cost is kept"
    (row,) = provider_batches_of(run_id)
    assert row.provider == "openai" and row.provider_id.startswith("batch_") and row.model == "gpt-4.1-nano"
    assert row.status == "processed" and row.request_counts["status"] == "expired"
    assert row.request_counts["total"] == N and row.request_counts["failed"] == 2
    with transaction() as s:
        assert s.get(Batch, uuid.UUID(run_id)).spent_usd == pytest.approx(sum(c.cost_usd for c in comps))

    # Once its results landed, the run's input, output and error files are deleted from the account.
    client = make_batch_client("test-key", fake_openai.api_base, timeout=10.0)
    try:
        wait_for(lambda: not list(client.files.list()), timeout=60, message="the run's files to be deleted")
    finally:
        client.close()
    assert fake_openai.calls()["batch_api"]["delete_file"] == 3


def test_a_suite_with_an_anthropic_and_an_openai_judge_on_the_batch_lane(
    api_client, live_worker_factory, fake_judge, fake_openai
):
    suite = "mixed_batch_lane"

    def judges(anthropic_model: str, openai_model: str) -> dict:
        return {
            "correctness": rubric("correctness", model=anthropic_model),
            "clarity": rubric("clarity", provider="openai", model=openai_model),
        }

    register(api_client, suite, judges("claude-haiku-5-5", "gpt-4.1-mini"))
    env = judge_env(
        fake_judge, OPENAI_API_KEY="test-key", OPENAI_BASE_URL=fake_openai.api_base, ASSAY_PROVIDER_BATCH_INTERVAL_SECONDS="1"
    )
    live_worker_factory(env)
    score_once(api_client, suite)
    register(api_client, suite, judges("claude-sonnet-5-5", "gpt-4.1-nano"))
    fake_judge.reset()
    fake_openai.reset()

    run_id = rescore_on_the_batch_lane(api_client, suite, ["correctness", "clarity"])
    view = tick_until_finished(api_client, run_id)
    assert view["status"] == "completed" and view["progress"]["completed"] == N, view

    # Each judge's requests went to its own provider's batch API, none realtime.
    anthropic_calls, openai_calls = fake_judge.calls(), fake_openai.calls()
    assert anthropic_calls["batch_api"]["create"] == 1 and openai_calls["batch_api"]["create"] == 1
    assert sum(anthropic_calls["by_lane"]["batch"].values()) == N and not anthropic_calls["by_lane"]["realtime"]
    assert sum(openai_calls["by_lane"]["batch"].values()) == N and not openai_calls["by_lane"]["realtime"]
    assert {c["model"] for c in anthropic_calls["calls"]} == {"claude-sonnet-5-5"}
    assert {c["model"] for c in openai_calls["calls"]} == {"gpt-4.1-nano"}
    rows = provider_batches_of(run_id)
    assert sorted((r.provider, r.model, r.request_count, r.status) for r in rows) == [
        ("anthropic", "claude-sonnet-5-5", N, "processed"),
        ("openai", "gpt-4.1-nano", N, "processed"),
    ]
    for result in all_results(api_client, run_id):
        for name in ("correctness", "clarity"):
            component = result["components"][name]
            assert component["status"] == "ok" and component["details"]["lane"] == "batch", result
