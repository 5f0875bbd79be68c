"""Request and response schemas of the API (they make the OpenAPI document)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field

from assay.api.errors import ProblemText


class ProviderEstimateOut(BaseModel):
    provider: str = Field(..., description="A judge provider of config/models.yaml")
    judge_calls: int
    input_tokens: int
    output_tokens: int
    cost_usd: float = Field(..., description="At this provider's prices (batch lane: its batch discount)")


BY_PROVIDER = "The estimate per judge provider: one entry each when a suite judges with several"


class BadLineOut(BaseModel):
    line: int = Field(..., description="1-based line number (or array index + 1)")
    reason: ProblemText


class BatchAccepted(BaseModel):
    batch_id: str
    status: str
    suite: str
    criteria_hash: str
    accepted: int = Field(..., description="Items written")
    rejected: int = Field(..., description="Bad lines (only with partial=true; otherwise the upload is refused)")
    bad_lines: list[BadLineOut] = Field(default_factory=list, description="The first bad lines, with reasons")
    replayed: bool = Field(False, description="True when an Idempotency-Key matched an earlier upload")
    budget_usd: float | None = Field(None, description="The batch's judge spend limit in US dollars")
    estimate: dict[str, Any] | None = Field(
        None, description="Pre-flight estimate of judge calls, tokens and dollars (given with a budget)"
    )


class Progress(BaseModel):
    total: int
    done: int
    pending: int
    in_progress: int
    completed: int
    passed: int
    failed: int = Field(..., description="Scored below the threshold")
    errored: int = Field(..., description="Could not be scored (a component failed or timed out)")
    cancelled: int
    partial: int = Field(..., description="Scored with a skipped component, weights renormalised")
    rate_per_second: float
    eta_seconds: float | None
    percent: float


class PrunedOut(BaseModel):
    at: str
    scores_removed: int


class BatchOut(BaseModel):
    batch_id: str
    suite: str
    criteria_hash: str
    status: str = Field(
        ...,
        description="planning, running, completed, cancelled, failed, or budget_exhausted (judge calls "
        "stopped at the budget; finished scores kept; resume with POST /api/v1/batches/{id}/resume)",
    )
    created_by: str
    total_items: int
    budget_usd: float | None = Field(None, description="Judge spend limit in US dollars; null: none")
    spent_usd: float | None = Field(
        None, description="Spent against the budget so far, in US dollars (null without a budget; see summary.cost_usd)"
    )
    judge_lane: str = Field("realtime", description="realtime, or batch (the judge provider's batch API)")
    created_at: str | None
    finished_at: str | None
    progress: Progress | None
    summary: dict[str, Any] | None = Field(None, description="Pass rate, per-component mean / median, errors by kind")
    pruned: PrunedOut | None = Field(
        None,
        description="Set when retention removed the batch's scores (every item had a newer one): its summary "
        "stays, progress is null, and its results and reports answer 410 `pruned`",
    )


class BatchList(BaseModel):
    batches: list[BatchOut]


class SliceOut(BaseModel):
    """Which slice a row is and whether it is too small to read."""

    kind: Literal["value", "missing", "other"] = Field(
        ..., description="value: one metadata value; missing: items without the key (or null); other: the values past the cap"
    )
    value: str | None = Field(..., description="The metadata value (kind 'value'; numbers and booleans as JSON text)")
    n: int = Field(..., description="What the slice's statistics are over (scored items, pairs, compared items)")
    small: bool = Field(..., description="n is under the minimum slice size: shown, but too few to read a difference from")
    note: str | None = Field(..., description="Why the slice is flagged, or how many values 'other' groups")


class SliceSummaryOut(SliceOut):
    items: int = Field(..., description="Machine scores in the slice")
    counts: dict[str, int]
    pass_rate: float | None
    mean_total: float | None
    components: dict[str, dict[str, Any]] = Field(..., description="Per component: ok, failed, skipped, mean")


class SlicedSummaryOut(BaseModel):
    batch_id: str
    by: str
    min_items: int = Field(..., description="A slice with fewer scored items is flagged small")
    max_slices: int = Field(..., description="Values kept apart; the rest are grouped in one 'other' slice")
    slices: list[SliceSummaryOut] = Field(..., description="Largest first, then 'missing', then 'other'")


class ComponentOut(BaseModel):
    status: str = Field(..., description="pending, in_progress, deferred, ok, failed, skipped or cancelled")
    score: float | None
    weight: float
    weighted_score: float | None
    details: dict[str, Any]
    reason: ProblemText | None
    attempts: int
    raw_output: str | None = Field(
        None, description="A judge component's raw answer when it was unusable (kept as it came, for a look)"
    )
    cost_usd: float = Field(
        0.0, description="What this component's judge calls cost (a jury member's its own; a jury's, nothing: its members paid)"
    )
    carried_over_from: str | None = Field(
        None,
        description="Set when a re-score copied this result unchanged (same component specification, same "
        "item) instead of computing it again, at no cost: the score whose run computed it",
    )


class ScoreOut(BaseModel):
    score_id: str
    item_id: str
    batch_id: str | None
    position: int
    external_id: str | None = Field(None, description="The item's own id (its `id` field), when it has one")
    suite: str
    criteria_hash: str
    status: str = Field(..., description="pending, in_progress, completed, failed, timed_out or cancelled")
    total_score: float | None = Field(..., description="In [0, 1]")
    passed: bool | None
    partial: bool = Field(..., description="A component was skipped and the weights renormalised")
    components: dict[str, ComponentOut]
    error_kind: str | None
    error_message: ProblemText | None
    raw_judge_output: str | None
    usage: dict[str, Any]
    cost_usd: float
    triggered_by: str
    created_at: str | None
    started_at: str | None
    completed_at: str | None
    threshold: float | None = None
    is_current_criteria: bool | None = None
    renormalized: dict[str, Any] | None = None
    live: list[str] | None = Field(None, description="Live-result lines (the KQL scoring design's for KQL) once finished")


class ResultsPage(BaseModel):
    batch_id: str
    total: int
    limit: int
    offset: int
    results: list[ScoreOut]


class ItemOut(BaseModel):
    item_id: str
    kind: str
    external_id: str | None
    content_hash: str
    payload: dict[str, Any]
    created_at: str | None
    scores: list[ScoreOut]


class CriteriaOut(BaseModel):
    criteria_hash: str
    created_at: str | None
    suites: list[str] = Field(..., description="Suites whose current criteria this is")
    criteria_content: dict[str, Any] | None = None


class CriteriaList(BaseModel):
    criteria: list[CriteriaOut]


class Health(BaseModel):
    status: str
    checks: dict[str, str] = Field(default_factory=dict)
