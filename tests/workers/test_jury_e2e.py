"""A live worker scores a jury of an Anthropic, an OpenAI and a local OpenAI-compatible judge, each
against its loopback fake through its real SDK, scripted per model name: each member is its own call,
the jury lands with the majority, and the API shows every member."""

from __future__ import annotations

import json

import pytest
import yaml

from tests.fakes.configs import local_config_dir
from tests.fakes.openai_server import FakeOpenAI
from tests.workers.test_end_to_end import all_results, wait_finished
from tests.workers.test_rescore_e2e import judge_env

SUITE = {
    "name": "live_jury",
    "kind": "generic",
    "threshold": 0.5,
    "components": {
        "correctness": {
            "weight": 1.0,
            "judge": {
                "rubric": "Is the answer to the arithmetic question correct?",
                "prompt": "Question: {{input}}\nReference: {{expected}}\nAnswer: {{output}}",
                "verdict": {"type": "pass_fail"},
                "max_tokens": 256,
                "judges": [
                    {"provider": "anthropic", "model": "claude-haiku-5-5"},
                    {"provider": "openai", "model": "gpt-5-mini"},
                    {"provider": "local", "model": "qwen3:8b", "name": "qwen"},
                ],
                "aggregate": "majority",
            },
        }
    },
}
ITEMS = [{"id": f"q{n}", "input": f"What is {n} plus {n}?", "output": f"{2 * n}", "expected": f"{2 * n}"} for n in range(1, 4)]


@pytest.fixture
def fake_openai():
    with FakeOpenAI() as fake:
        yield fake


@pytest.fixture
def local_config(tmp_path, monkeypatch, fake_openai):
    """The API of this process and the worker both read a config whose local provider is the fake."""
    from assay.settings import get_settings

    config = local_config_dir(tmp_path, base_url=fake_openai.api_base)
    monkeypatch.setenv("ASSAY_CONFIG_DIR", str(config))
    get_settings.cache_clear()
    yield config
    monkeypatch.undo()
    get_settings.cache_clear()


def test_a_live_worker_scores_a_jury_of_three_providers(local_config, api_client, live_worker_factory, fake_judge, fake_openai):
    fake_judge.configure(model_answers={"claude-haiku-5-5": {"passed": True}})
    fake_openai.configure(model_answers={"gpt-5-mini": {"passed": True}, "qwen3:8b": {"passed": False}})
    r = api_client.post("/api/v1/suites", content=yaml.safe_dump(SUITE).encode(), headers={"Content-Type": "application/yaml"})
    assert r.status_code in (200, 201), r.text
    live_worker_factory(
        judge_env(fake_judge, OPENAI_API_KEY="test-key", OPENAI_BASE_URL=fake_openai.api_base, ASSAY_CONFIG_DIR=str(local_config))
    )

    items = "".join(json.dumps(item) + "\n" for item in ITEMS)
    r = api_client.post("/api/v1/batches?suite=live_jury", content=items, headers={"Content-Type": "application/x-ndjson"})
    assert r.status_code == 202, r.text
    batch_id = r.json()["batch_id"]
    assert wait_finished(api_client, batch_id)["status"] == "completed"

    results = all_results(api_client, batch_id)
    assert len(results) == len(ITEMS)
    for result in results:
        comps = result["components"]
        jury = comps["correctness"]
        assert jury["status"] == "ok" and jury["details"]["passed"] is True, jury
        assert jury["details"]["jury"]["votes"] == {"true": 2.0, "false": 1.0}
        assert comps["correctness@qwen"]["details"]["provider"] == "local"
        assert comps["correctness@qwen"]["details"]["passed"] is False
        assert comps["correctness@gpt-5-mini"]["details"]["provider"] == "openai"
        assert comps["correctness@claude-haiku-5-5"]["cost_usd"] > 0 and comps["correctness@qwen"]["cost_usd"] == 0
        assert result["passed"] is True and result["total_score"] == 1.0
    # One call per item and member, each to its own provider; the jury itself calls nothing.
    assert fake_judge.calls()["total"] == len(ITEMS)
    assert sorted(c["model"] for c in fake_openai.calls()["calls"]) == sorted(["gpt-5-mini", "qwen3:8b"] * len(ITEMS))
