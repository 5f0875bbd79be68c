"""Every judge guarantee on both provider APIs (Anthropic Messages, OpenAI Chat Completions), each
against its loopback fake through its real SDK: the same test, parametrized over ``provider_case``."""

from __future__ import annotations

import asyncio
import threading
import time
from dataclasses import replace

import pytest

from assay.scoring.judge.breaker import InProcessBreaker
from assay.scoring.judge.governor import InProcessGovernor, parse_duration, parse_ratelimit_headers
from assay.scoring.judge.inflight import InProcessInFlight, RedisInFlight
from assay.scoring.judge.loop import judge_loop
from assay.scoring.judge.providers.registry import configured_routes
from assay.scoring.judge.retry import RetryPolicy
from assay.scoring.judge.rubrics import DEFAULT_ITEM_TEMPLATE, VerdictSpec, compose_template, rubric_verdict
from assay.scoring.judge.service import JudgeDeferred, JudgeOutcome, JudgeRequest, cost_usd, run_judge
from assay.scoring.kinds.kql import KqlGrade
from assay.scoring.suites.loader import load_model_catalog, named_verdict
from assay.settings import REPO_ROOT
from tests.scoring.judge.conftest import FAST_POLICY, OPENAI_MODEL, ProviderCase, openai_provider

TEMPLATE = "You grade KQL queries. Be strict.\nRequest:\n{{PROMPT}}\nGenerated:\n{{GENERATED_KQL}}\n\n{{OUTPUT_SCHEMA}}"
# A static prefix long enough for both providers' prompt caches (1,024 tokens and more).
LONG_TEMPLATE = "You grade KQL queries against an expert's query. Be strict and precise. " * 80 + TEMPLATE


def request_for(case: ProviderCase, item: str, **overrides) -> JudgeRequest:
    base = JudgeRequest(
        model=case.model,
        max_tokens=1024,
        timeout_seconds=60.0,  # no test here is about timeouts: a loaded machine must not turn a call into a retry
        prompt_template=TEMPLATE,
        inputs={"PROMPT": f"request for {item}", "GENERATED_KQL": f"T | where x == '{item}' | count"},
        verdict_model=KqlGrade,
    )
    return replace(base, **overrides)


def judge(case: ProviderCase, request: JudgeRequest, provider=None, **kwargs) -> JudgeOutcome:
    kwargs.setdefault("breaker", InProcessBreaker())
    kwargs.setdefault("governor", InProcessGovernor({}))
    kwargs.setdefault("policy", FAST_POLICY)
    run = run_judge(request, provider=provider or case.provider, price=case.price, **kwargs)
    return judge_loop().run(run)


class HoldRecorder(InProcessGovernor):
    def __init__(self, limits) -> None:
        super().__init__(limits)
        self.holds: list[tuple[str, float]] = []

    def hold(self, model: str, seconds: float) -> None:
        self.holds.append((model, seconds))
        super().hold(model, seconds)


class Sleeps(list):
    async def __call__(self, seconds: float) -> None:
        self.append(seconds)
        await asyncio.sleep(seconds)


def test_a_verdict_with_usage_and_cost_from_the_providers_usage(provider_case):
    first = judge(provider_case, request_for(provider_case, "a", prompt_template=LONG_TEMPLATE))
    second = judge(provider_case, request_for(provider_case, "b", prompt_template=LONG_TEMPLATE))

    assert isinstance(first.verdict, KqlGrade) and first.calls == 1 and not first.repaired
    assert first.usage["input_tokens"] > 0 and first.usage["output_tokens"] > 0
    # The second call's static prefix is a cache read on both APIs, and costs less.
    assert second.usage["cache_read_input_tokens"] > 1000
    assert first.cost_usd == pytest.approx(cost_usd(first.usage, provider_case.price)) and first.cost_usd > 0
    assert second.cost_usd < first.cost_usd
    [call, _] = provider_case.fake.calls()["calls"]
    assert call["model"] == provider_case.model and call["status"] == 200


