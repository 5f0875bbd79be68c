"""A live worker scores a generic suite whose two judges come from two providers: one Anthropic judge
and one OpenAI-compatible judge, each against its loopback fake through its real SDK."""

from __future__ import annotations

import json

import pytest
import yaml

from tests.fakes.openai_server import FakeOpenAI
from tests.workers.test_end_to_end import all_results, wait_finished
from tests.workers.test_rescore_e2e import judge_env

SUITE = "two_providers"
ITEMS = [{"id": f"q{n}", "input": f"What is {n} plus {n}?", "output": f"{2 * n}", "expected": f"{2 * n}"} for n in range(1, 4)]


def rubric(aspect: str, **judge: object) -> dict:
    return {
        "weight": 0.5,
        "judge": {
            "max_tokens": 512,
            "rubric": f"You grade the {aspect} of an answer to an arithmetic question.",
            "prompt": "Question: {{input}}\nReference: {{expected}}\nAnswer: {{output}}\nAspect: " + aspect,
            "verdict": {"type": "scale", "min": 1, "max": 5},
            **judge,
        },
    }


@pytest.fixture
def fake_openai():
    with FakeOpenAI() as fake:
        yield fake


def test_one_suite_judged_by_anthropic_and_an_openai_compatible_provider(
    api_client, live_worker_factory, fake_judge, fake_openai
):
    components = {
        "correctness": rubric("correctness", model="claude-haiku-5-5"),
        "clarity": rubric("clarity", provider="openai", model="gpt-4.1-mini", temperature=0, seed=1),
    }
    body = yaml.safe_dump({"name": SUITE, "kind": "generic", "threshold": 0.5, "components": components})
    r = api_client.post("/api/v1/suites", content=body.encode(), headers={"Content-Type": "application/yaml"})
    assert r.status_code in (200, 201), r.text
    live_worker_factory(judge_env(fake_judge, OPENAI_API_KEY="test-key", OPENAI_BASE_URL=fake_openai.api_base))

    items = "".join(json.dumps(item) + "\n" for item in ITEMS)
    r = api_client.post(f"/api/v1/batches?suite={SUITE}", content=items, headers={"Content-Type": "application/x-ndjson"})
    assert r.status_code == 202, r.text
    batch_id = r.json()["batch_id"]
    assert wait_finished(api_client, batch_id)["status"] == "completed"

    results = all_results(api_client, batch_id)
    assert len(results) == len(ITEMS)
    for result in results:
        anthropic, openai = result["components"]["correctness"], result["components"]["clarity"]
        assert anthropic["status"] == openai["status"] == "ok", result
        assert anthropic["details"]["model"] == "claude-haiku-5-5" and "provider" not in anthropic["details"]
        assert openai["details"]["model"] == "gpt-4.1-mini" and openai["details"]["provider"] == "openai"
    # One call per item and judge, each to its own provider, with the suite's parameters.
    assert fake_judge.calls()["total"] == len(ITEMS)
    openai_calls = fake_openai.calls()["calls"]
    assert len(openai_calls) == len(ITEMS)
    assert all(c["request"]["temperature"] == 0 and c["request"]["seed"] == 1 for c in openai_calls)
    assert all(c["request"]["response_format"]["type"] == "json_schema" for c in openai_calls)
