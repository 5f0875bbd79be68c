"""Shared by the alert-session tests (here, tests/api/test_sessions_api.py, tests/workers/test_sessions_e2e.py)."""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from typing import Any

import pytest

from tests.conftest import REPO

EXAMPLES = REPO / "examples" / "sessions.jsonl"


def core_missing() -> list[str]:
    """The core lines the alert-session work needs (registries, hooks, router, migration, suite)."""
    from assay.scoring import kinds
    from assay.scoring.kinds import Kind
    from assay.scoring.store.models import Base

    missing = []
    if "alert_session" not in kinds._KIND_MODULES:
        missing.append("_KIND_MODULES['alert_session']")
    for hook in ("prepare_judge", "on_finalized", "external_id"):
        if hook not in Kind.__dataclass_fields__:
            missing.append(f"Kind.{hook}")
    if "score_missing_tools" not in Base.metadata.tables:
        missing.append("models.py importing session_models")
    if not list((REPO / "migrations" / "versions").glob("*_session_scoring.py")):
        missing.append("the session_scoring migration")
    if not (REPO / "config" / "suites" / "alert_session.yaml").is_file():
        missing.append("config/suites/alert_session.yaml")
    from assay.api import app

    if "sessions" not in app.create_app.__code__.co_names:
        missing.append("the sessions router in create_app")
    return missing


def skip_unless_core_ready() -> None:
    """Skip the calling test module, before it imports anything that registers the session tables
    (which would put them in ``Base.metadata`` while no migration creates them)."""
    missing = core_missing()
    if missing:
        pytest.skip(f"alert-session core lines not applied yet: {', '.join(missing)}", allow_module_level=True)


def example_sessions() -> list[dict[str, Any]]:
    return [json.loads(line) for line in EXAMPLES.read_text().splitlines() if line.strip()]


def make_session(session_id: str = "sess-1", status: str = "completed", **overrides: Any) -> dict[str, Any]:
    """A completed example session under a new id."""
    base = copy.deepcopy(example_sessions()[0])
    base.update(session_id=session_id, status=status, **overrides)
    return base


VERDICT: dict[str, Any] = {
    "total_score": 67,
    "score_breakdown": {"logical_flow": 15, "consistency": 18, "tool_relevance": 14, "synthesis_quality": 20},
    "score_reasoning": "The investigation demonstrates adequate methodology with notable gaps...",
    "missing_tools": [
        {"tool_name": "list-processes-in-pod", "rationale": "Would have confirmed whether the suspicious binary was actively running..."},
        {"tool_name": "read-file", "rationale": "Would have shown what /tmp/xmrig actually is."},
    ],
    "alternative_approaches": [
        {
            "name": "File-First Forensic Approach",
            "description": "Systematically enumerate all suspicious files before attempting execution verification",
            "steps": [
                "Use list-files to discover all files in suspicious directory",
                "Read content of each file to identify actual malware vs false positives",
                "Correlate file timestamps with alert time window",
            ],
        },
        {"name": "Process-First Approach", "description": "Check running processes first.", "steps": ["Use list-processes-in-pod"]},
    ],
}


class StubJudge:
    """Replaces ``run_judge`` (the scorer imports it at call time): answers scripted verdicts, or a failure."""

    def __init__(self) -> None:
        self.answers: list[dict[str, Any] | str] = []
        self.default: dict[str, Any] | str = VERDICT
        self.requests: list[Any] = []

    async def __call__(self, request: Any, **kwargs: Any) -> Any:
        from assay.scoring.judge.service import JudgeOutcome

        self.requests.append(request)
        answer = self.answers.pop(0) if self.answers else self.default
        usage = {"input_tokens": 1000, "output_tokens": 200, "cache_read_input_tokens": 0, "cache_creation_input_tokens": 0}
        if isinstance(answer, str):
            return JudgeOutcome(None, answer, "not json at all", usage, 0.006, 2)
        verdict = request.verdict_model.model_validate(answer)
        return JudgeOutcome(verdict, None, None, usage, 0.006, 1)


def judge_runtime() -> Any:
    from assay.scoring.pipeline.scorer import JudgeRuntime
    from assay.scoring.suites.loader import load_model_catalog

    from assay.scoring.judge.providers.registry import ProviderRegistry

    # run_judge is stubbed in these tests: the provider is never called.
    providers = ProviderRegistry({"anthropic": object()})  # type: ignore[dict-item]
    return JudgeRuntime(providers=providers, breaker=None, governor=None, catalog=load_model_catalog(REPO / "config"))


def run_refs(refs: list[Any]) -> None:
    """Claim, compute and land component refs in this process, as a worker would."""
    from assay.scoring.pipeline.claims import claim
    from assay.scoring.pipeline.landing import land
    from assay.scoring.pipeline.scorer import compute, load_work
    from assay.scoring.store.db import transaction

    runtime = judge_runtime()
    for ref in refs:
        with transaction() as session:
            assert claim(session, ref, "test-owner", 60).state == "claimed"
        with transaction() as session:
            work = load_work(session, ref)
        result = compute(work, runtime)
        with transaction() as session:
            land(session, ref, result)


def iter_lines(text: str) -> Iterator[dict[str, Any]]:
    for line in text.splitlines():
        if line.strip():
            yield json.loads(line)
