"""The pipeline's hook points, for features built on top of it: a set of scores finalized (the
review queue), a batch completed (calibration) and components landed, from which a component derived
from others is computed (a jury from its members). All run inside the transaction that lands the
score or completes the batch, so a feature's rows commit with it or not at all.

Features register themselves when imported (``@on_scores_finalized``, ``@on_batch_completed``,
``@derives_components``); the pipeline imports none of them (ARCHITECTURE.md, invariant 10). Every
process that lands scores imports them through :mod:`assay.scoring.features`, and a worker logs what
is registered when it starts."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy.orm import Session

from assay.scoring.store.models import Batch


@dataclass(frozen=True)
class Finalized:
    """A score as its finalize wrote it, for the scores-finalized hooks."""

    score_id: uuid.UUID
    suite_name: str
    item_id: uuid.UUID
    criteria_hash: str
    threshold: float
    status: str
    total: float | None
    components: Sequence[Any]


ScoresFinalizedHook = Callable[[Session, Sequence[Finalized]], object]
BatchCompletedHook = Callable[[Session, Batch], object]
# (score id, component row, the score's criteria hash) of rows that landed -> the derived rows they
# complete, as (score id, component row, result): each lands once, in the same transaction.
DerivesHook = Callable[[Session, Sequence[tuple[uuid.UUID, str, str]]], Sequence[tuple[uuid.UUID, str, Any]]]

_scores_finalized: list[ScoresFinalizedHook] = []
_batch_completed: list[BatchCompletedHook] = []
_derives: list[DerivesHook] = []


def on_scores_finalized(hook: ScoresFinalizedHook) -> ScoresFinalizedHook:
    """Register ``hook(session, finalized)`` to run after each set of scores is finalized."""
    if hook not in _scores_finalized:
        _scores_finalized.append(hook)
    return hook


def on_batch_completed(hook: BatchCompletedHook) -> BatchCompletedHook:
    """Register ``hook(session, batch)`` to run when a batch completes (its summary already written)."""
    if hook not in _batch_completed:
        _batch_completed.append(hook)
    return hook


def derives_components(hook: DerivesHook) -> DerivesHook:
    """Register ``hook(session, landed)``: given the rows that just landed (their scores locked), the
    rows derived from them that can now land, with their results (``ComponentResult``). A derived
    row waits unpublished until then (``Criteria.rows``: a jury after its members)."""
    if hook not in _derives:
        _derives.append(hook)
    return hook


def derived_landings(session: Session, landed: Sequence[tuple[uuid.UUID, str, str]]) -> list[tuple[uuid.UUID, str, Any]]:
    return [found for hook in _derives for found in hook(session, landed)]


def scores_finalized(session: Session, finalized: Sequence[Finalized]) -> None:
    for hook in _scores_finalized:
        hook(session, finalized)


def batch_completed(session: Session, batch: Batch) -> None:
    for hook in _batch_completed:
        hook(session, batch)


def registered_hooks() -> dict[str, list[str]]:
    """The registered hooks by point, as ``module.function`` names (a worker logs them at start)."""
    def names(hooks: Sequence[Callable[..., object]]) -> list[str]:
        return [f"{hook.__module__}.{hook.__qualname__}" for hook in hooks]

    return {
        "scores_finalized": names(_scores_finalized),
        "batch_completed": names(_batch_completed),
        "derives_components": names(_derives),
    }