def test_openai_reasoning_tokens_are_billed_as_output(fake_openai):
    catalog = load_model_catalog(REPO_ROOT / "config")
    fake_openai.configure(reasoning_tokens=300)
    provider = openai_provider(fake_openai)
    case = ProviderCase("openai", fake_openai, provider, "gpt-5-mini", catalog.models["gpt-5-mini"])
    try:
        outcome = judge(case, request_for(case, "a", parameters={"reasoning_effort": "low"}))
    finally:
        judge_loop().run(provider.close())

    assert outcome.verdict is not None and outcome.usage["output_tokens"] > 300
    assert outcome.cost_usd == pytest.approx(cost_usd(outcome.usage, case.price))
    [call] = fake_openai.calls()["calls"]
    assert call["request"]["reasoning_effort"] == "low" and call["request"]["max_completion_tokens"] == 1024


def test_429_retry_after_is_waited_and_holds_the_route(provider_case):
    provider_case.fake.script({"kind": "rate_limit", "retry_after": 0.3})
    sleeps = Sleeps()
    governor = HoldRecorder({})
    outcome = judge(provider_case, request_for(provider_case, "a"), sleep=sleeps, governor=governor)

    assert outcome.verdict is not None and outcome.calls == 2 and sleeps == [0.3]
    assert [c["status"] for c in provider_case.fake.calls()["calls"]] == [429, 200]
    # The fleet-wide hold is keyed by the route: provider, endpoint and model.
    assert governor.holds == [(provider_case.provider.route(provider_case.model), 0.3)]


def test_outages_back_off_then_open_the_routes_breaker_and_defer(provider_case):
    provider_case.fake.configure(default_kind="server_error")
    breaker = InProcessBreaker(threshold=3, cooldown_seconds=60)
    with pytest.raises(JudgeDeferred) as deferred:
        judge(provider_case, request_for(provider_case, "a"), breaker=breaker)
    route = provider_case.provider.route(provider_case.model)
    assert [(row["model"], row["state"]) for row in breaker.status()] == [(route, "open")]
    # The third outage opened the breaker, which stopped the last retry before it was sent.
    assert deferred.value.reason.startswith(f"circuit breaker for {route} is open")
    sent = provider_case.fake.calls()["total"]
    assert sent == 3

    # The open breaker defers the next judgment without sending anything: no attempt is spent.
    with pytest.raises(JudgeDeferred, match="circuit breaker"):
        judge(provider_case, request_for(provider_case, "b"), breaker=breaker)
    assert provider_case.fake.calls()["total"] == sent


@pytest.mark.parametrize(
    ("behaviour", "reason"),
    [({"kind": "unauthorized"}, "401"), ({"kind": "bad_request"}, "400"), ({"kind": "spend_limit"}, "429")],
)
def test_permanent_errors_fail_at_once(provider_case, behaviour, reason):
    provider_case.fake.script(behaviour)
    breaker = InProcessBreaker(threshold=1)
    outcome = judge(provider_case, request_for(provider_case, "a"), breaker=breaker)

    assert outcome.verdict is None and outcome.calls == 1
    assert outcome.failure.startswith(f"{provider_case.name} {reason}")
    assert breaker.status() == [] or breaker.status()[0]["state"] == "closed"


@pytest.mark.parametrize("kind", ["malformed", "out_of_range", "truncated"])
def test_an_unusable_answer_is_repaired_once(provider_case, kind):
    provider_case.fake.script({"kind": kind})
    outcome = judge(provider_case, request_for(provider_case, "a"))

    assert outcome.verdict is not None and outcome.repaired and outcome.calls == 2
    report = provider_case.fake.calls()
    assert [c["repair"] for c in report["calls"]] == [False, True]


def test_still_unusable_after_the_repair_fails_with_the_raw_answer(provider_case):
    provider_case.fake.script({"kind": "out_of_range", "times": 2})
    outcome = judge(provider_case, request_for(provider_case, "a"))

    assert outcome.verdict is None and outcome.calls == 2 and outcome.repaired
    assert outcome.failure.startswith("unusable answer after one repair attempt: the answer does not match")
    assert outcome.raw_output and outcome.raw_output.startswith("{")


def test_a_reasoning_model_cut_off_before_any_text_fails_with_the_reason(fake_openai):
    catalog = load_model_catalog(REPO_ROOT / "config")
    provider = openai_provider(fake_openai)
    case = ProviderCase("openai", fake_openai, provider, "gpt-5-nano", catalog.models["gpt-5-nano"])
    fake_openai.script({"kind": "reasoning_cutoff", "times": 2})
    try:
        outcome = judge(case, request_for(case, "a", max_tokens=64))
    finally:
        judge_loop().run(provider.close())

    assert outcome.verdict is None and outcome.repaired and outcome.calls == 2
    assert "cut off at max_tokens=64 before any text" in outcome.failure
    assert outcome.usage["output_tokens"] == 128  # both calls' reasoning, billed


