"""A pairwise run's report, read from its batch's judged pairs (``trust.ranking`` does the numbers).

- ``pairs``: how many pairs were judged in both orders (``judged``), and how many were not
  (``incomplete``: an order failed, was skipped or cancelled; such a pair counts nowhere else).
- ``head_to_head``: for every two systems compared, B's wins / ties / losses against A, B's win rate
  (ties as half) with its bootstrap 95 % interval, the sign test p-value on the decisive pairs and the
  position-inconsistency rate. With two systems it is the run's answer; ``slices`` gives the same per
  value of the run's ``by`` key (A's item metadata; items without it are the slice ``(none)``).
- ``moved_most``: the pairs both orders agreed were decisive, B's losses first, with each order's
  reasoning and the ids of the pair's item and of the two compared items (at most ``MOVED_LIMIT``).
- ``leaderboard`` (three or more systems): Bradley-Terry strengths with their item-bootstrap
  intervals, ranks and rank intervals, best first (``ranking.bradley_terry``).
"""

from __future__ import annotations

import uuid
from collections import defaultdict
from dataclasses import dataclass
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from assay.scoring.kinds.pairwise import A_FIRST, B_FIRST
from assay.scoring.store.models import Item, PairwiseRun, Score, ScoreComponent
from assay.scoring.trust.ranking import (
    A_WINS,
    B_WINS,
    BT_ALPHA,
    Comparison,
    bradley_terry,
    head_to_head,
    pair_outcome,
)

MOVED_LIMIT = 20
SLICE_PREFIX = "metadata."
NO_SLICE = "(none)"


@dataclass(frozen=True)
class JudgedPair:
    external_id: str
    item_id: uuid.UUID  # the pair's own item (kind pairwise)
    a_item_id: str  # the compared items
    b_item_id: str
    a: int
    b: int
    outcome: float
    inconsistent: bool
    labels: tuple[str | None, str | None]  # each order's verdict label (its own positions)
    reasoning: tuple[str | None, str | None]
    slice: str | None


def judged_pairs(session: Session, run: PairwiseRun) -> tuple[list[JudgedPair], int]:
    """The run's pairs judged in both orders, and how many pairs were not."""
    index = {s["batch_id"]: n for n, s in enumerate(run.systems)}
    by = run.design.get("by")
    key = by[len(SLICE_PREFIX) :] if by else None
    rows = session.execute(
        select(
            Score.id,
            Item.id.label("item_id"),
            Item.payload,
            ScoreComponent.component,
            ScoreComponent.status,
            ScoreComponent.score,
            ScoreComponent.details,
        )
        .join(Item, Item.id == Score.item_id)
        .join(ScoreComponent, ScoreComponent.score_id == Score.id)
        .where(Score.batch_id == run.batch_id, ScoreComponent.component.in_((A_FIRST, B_FIRST)))
    ).all()
    per_score: dict[uuid.UUID, dict[str, Any]] = defaultdict(dict)
    payloads: dict[uuid.UUID, tuple[uuid.UUID, dict[str, Any]]] = {}
    for r in rows:
        payloads[r.id] = (r.item_id, r.payload)
        if r.status == "ok" and r.score is not None:
            per_score[r.id][r.component] = (r.score, r.details or {})
    out = []
    for score_id, (item_id, payload) in payloads.items():
        orders = per_score.get(score_id, {})
        if A_FIRST not in orders or B_FIRST not in orders:
            continue
        (first, d1), (second, d2) = orders[A_FIRST], orders[B_FIRST]
        outcome, inconsistent = pair_outcome(first, second)
        value = (payload.get("metadata") or {}).get(key) if key else None
        out.append(
            JudgedPair(
                external_id=payload["id"],
                item_id=item_id,
                a_item_id=payload["a"]["item_id"],
                b_item_id=payload["b"]["item_id"],
                a=index[payload["a"]["batch_id"]],
                b=index[payload["b"]["batch_id"]],
                outcome=outcome,
                inconsistent=inconsistent,
                labels=(d1.get("label"), d2.get("label")),
                reasoning=(d1.get("reasoning"), d2.get("reasoning")),
                slice=None if not key else (NO_SLICE if value is None else str(value)),
            )
        )
    # A pair with no component landed has no row in the join above: count the batch's scores.
    scores = session.scalar(select(func.count()).select_from(Score).where(Score.batch_id == run.batch_id)) or 0
    incomplete = scores - len(out)
    return sorted(out, key=lambda p: (p.external_id, p.a, p.b)), incomplete


def _h2h(pairs: list[JudgedPair]) -> dict[str, Any]:
    return head_to_head([p.outcome for p in pairs], [p.inconsistent for p in pairs]).to_dict()


def _moved(pairs: list[JudgedPair], systems: list[dict[str, Any]]) -> list[dict[str, Any]]:
    decisive = [p for p in pairs if not p.inconsistent and p.outcome in (A_WINS, B_WINS)]
    decisive.sort(key=lambda p: (p.outcome, p.external_id))  # B's losses first
    return [
        {
            "external_id": p.external_id,
            "pair_item_id": str(p.item_id),
            "a_item_id": p.a_item_id,
            "b_item_id": p.b_item_id,
            "a": systems[p.a]["label"],
            "b": systems[p.b]["label"],
            "winner": systems[p.b if p.outcome == B_WINS else p.a]["label"],
            "reasoning_a_first": p.reasoning[0],
            "reasoning_b_first": p.reasoning[1],
        }
        for p in decisive[:MOVED_LIMIT]
    ]


def compute_report(session: Session, run: PairwiseRun) -> dict[str, Any]:
    pairs, incomplete = judged_pairs(session, run)
    systems = run.systems
    by_systems: dict[tuple[int, int], list[JudgedPair]] = defaultdict(list)
    for p in pairs:
        by_systems[(p.a, p.b)].append(p)
    report: dict[str, Any] = {
        "pairs": {"judged": len(pairs), "incomplete": incomplete},
        "head_to_head": [
            {"a": systems[a]["label"], "b": systems[b]["label"], **_h2h(group)} for (a, b), group in sorted(by_systems.items())
        ],
        "moved_most": _moved(pairs, systems),
        "slices": None,
        "leaderboard": None,
    }
    if run.design.get("by") and len(systems) == 2:
        slices: dict[str, list[JudgedPair]] = defaultdict(list)
        for p in pairs:
            slices[p.slice or NO_SLICE].append(p)
        report["slices"] = {"by": run.design["by"], "values": [{"value": v, **_h2h(g)} for v, g in sorted(slices.items())]}
    if len(systems) >= 3:
        strengths, resamples = bradley_terry(len(systems), [Comparison(p.external_id, p.a, p.b, p.outcome) for p in pairs])
        report["leaderboard"] = {
            "model": "Bradley-Terry (choix.ilsr_pairwise)",
            "alpha": BT_ALPHA,
            "tie_rule": "a tie is half a win for each system",
            "resamples": resamples,
            "resampled": "items",
            "systems": [{"label": systems[s.system]["label"], "batch_id": systems[s.system]["batch_id"], **s.to_dict()} for s in strengths],
        }
    return report
