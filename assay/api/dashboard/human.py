"""The human verdict beside the machine one, on the item and batch pages (``assay.scoring.trust.review``)."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any

from sqlalchemy.orm import Session

from assay.scoring.trust import review


def add_human_verdicts(session: Session, views: Sequence[dict[str, Any]]) -> None:
    """Add to each score view (``score_view``: ``score_id``, ``item_id``, ``suite``) what people said:
    ``human`` (the item's latest review and labels in the suite, or None), ``reviews`` (the reviews of
    this very score) and ``review_entry`` (its open review queue entry's id, or None)."""
    if not views:
        return
    by_suite: dict[str, list[uuid.UUID]] = {}
    for view in views:
        by_suite.setdefault(view["suite"], []).append(uuid.UUID(view["item_id"]))
    humans = {suite: review.human_verdicts(session, suite, ids) for suite, ids in by_suite.items()}
    score_ids = [uuid.UUID(view["score_id"]) for view in views]
    reviews = review.reviews_of_scores(session, score_ids)
    entries = review.open_entry_for_score(session, score_ids)
    for view, score_id in zip(views, score_ids, strict=True):
        view["human"] = humans[view["suite"]].get(uuid.UUID(view["item_id"]))
        view["reviews"] = [review.review_view(r) for r in reviews.get(score_id, [])]
        entry = entries.get(score_id)
        view["review_entry"] = str(entry) if entry is not None else None