@pytest.mark.parametrize("mode", ["json_schema", "json_object", "prompt"])
@pytest.mark.parametrize(
    "spec",
    [
        {"type": "score"},
        {"type": "scale", "min": 1, "max": 5},
        {"type": "pass_fail"},
        {"type": "labels", "labels": {"good": 1, "partial": 0.5, "bad": 0}},
        {"type": "criteria", "criteria": [{"name": "grounded", "weight": 0.6}, {"name": "complete", "weight": 0.4}]},
    ],
    ids=lambda spec: spec["type"],
)
def test_every_rubric_verdict_type_on_every_structured_output_mode(fake_openai, spec, mode):
    verdict = VerdictSpec.model_validate(spec)
    model = rubric_verdict(verdict).model
    catalog = load_model_catalog(REPO_ROOT / "config")
    provider = openai_provider(fake_openai, structured_output=mode)
    case = ProviderCase("openai", fake_openai, provider, OPENAI_MODEL, catalog.models[OPENAI_MODEL])
    template = compose_template("Grade the answer.", DEFAULT_ITEM_TEMPLATE, verdict)
    inputs = {"input": "q", "output": "a", "expected": "e", "context": "c"}
    try:
        outcome = judge(case, request_for(case, "a", prompt_template=template, inputs=inputs, verdict_model=model))
    finally:
        judge_loop().run(provider.close())

    assert outcome.verdict is not None and outcome.calls == 1, outcome.failure
    [call] = fake_openai.calls()["calls"]
    expected = {"json_schema": "json_schema", "json_object": "json_object", "prompt": None}[mode]
    assert (call["request"].get("response_format") or {}).get("type") == expected


@pytest.mark.parametrize("name", ["kql_grade", "alert_session_judge", "pandas_review"])
def test_the_seed_suites_verdicts_on_both_apis(provider_case, name):
    verdict = named_verdict(name)
    request = request_for(provider_case, "a", verdict_model=verdict.model)
    outcome = judge(provider_case, request)
    assert outcome.verdict is not None and outcome.calls == 1, outcome.failure


def test_openai_rate_limit_headers_parse_like_anthropics():
    now = 1_000.0
    observed = parse_ratelimit_headers(
        {
            "x-ratelimit-limit-requests": "500",
            "x-ratelimit-remaining-requests": "499",
            "x-ratelimit-reset-requests": "120ms",
            "x-ratelimit-limit-tokens": "30000",
            "x-ratelimit-remaining-tokens": "29000",
            "x-ratelimit-reset-tokens": "6m0s",
        },
        now=now,
    )
    assert observed["requests"].limit == 500 and observed["requests"].remaining == 499
    assert observed["requests"].reset_at == pytest.approx(now + 0.12)
    assert observed["tokens"].limit == 30000 and observed["tokens"].reset_at == pytest.approx(now + 360)
    assert [parse_duration(v) for v in ("1s", "6m0s", "20ms", "1h2m3.5s", "", "soon", "5")] == [
        1.0, 360.0, 0.02, 3723.5, None, None, None,
    ]


def test_the_providers_headers_tighten_the_governor(provider_case):
    provider_case.fake.configure(requests_limit=2)
    governor = InProcessGovernor({})
    route = provider_case.provider.route(provider_case.model)
    judge(provider_case, request_for(provider_case, "a"), governor=governor)
    judge(provider_case, request_for(provider_case, "b"), governor=governor)

    # The fake said 2 requests a minute and none left: the governor holds the route until the reset.
    assert governor.acquire(route, 1) > 1.0


@pytest.fixture(params=["redis", "in_process"])
def in_flight_cap(request, redis_client, key_prefix):
    """Builds a provider's cap as each process of a fleet does: Redis ones share their slots; the
    in-process one is the embedded mode's single process (one cap, however often it is asked for)."""
    shared: dict[int, InProcessInFlight] = {}

    def build(limit: int):
        if request.param == "redis":
            return RedisInFlight(redis_client, key_prefix, "local", limit)
        return shared.setdefault(limit, InProcessInFlight(limit))

    return build


