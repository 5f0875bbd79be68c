"""Computes one component of one score: a registered metric, or a judge component (each its own
judge call: the suite-level judge of ``judge: true`` or a rubric judge)."""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel
from sqlalchemy import select
from sqlalchemy.orm import Session

from assay.scoring.errors import AssayError
from assay.scoring.kinds import Kind, get_kind
from assay.scoring.metrics.catalog import build_metric
from assay.scoring.metrics.registry import ComponentResult, Metric, MetricContext
from assay.scoring.pipeline.components import ComponentRef
from assay.scoring.store.models import Item, Score, SuiteRecord
from assay.scoring.suites.criteria import load_criteria
from assay.scoring.suites.loader import Criteria, JudgeOptions, ModelCatalog, ResolvedJudge

log = logging.getLogger(__name__)


@dataclass
class JudgeRuntime:
    """Everything a judge call needs, built once per worker process (after fork)."""

    providers: Any | None  # judge.providers.registry.ProviderRegistry: the providers this process can call
    breaker: Any
    governor: Any
    catalog: ModelCatalog
    policy: Any = None  # judge.retry.RetryPolicy; None = its defaults


@dataclass(frozen=True)
class WorkUnit:
    """What a component needs, read in a short transaction so no connection is held during slow work."""

    ref: ComponentRef
    criteria_hash: str
    criteria: Criteria
    kind: Kind
    item: BaseModel
    context: MetricContext
    judge_timeout: float  # this component's, when it is a judge component


_options_cache: dict[str, tuple[float, dict[str, Any]]] = {}
OPTIONS_TTL_SECONDS = 60.0


def _suite_options(session: Session, suite_name: str) -> dict[str, Any]:
    """A suite's operational options, re-read at most once a minute per process."""
    now = time.monotonic()
    hit = _options_cache.get(suite_name)
    if hit is None or now - hit[0] > OPTIONS_TTL_SECONDS:
        suite = session.get(SuiteRecord, suite_name)
        hit = (now, suite.options if suite else {})
        _options_cache[suite_name] = hit
    return hit[1]


_WORK_ROWS = select(Score.id, Score.criteria_hash, Score.suite_name, Score.created_at, Item.payload).join(
    Item, Item.id == Score.item_id
)


def work_rows(session: Session, score_ids: Collection[uuid.UUID]) -> dict[uuid.UUID, Any]:
    """What ``work_from_row`` needs of several scores, in one query (a claimed group reads them together)."""
    if not score_ids:
        return {}
    return {row.id: row for row in session.execute(_WORK_ROWS.where(Score.id.in_(score_ids)))}


def load_work(session: Session, ref: ComponentRef) -> WorkUnit | None:
    return work_from_row(session, ref, work_rows(session, [ref.score_id]).get(ref.score_id))


def work_from_row(
    session: Session, ref: ComponentRef, row: Any, items: dict[uuid.UUID, BaseModel] | None = None
) -> WorkUnit | None:
    """The work of ``ref`` from its score's row (None: the score is gone). Raises ``AssayError`` or a
    pydantic ``ValidationError`` when the stored work cannot be read. ``items``: the items of the
    scores read so far (by score id), so that a score's components validate its item once."""
    if row is None:
        return None
    criteria = load_criteria(session, row.criteria_hash)
    kind = get_kind(criteria.kind)
    options = JudgeOptions.model_validate(_suite_options(session, row.suite_name).get("judge") or {})
    item = items.get(ref.score_id) if items is not None else None
    if item is None:
        item = kind.item_model.model_validate(row.payload)
        if items is not None:
            items[ref.score_id] = item
    return WorkUnit(
        ref=ref,
        criteria_hash=row.criteria_hash,
        criteria=criteria,
        kind=kind,
        item=item,
        # Pinned to the score's creation so a rerun computes the same thing ("now" never drifts).
        context=MetricContext(now=row.created_at, dataset_loader=_load_dataset),
        judge_timeout=options.timeout_for(ref.component),
    )


def _load_dataset(content_hash: str) -> dict[str, Any]:
    from assay.scoring.intake.datasets import load_tables
    from assay.scoring.store.db import transaction

    with transaction() as session:
        return load_tables(session, content_hash)


_metric_cache: dict[tuple[str, str], Metric] = {}
_metric_lock = threading.Lock()


def _metric(work: WorkUnit) -> Metric:
    key = (work.criteria_hash, work.ref.component)
    with _metric_lock:
        if key not in _metric_cache:
            spec = work.criteria.components[work.ref.component]
            assert spec.metric is not None and spec.version is not None
            _metric_cache[key] = build_metric(spec.metric, spec.version, spec.args, work.kind.name, spec.plugin)
        return _metric_cache[key]


