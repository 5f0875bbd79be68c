"""Dashboard pages of the review queue: the suites' queues, one suite's queue (with each entry's reasons),
and an entry (the item, the machine score with each judge component's reasoning, the reviews so far and
the review form). The form posts to this site like the sign-out form: the CSRF middleware takes its
same-origin ``Origin`` (``assay.api.csrf``). The reviewer is the signed-in viewer's name.

It also gives the templates ``review_nav()``: the open entries per suite, shown in the navigation."""

from __future__ import annotations

import logging
import uuid
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, Path, Query, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from sqlalchemy import select
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import selectinload

from assay.api.dashboard import queries as q
from assay.api.dashboard.routes import (
    PAGE_SIZE,
    Viewer,
    _payload_fields,
    render,
    templates,
    viewer,
)
from assay.api.json_body import StrictJsonRoute
from assay.api.params import Offset
from assay.scoring.errors import AssayError, NotFound
from assay.scoring.kinds import get_kind
from assay.scoring.reports.views import live_lines, score_view
from assay.scoring.store.db import transaction
from assay.scoring.store.models import Item, Score, SuiteRecord
from assay.scoring.suites.criteria import load_criteria
from assay.scoring.trust import review as svc

log = logging.getLogger(__name__)

router = APIRouter(prefix="/dashboard", include_in_schema=False, route_class=StrictJsonRoute)

SuiteName = Annotated[str, Path(min_length=1, max_length=100, pattern=r"^[A-Za-z0-9_-]+$")]


def review_nav() -> list[tuple[str, int]]:
    """(suite, open entries) for the suites with an open entry, for the navigation; empty when the
    store cannot be read (the page still renders)."""
    try:
        with transaction() as session:
            return list(svc.open_counts(session).items())
    except SQLAlchemyError as exc:
        log.warning("dashboard: cannot read the review queue for the navigation: %s", exc)
        return []


templates.env.globals.update(review_nav=review_nav)


@router.get("/review", response_class=HTMLResponse)
def queues_page(request: Request, who: Annotated[Viewer, Depends(viewer)]) -> HTMLResponse:
    with transaction() as session:
        counts = svc.queue_counts(session)
        for name in session.scalars(select(SuiteRecord.name).where(SuiteRecord.state != "deleted")):
            counts.setdefault(name, {"open": 0, "reviewed": 0, "closed": 0})
        rules = {
            name: svc.suite_rules(options, name)
            for name, options in session.execute(select(SuiteRecord.name, SuiteRecord.options))
        }
    rows = [
        {"suite": name, **c, "rules": _rule_texts(rules.get(name))} for name, c in sorted(counts.items())
    ]
    return render(request, who, "review_queues.html", nav="review", rows=rows)


def _rule_texts(rules: Any) -> list[str]:
    if rules is None:
        return []
    texts = []
    if rules.near_threshold is not None:
        texts.append(f"within {rules.near_threshold:g} of the threshold")
    for rule in rules.disagreement:
        texts.append(f"{' / '.join(rule.components)} differ by more than {rule.more_than:g}")
    if rules.repaired:
        texts.append("a judge answer needed a repair")
    if rules.random_share > 0:
        texts.append(f"{100 * rules.random_share:g}% at random")
    return texts


@router.get("/review-queue/{suite}", response_class=HTMLResponse)
def queue_page(
    request: Request,
    suite: SuiteName,
    who: Annotated[Viewer, Depends(viewer)],
    status: Annotated[Literal["open", "reviewed", "closed"], Query()] = "open",
    offset: Offset = 0,
) -> HTMLResponse:
    with transaction() as session:
        if session.get(SuiteRecord, suite) is None:
            return render(request, who, "not_found.html", status_code=404, what=f"suite {suite}")
        entries, total = svc.list_queue(session, suite, status=status, limit=PAGE_SIZE, offset=offset)
        counts = svc.queue_counts(session).get(suite, {"open": 0, "reviewed": 0, "closed": 0})
    return render(
        request,
        who,
        "review_queue.html",
        nav="review",
        suite=suite,
        status=status,
        entries=entries,
        total=total,
        counts=counts,
        offset=offset,
        page_size=PAGE_SIZE,
    )