def test_max_in_flight_caps_calls_across_the_fleet(fake_openai, in_flight_cap):
    """Two 'workers' (two providers sharing one cap) send 6 calls at once to a server that takes 2."""
    catalog = load_model_catalog(REPO_ROOT / "config")
    fake_openai.configure(latency=0.2)
    providers = [openai_provider(fake_openai) for _ in range(2)]
    for provider in providers:
        provider.in_flight = in_flight_cap(2)
    case = ProviderCase("openai", fake_openai, providers[0], OPENAI_MODEL, catalog.models[OPENAI_MODEL])

    async def all_at_once() -> list[JudgeOutcome]:
        runs = [
            run_judge(
                request_for(case, f"item-{i}"),
                provider=providers[i % 2],
                breaker=InProcessBreaker(),
                governor=InProcessGovernor({}),
                price=case.price,
                policy=FAST_POLICY,
            )
            for i in range(6)
        ]
        return await asyncio.gather(*runs)

    started = time.monotonic()
    try:
        outcomes = judge_loop().run(all_at_once())
    finally:
        for provider in providers:
            judge_loop().run(provider.close())

    assert all(o.verdict is not None for o in outcomes)
    # 6 calls of 0.2 s, at most 2 at a time: three rounds.
    assert time.monotonic() - started >= 0.6
    starts = sorted(c["at"] for c in fake_openai.calls()["calls"])
    assert all(later - earlier >= 0.15 for earlier, later in zip(starts, starts[2:]))
    assert providers[0].in_flight.count() == 0  # every slot given back


def test_a_dead_workers_in_flight_slot_expires(in_flight_cap):
    cap = in_flight_cap(1)
    assert cap.take(0.2) is not None and cap.take(0.2) is None
    deadline = time.monotonic() + 2
    while (lease := cap.take(0.2)) is None and time.monotonic() < deadline:
        time.sleep(0.02)
    assert lease is not None


def test_no_free_slot_within_the_inline_wait_defers_without_sending(fake_openai):
    catalog = load_model_catalog(REPO_ROOT / "config")
    provider = openai_provider(fake_openai)
    provider.in_flight = InProcessInFlight(1)
    held = provider.in_flight.take(60)
    case = ProviderCase("openai", fake_openai, provider, OPENAI_MODEL, catalog.models[OPENAI_MODEL])
    try:
        with pytest.raises(JudgeDeferred, match="max_in_flight"):
            judge(case, request_for(case, "a"), policy=RetryPolicy(max_inline_wait_seconds=0.2))
    finally:
        provider.in_flight.give(held)
        judge_loop().run(provider.close())
    assert fake_openai.calls()["total"] == 0


def test_sampling_parameters_reach_the_openai_api(fake_openai):
    catalog = load_model_catalog(REPO_ROOT / "config")
    provider = openai_provider(fake_openai)
    case = ProviderCase("openai", fake_openai, provider, OPENAI_MODEL, catalog.models[OPENAI_MODEL])
    try:
        outcome = judge(case, request_for(case, "a", parameters={"temperature": 0.0, "seed": 7}))
    finally:
        judge_loop().run(provider.close())
    assert outcome.verdict is not None
    [call] = fake_openai.calls()["calls"]
    assert call["request"]["temperature"] == 0.0 and call["request"]["seed"] == 7


def test_concurrent_judgments_share_one_provider(provider_case):
    """Many judgments in flight on the judge loop, one client: each gets its own verdict."""
    results: list[JudgeOutcome] = []
    lock = threading.Lock()

    def one(i: int) -> None:
        outcome = judge(provider_case, request_for(provider_case, f"c{i}"))
        with lock:
            results.append(outcome)

    threads = [threading.Thread(target=one, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(results) == 8 and all(r.verdict is not None for r in results)
    assert len(provider_case.fake.calls()["answered"]) == 8


def test_the_dashboards_routes_are_the_ones_the_providers_use(fake_openai):
    catalog = load_model_catalog(REPO_ROOT / "config")
    provider = openai_provider(fake_openai)
    try:
        routes = configured_routes(catalog, env={"OPENAI_BASE_URL": fake_openai.api_base})
    finally:
        judge_loop().run(provider.close())
    assert provider.route("gpt-4.1-mini") in routes and "claude-haiku-5-5" in routes
    assert "openai@api.openai.com:gpt-5-mini" in configured_routes(catalog, env={})
