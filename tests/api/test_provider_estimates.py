"""Estimates per judge provider, as a user meets them: a suite judging with Anthropic and OpenAI gets a
pre-flight estimate that lists each provider's calls, tokens and dollars at its own prices, adding up
to the total; a single-provider suite lists one."""

from __future__ import annotations

import json

import pytest
import yaml

from tests.workers.test_providers_e2e import ITEMS, rubric


def register(api_client, name: str, components: dict) -> None:
    body = yaml.safe_dump({"name": name, "kind": "generic", "threshold": 0.5, "components": components})
    r = api_client.post("/api/v1/suites", content=body.encode(), headers={"Content-Type": "application/yaml"})
    assert r.status_code in (200, 201), r.text


def preflight(api_client, suite: str) -> dict:
    items = "".join(json.dumps(item) + "\n" for item in ITEMS)
    r = api_client.post(
        f"/api/v1/batches?suite={suite}&budget_usd=50", content=items, headers={"Content-Type": "application/x-ndjson"}
    )
    assert r.status_code == 202, r.text
    return r.json()["estimate"]


def test_a_two_provider_suites_estimate_lists_each_provider(api_client):
    register(
        api_client,
        "estimate_two_providers",
        {
            "correctness": rubric("correctness", model="claude-sonnet-5-5"),
            "clarity": rubric("clarity", provider="openai", model="gpt-4.1-nano"),
        },
    )
    estimate = preflight(api_client, "estimate_two_providers")
    parts = {part["provider"]: part for part in estimate["by_provider"]}

    assert sorted(parts) == ["anthropic", "openai"]
    assert parts["anthropic"]["judge_calls"] == parts["openai"]["judge_calls"] == len(ITEMS)
    assert sum(p["judge_calls"] for p in parts.values()) == estimate["judge_calls"]
    assert sum(p["cost_usd"] for p in parts.values()) == pytest.approx(estimate["cost_usd"], abs=1e-5)
    # Each at its own prices: Sonnet's output costs 37.5 times gpt-4.1-nano's, for the same tokens.
    assert parts["anthropic"]["output_tokens"] == parts["openai"]["output_tokens"] == 512 * len(ITEMS)
    assert parts["anthropic"]["cost_usd"] > 20 * parts["openai"]["cost_usd"]


def test_a_single_provider_suite_lists_one(api_client):
    register(api_client, "estimate_one_provider", {"clarity": rubric("clarity", provider="openai", model="gpt-4.1-mini") | {"weight": 1.0}})
    estimate = preflight(api_client, "estimate_one_provider")
    [part] = estimate["by_provider"]
    assert part["provider"] == "openai" and part["judge_calls"] == estimate["judge_calls"] == len(ITEMS)