def compute(work: WorkUnit, judge: JudgeRuntime | None) -> ComponentResult:
    """Run the component, from any thread but the judge loop's: a judge component waits for its
    judgment on the process's judge loop (a judge worker runs ``judge_component`` there itself, a
    group's calls at once). Raises ``JudgeDeferred`` when the judge must wait (breaker open, rate limit)."""
    if work.criteria.is_judge_call(work.ref.component):
        from assay.scoring.judge.loop import judge_loop

        return judge_loop().run(judge_component(work, judge))
    spec = work.criteria.components.get(work.ref.component)
    if spec is None or spec.is_judge:  # a jury is landed from its members, never computed
        return ComponentResult.failed(f"component {work.ref.component!r} is not computed by a worker")
    try:
        # Inside the try: a metric this process cannot build (a plug-in missing or at another
        # version) fails its component with the reason, never the task.
        return _metric(work)(work.item, work.context)
    except AssayError as exc:
        return ComponentResult.failed(exc.message)
    except Exception as exc:  # a bug in one metric must fail one component, never the worker
        log.exception("metric %s failed on score %s", spec.metric, work.ref.score_id)
        return ComponentResult.failed(f"metric {spec.metric} raised {type(exc).__name__}: {exc}")


def judge_inputs_for(
    criteria: Criteria, component: str, kind: Kind, item: BaseModel, catalog: ModelCatalog
) -> tuple[dict[str, str], dict[str, Any]]:
    """The placeholder values of judge component ``component``'s prompt for one item, and the kind's
    notes to store beside the verdict. Raises AssayError when the item cannot be judged (it fails, it
    does not spend)."""
    return _judge_inputs(criteria.judge_for(component), kind, item, catalog)


def _judge_inputs(judge: ResolvedJudge, kind: Kind, item: BaseModel, catalog: ModelCatalog) -> tuple[dict[str, str], dict[str, Any]]:
    if kind.prepare_judge is None:
        return kind.judge_inputs(item), {}
    return kind.prepare_judge(
        item,
        template=judge.template,
        verdict_model=judge.verdict.model,
        model=judge.model,
        max_tokens=judge.max_tokens,
        context_window=catalog.price(judge.provider, judge.model).context_window,
    )


def render_judge_prompt(
    criteria: Criteria, component: str, kind: Kind, item: BaseModel, catalog: ModelCatalog
) -> tuple[Any, dict[str, Any]]:
    """Judge component ``component``'s prompt for one item (static prefix and per-item rest) exactly
    as it would be sent, and the kind's notes."""
    from assay.scoring.judge.prompt import render_prompt

    judge = criteria.judge_for(component)
    inputs, notes = _judge_inputs(judge, kind, item, catalog)
    prompt = render_prompt(
        judge.template,
        inputs,
        judge.verdict.model,
        model=judge.model,
        min_cacheable_tokens=catalog.price(judge.provider, judge.model).min_cacheable_tokens,
    )
    return prompt, notes


async def judge_component(work: WorkUnit, runtime: JudgeRuntime | None) -> ComponentResult:
    """Judge component ``work.ref.component`` of one item, on the judge loop. Raises ``JudgeDeferred``
    when the judge must wait (breaker open, rate limit)."""
    from assay.scoring.judge.service import JudgeRequest, run_judge

    try:
        judge = work.criteria.judge_for(work.ref.component)
    except AssayError as exc:
        return ComponentResult.failed(exc.message, dict(exc.details))
    if runtime is None or not runtime.providers or runtime.providers.get(judge.provider) is None:
        registry = runtime.providers if runtime is not None else None
        reason = registry.why_missing(judge.provider) if registry is not None else "no judge provider is configured"
        return ComponentResult.skipped(reason)
    provider = runtime.providers.get(judge.provider)
    try:
        inputs, notes = _judge_inputs(judge, work.kind, work.item, runtime.catalog)
        price = runtime.catalog.price(judge.provider, judge.model)
    except AssayError as exc:
        return ComponentResult.failed(exc.message, dict(exc.details))
    outcome = await run_judge(
        JudgeRequest(
            model=judge.model,
            max_tokens=judge.max_tokens,
            timeout_seconds=work.judge_timeout,
            prompt_template=judge.template,
            inputs=inputs,
            verdict_model=judge.verdict.model,
            parameters=judge.parameters,
        ),
        provider=provider,
        breaker=runtime.breaker,
        governor=runtime.governor,
        price=price,
        **({"policy": runtime.policy} if runtime.policy is not None else {}),
    )
    extra = {"usage": outcome.usage, "cost_usd": outcome.cost_usd}
    if outcome.verdict is None:
        return ComponentResult.failed(
            outcome.failure or "the judge gave no usable verdict",
            {**notes, "calls": outcome.calls, "repaired": outcome.repaired},
            raw_output=outcome.raw_output,
            **extra,
        )
    result = verdict_result(judge, outcome.verdict, notes, calls=outcome.calls, **extra)
    result.details["repaired"] = outcome.repaired
    return result


def verdict_result(
    judge: ResolvedJudge, verdict: BaseModel, notes: dict[str, Any], *, calls: int, usage: dict[str, int], cost_usd: float
) -> ComponentResult:
    """A validated verdict of ``judge`` as its component's result (realtime and batch lanes alike)."""
    score, details = judge.verdict.score(verdict)
    # The provider is stated beside the model only when it is not the default, so the details of
    # Anthropic judgments read as they always did.
    provider = {} if judge.provider == "anthropic" else {"provider": judge.provider}
    return ComponentResult(
        "ok",
        min(1.0, max(0.0, score)),
        {**notes, **details, **provider, "model": judge.model, "calls": calls},
        usage=usage,
        cost_usd=cost_usd,
    )