def _entry_page(
    request: Request, who: Viewer, entry_id: uuid.UUID, *, error: str | None = None, status_code: int = 200,
    recorded: bool = False, form: dict[str, Any] | None = None,
) -> HTMLResponse:
    with transaction() as session:
        try:
            entry = svc.get_entry(session, entry_id)
        except NotFound:
            return render(request, who, "not_found.html", status_code=404, what=f"review queue entry {entry_id}")
        score = session.get(Score, entry.score_id, options=[selectinload(Score.components), selectinload(Score.item)])
        item: Item = score.item
        try:
            criteria = load_criteria(session, entry.criteria_hash)
            threshold: float | None = criteria.threshold
            judges: list[str] | None = criteria.judge_components
            lines = live_lines(score, get_kind(criteria.kind), threshold)
        except NotFound:
            threshold, judges, lines = None, None, [score.status]
        machine = score_view(score, threshold=threshold)
        machine["judges"] = q.judge_views(score, judges)
        machine["lines"] = lines
        reviews = [svc.review_view(r) for r in svc.reviews_of_entry(session, entry_id)]
        human = svc.human_verdicts(session, entry.suite, [entry.item_id]).get(entry.item_id)
        following, _ = svc.list_queue(session, entry.suite, limit=2)
        next_entry = next((e.id for e in following if e.id != entry_id), None)
        payload = (item.payload or {}) if item is not None else {}
    return render(
        request,
        who,
        "review_entry.html",
        status_code=status_code,
        nav="review",
        entry=entry,
        item=item,
        payload=_payload_fields(payload),
        s=machine,
        threshold=threshold,
        reviews=reviews,
        human=human,
        next_entry=next_entry,
        error=error,
        recorded=recorded,
        form=form or {},
    )


@router.get("/review-entries/{entry_id}", response_class=HTMLResponse)
def entry_page(
    request: Request, entry_id: uuid.UUID, who: Annotated[Viewer, Depends(viewer)], recorded: bool = False
) -> HTMLResponse:
    return _entry_page(request, who, entry_id, recorded=recorded)


@router.post("/review-entries/{entry_id}", response_class=HTMLResponse)
async def record_review(request: Request, entry_id: uuid.UUID, who: Annotated[Viewer, Depends(viewer)]) -> Response:
    """The review form: ``verdict`` (pass or fail), an optional 0-1 ``score`` and a ``comment``."""
    form = await request.form()
    verdict = str(form.get("verdict") or "")
    raw_score = str(form.get("score") or "").strip()
    comment = str(form.get("comment") or "")
    kept = {"verdict": verdict, "score": raw_score, "comment": comment}
    problem = None
    score: float | None = None
    if verdict not in ("pass", "fail"):
        problem = "Choose pass or fail."
    elif raw_score:
        try:
            score = float(raw_score)
        except ValueError:
            problem = f"The score {raw_score[:40]!r} is not a number: give one from 0 to 1, or leave it empty."
        else:
            if not 0.0 <= score <= 1.0:  # NaN fails this too
                problem = f"The score {raw_score[:40]} is outside 0 to 1."
    if problem is None and len(comment) > svc.COMMENT_MAX:
        problem = f"The comment is longer than {svc.COMMENT_MAX:,} characters."
    if problem is not None:
        return _entry_page(request, who, entry_id, error=problem, status_code=422, form=kept)
    try:
        with transaction() as session:
            svc.record_review(session, entry_id, reviewer=who.id, passed=verdict == "pass", score=score, comment=comment)
    except NotFound:
        return render(request, who, "not_found.html", status_code=404, what=f"review queue entry {entry_id}")
    except AssayError as exc:
        return _entry_page(request, who, entry_id, error=exc.message, status_code=exc.status_code, form=kept)
    return RedirectResponse(f"/dashboard/review-entries/{entry_id}?recorded=true", status_code=303)
