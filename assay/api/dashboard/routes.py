"""Dashboard pages. Each page reads the store through ``queries`` and renders one template; the pages'
live parts (progress bars, the "Score session" button, the upload form) call the JSON API from
``static/dashboard.js`` with the session cookie (or through the trusted proxy)."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Annotated, Any
from urllib.parse import quote

from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import HTMLResponse, JSONResponse, RedirectResponse, Response
from fastapi.templating import Jinja2Templates
from starlette.concurrency import run_in_threadpool

from assay.api.auth import check_key, forwarded_user
from assay.api.csrf import proxy_token
from assay.api.dashboard import queries as q
from assay.api import signin_sessions as cookie
from assay.api.dashboard.human import add_human_verdicts
from assay.api.json_body import StrictJsonRoute
from assay.api.params import Offset
from assay.api.security_headers import SECURITY_HEADERS
from assay.api.throttle import TooManyFailures
from assay.scoring import principals, slices
from assay.scoring.errors import BadRequest, NotFound, Unauthorized
from assay.scoring.intake import batches as svc
from assay.scoring.kinds import get_kind
from assay.scoring.pipeline.summaries import batch_summary, sliced_summary
from assay.scoring.reports.views import live_lines, score_view
from assay.scoring.store.db import transaction
from assay.scoring.store.models import Score
from assay.scoring.suites.criteria import load_criteria
from assay.settings import get_settings

router = APIRouter(prefix="/dashboard", include_in_schema=False, route_class=StrictJsonRoute)
root_router = APIRouter(include_in_schema=False, route_class=StrictJsonRoute)
templates = Jinja2Templates(directory=str(Path(__file__).resolve().parent / "templates"))
PAGE_SIZE = 50


# --- who is looking -------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Viewer:
    name: str
    via: str  # "proxy" or "session"
    csrf: str  # the CSRF token the page's requests send (assay.api.csrf)

    @property
    def id(self) -> str:
        """The viewer's principal as the store records it (``key:NAME`` for a session, ``proxy:NAME``)."""
        return principals.signed_in(self.via, self.name)


class SignInRequired(Exception):
    def __init__(self, next_path: str) -> None:
        super().__init__("sign in first")
        self.next_path = next_path


def _current_viewer(request: Request) -> Viewer | None:
    settings = get_settings()
    user = forwarded_user(request, settings)
    if user is not None:
        return Viewer(user, "proxy", proxy_token(settings, user))
    data = cookie.read(request, settings)
    if data is not None:
        return Viewer(data.user, "session", data.csrf)
    return None


def viewer(request: Request) -> Viewer:
    """A page's viewer; without one the page redirects to the sign-in form (no data is shown)."""
    found = _current_viewer(request)
    if found is None:
        target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
        raise SignInRequired(target)
    return found


def json_viewer(request: Request) -> Viewer:
    found = _current_viewer(request)
    if found is None:
        raise Unauthorized("sign in to the dashboard first")
    return found


async def sign_in_redirect(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, SignInRequired)
    return RedirectResponse(f"/dashboard/sign-in?next={quote(exc.next_path, safe='/')}", status_code=303)


def _safe_next(value: str | None) -> str:
    """Only a path on this site: never ``//host`` or ``https://...`` (no open redirect)."""
    if not value or not value.startswith("/") or value.startswith("//") or "\\" in value:
        return "/dashboard/"
    return value


# --- template helpers -----------------------------------------------------------------------------------------


def _pct(value: float | None, digits: int = 1) -> str:
    return "—" if value is None else f"{100 * value:.{digits}f}%"


def _usd(value: float | None) -> str:
    if value is None:
        return "—"
    return f"${value:,.4f}" if value < 1 else f"${value:,.2f}"


def _when(value: Any) -> str:
    if value is None:
        return "—"
    if isinstance(value, str):
        try:
            value = datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            return value
    if value.tzinfo is None:
        value = value.replace(tzinfo=timezone.utc)
    return value.astimezone(timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")


def _short(value: str | None, n: int = 12) -> str:
    return "" if not value else value[:n]


def _number(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


templates.env.filters.update(pct=_pct, usd=_usd, when=_when, short=_short, number=_number)
templates.env.globals.update(band=q.band)


def render(request: Request, who: Viewer | None, name: str, status_code: int = 200, **context: Any) -> HTMLResponse:
    context.setdefault("nav", name.split(".")[0])
    context.update(viewer=who, csrf=who.csrf if who else "")
    response = templates.TemplateResponse(request, name, context, status_code=status_code)
    response.headers.update(SECURITY_HEADERS)
    return response


# --- sign in / out ----------------------------------------------------------------------------------------------


@root_router.get("/")
def root() -> RedirectResponse:
    return RedirectResponse("/dashboard/", status_code=307)


@router.get("")
def dashboard_root() -> RedirectResponse:
    return RedirectResponse("/dashboard/", status_code=307)


@router.get("/sign-in", response_class=HTMLResponse)
def sign_in_form(request: Request, next: str | None = None) -> Response:
    if _current_viewer(request) is not None:
        return RedirectResponse(_safe_next(next), status_code=303)
    return _sign_in_page(request, _safe_next(next))


def _sign_in_page(request: Request, next_path: str, error: str | None = None, status_code: int = 200) -> HTMLResponse:
    return render(request, None, "sign_in.html", status_code=status_code, next=next_path, error=error)


@router.post("/sign-in", response_class=HTMLResponse)
async def sign_in(request: Request) -> Response:
    """A session for one of the API keys. Only this site's own form gets here: the CSRF middleware
    refuses a sign-in whose Origin is another site's (login CSRF, assay.api.csrf)."""
    form = await request.form()
    offered = str(form.get("api_key") or "").strip()
    next_path = _safe_next(str(form.get("next") or ""))
    settings = get_settings()
    if not offered:
        return _sign_in_page(request, next_path, "Enter one of this deployment's API keys.", 401)
    try:
        key = await run_in_threadpool(check_key, request, offered, settings)
    except TooManyFailures as exc:
        message = f"Too many wrong keys from your address: try again in {exc.retry_after} s."
        page = _sign_in_page(request, next_path, message, 429)
        page.headers["Retry-After"] = str(exc.retry_after)
        return page
    if key is None:
        return _sign_in_page(request, next_path, "That API key is not one of this deployment's keys.", 401)
    value = await run_in_threadpool(cookie.start, settings, key.name, key.key)
    response = RedirectResponse(next_path, status_code=303)
    cookie.set_cookie(response, settings, value)
    return response


@router.post("/sign-out")
async def sign_out(request: Request) -> Response:
    """Ends the session in the store (its cookie is refused from now on, by every API process) and
    clears the cookie. Like every request that changes something, it needs the CSRF token or a
    same-origin Origin (assay.api.csrf)."""
    data = cookie.signed(request, get_settings())
    if data is not None:
        await run_in_threadpool(cookie.revoke, data)
    response = RedirectResponse("/dashboard/sign-in", status_code=303)
    cookie.clear_cookie(response)
    return response


# --- batches ----------------------------------------------------------------------------------------------------


@router.get("/", response_class=HTMLResponse)
def batches_page(
    request: Request,
    who: Annotated[Viewer, Depends(viewer)],
    suite: str | None = None,
    offset: Offset = 0,
) -> HTMLResponse:
    with transaction() as session:
        rows = q.list_batch_rows(session, limit=PAGE_SIZE, offset=offset, suite=suite or None)
        suites = q.suite_names(session)
    return render(
        request, who, "batches.html", rows=rows, suites=suites, suite=suite, offset=offset, page_size=PAGE_SIZE
    )


@router.get("/api/batches")
def batches_progress(
    who: Annotated[Viewer, Depends(json_viewer)],
    ids: Annotated[str, Query(max_length=4000, description="Comma-separated batch ids")] = "",
) -> JSONResponse:
    """Live progress for the batches on a page (the list's and the detail page's bars poll this)."""
    wanted: list[uuid.UUID] = []
    for part in ids.split(","):
        try:
            wanted.append(uuid.UUID(part.strip()))
        except ValueError:
            continue
    with transaction() as session:
        rows = q.batch_rows_by_id(session, wanted[:200])
    for row in rows:
        row["created_at"] = _when(row["created_at"])
    return JSONResponse({"batches": rows}, headers={"Cache-Control": "no-store"})


def _section_rows(scores: list[Score], threshold: float, judges: list[str], kind: Any) -> list[dict[str, Any]]:
    rows = []
    for s in scores:
        view = score_view(s, threshold=threshold)
        view["external_id"] = s.item.external_id if s.item is not None else None
        view["lines"] = live_lines(s, kind, threshold)
        view["judges"] = q.judge_views(s, judges)
        rows.append(view)
    return rows


@router.get("/batches/{batch_id}", response_class=HTMLResponse)
def batch_page(
    request: Request,
    batch_id: uuid.UUID,
    who: Annotated[Viewer, Depends(viewer)],
    ok_offset: Offset = 0,
    err_offset: Offset = 0,
    by: Annotated[str | None, Query(max_length=120, description="metadata.KEY")] = None,
) -> HTMLResponse:
    by = (by or "").strip() or None
    sliced, by_error = None, None
    with transaction() as session:
        try:
            batch = svc.get_batch(session, batch_id)
        except NotFound:
            return render(request, who, "not_found.html", status_code=404, what=f"batch {batch_id}")
        if by is not None:
            try:
                sliced = sliced_summary(session, batch.id, by)
            except BadRequest as exc:
                by_error = exc.message
        criteria = load_criteria(session, batch.criteria_hash)
        judges = criteria.judge_components
        costs = q.batch_costs(session, [batch.id])
        row = q.batch_row(batch, svc.progress(session, batch), costs.get(batch.id, 0.0))
        summary = batch_summary(session, batch.id)
        hist = q.histogram(session, batch.id)
        ok, ok_total = q.result_section(session, batch.id, "success", limit=PAGE_SIZE, offset=ok_offset)
        bad, bad_total = q.result_section(session, batch.id, "error", limit=PAGE_SIZE, offset=err_offset)
        kind = get_kind(criteria.kind)
        success = _section_rows(ok, criteria.threshold, judges, kind)
        errors = _section_rows(bad, criteria.threshold, judges, kind)
        add_human_verdicts(session, success + errors)
    peak = max(hist) or 1
    bins = len(hist)
    histogram = [
        {
            "label": f"{100 * i // bins}–{100 * (i + 1) // bins}%",
            "count": n,
            "height": round(100 * n / peak, 1),
            "passing": i / bins >= criteria.threshold - 1e-9,
        }
        for i, n in enumerate(hist)
    ]

    def stats(row: str) -> dict[str, Any]:
        return summary.get("components", {}).get(row) or {"ok": 0, "failed": 0, "skipped": 0, "mean": None, "median": None}

    components = [
        {
            "name": name,
            "weight": spec.weight,
            "judge": spec.is_judge,
            "min_score": spec.min_score,
            **stats(name),
            # A jury's members, each with its share of the jury's weight (the total reads the jury alone).
            "members": [{"name": row, "weight": criteria.row_weight(row), **stats(row)} for row in criteria.members_of(name)],
        }
        for name, spec in criteria.components.items()
    ]
    return render(
        request,
        who,
        "batch.html",
        batch=row,
        batch_id=str(batch_id),
        criteria_hash=batch.criteria_hash,
        threshold=criteria.threshold,
        summary=summary,
        histogram=histogram,
        components=components,
        success=success,
        success_total=ok_total,
        ok_offset=ok_offset,
        errors=errors,
        errors_total=bad_total,
        err_offset=err_offset,
        page_size=PAGE_SIZE,
        by=by or "",
        sliced=sliced,
        min_slice_items=slices.MIN_SLICE_ITEMS,
        max_slices=slices.MAX_SLICES,
        by_error=by_error,
        status_code=400 if by_error else 200,
    )


# --- items and sessions ------------------------------------------------------------------------------------------


def _score_cards(session: Any, scores: list[Score], kind: str) -> list[dict[str, Any]]:
    current = q.current_hashes(session)
    cards = []
    for s in scores:
        try:
            criteria = load_criteria(session, s.criteria_hash)
            threshold: float | None = criteria.threshold
            judges: list[str] | None = criteria.judged_rows  # a jury's members each have a panel
        except NotFound:
            threshold, judges = None, None
        view = score_view(s, threshold=threshold, current_hash=current.get(s.suite_name))
        view["judges"] = q.judge_views(s, judges)
        view["breakdown_rows"] = q.breakdown_rows(view["components"], view["judges"])
        view["missing_tools"] = [t for judge in view["judges"] for t in judge.missing_tools]
        view["approaches"] = [a for judge in view["judges"] for a in judge.approaches]
        view["score100"] = q.score100(s.total) if s.status == "completed" else None
        view["lines"] = live_lines(s, get_kind(criteria.kind), threshold) if threshold is not None else [s.status]
        view["session_kind"] = kind == q.SESSION_KIND
        cards.append(view)
    return cards


def _payload_fields(payload: dict[str, Any]) -> list[dict[str, Any]]:
    import json

    fields = []
    for key, value in payload.items():
        if isinstance(value, str):
            fields.append({"key": key, "text": value, "long": len(value) > 400 or "\n" in value})
        else:
            text = json.dumps(value, indent=2, ensure_ascii=False, default=str)
            fields.append({"key": key, "text": text, "long": True, "json": True, "size": len(value) if isinstance(value, (list, dict)) else None})
    return fields


def _item_page(request: Request, who: Viewer, session: Any, item: Any, scores: list[Score]) -> HTMLResponse:
    cards = _score_cards(session, scores, item.kind)
    add_human_verdicts(session, cards)
    latest = cards[0] if cards else None
    return render(
        request,
        who,
        "item.html",
        item=item,
        payload=_payload_fields(item.payload or {}),
        cards=cards,
        latest=latest,
        is_session=item.kind == q.SESSION_KIND,
        session_id=item.external_id,
    )


@router.get("/items/{item_id}", response_class=HTMLResponse)
def item_page(request: Request, item_id: uuid.UUID, who: Annotated[Viewer, Depends(viewer)]) -> HTMLResponse:
    with transaction() as session:
        try:
            item, scores = q.item_with_scores(session, item_id)
        except NotFound:
            return render(request, who, "not_found.html", status_code=404, what=f"item {item_id}")
        return _item_page(request, who, session, item, scores)


@router.get("/sessions", response_class=HTMLResponse)
def sessions_page(
    request: Request,
    who: Annotated[Viewer, Depends(viewer)],
    state: Annotated[str, Query(pattern="^(all|scored|not_scored|scoring_failed|scoring)$")] = "all",
    min_score: Annotated[int | None, Query(ge=0, le=100)] = None,
    sort: Annotated[str, Query(pattern="^(newest|score_desc|score_asc)$")] = "newest",
    offset: Offset = 0,
) -> HTMLResponse:
    with transaction() as session:
        rows, total = q.list_sessions(session, state=state, min_score=min_score, sort=sort, limit=PAGE_SIZE, offset=offset)
        shown = [
            {
                "session_id": r.session_id,
                "item_id": str(r.item.id),
                "status": (r.item.payload or {}).get("status"),
                "alert_type": _alert_type(r.item.payload or {}),
                "created_at": r.item.created_at,
                "state": r.state,
                "value": r.value,
                "is_current": r.is_current,
                "scored_at": r.score.completed_at if r.score is not None else None,
                "error": r.score.error_message if r.score is not None and r.state == "scoring_failed" else None,
            }
            for r in rows
        ]
    return render(
        request,
        who,
        "sessions.html",
        rows=shown,
        total=total,
        state=state,
        min_score=min_score,
        sort=sort,
        offset=offset,
        page_size=PAGE_SIZE,
        legend=q.LEGEND,
    )


def _alert_type(payload: dict[str, Any]) -> str | None:
    for key in ("alert_type", "agent_type"):
        if isinstance(payload.get(key), str):
            return payload[key]
    alert = payload.get("alert_data") or payload.get("alert")
    if isinstance(alert, dict):
        for key in ("alert_type", "type", "alertname", "name"):
            if isinstance(alert.get(key), str):
                return alert[key]
    return None


@router.get("/sessions/{session_id}", response_class=HTMLResponse)
def session_page(request: Request, session_id: str, who: Annotated[Viewer, Depends(viewer)]) -> HTMLResponse:
    with transaction() as session:
        try:
            item = q.session_item(session, session_id)
        except NotFound:
            return render(request, who, "not_found.html", status_code=404, what=f"session {session_id}")
        return _item_page(request, who, session, item, q.session_scores(session, session_id))


# --- analytics and status -----------------------------------------------------------------------------------------


@router.get("/missing-tools", response_class=HTMLResponse)
def missing_tools_page(
    request: Request,
    who: Annotated[Viewer, Depends(viewer)],
    criteria: Annotated[str | None, Query(max_length=64)] = None,
) -> HTMLResponse:
    with transaction() as session:
        tools, looked = q.missing_tools(session, criteria_hash=criteria or None)
        hashes = q.current_hashes(session)
    peak = max((t.count for t in tools), default=1)
    return render(
        request,
        who,
        "missing_tools.html",
        tools=tools,
        looked=looked,
        peak=peak,
        criteria=criteria,
        current_session_hash=hashes.get("alert_session"),
    )


@router.get("/criteria", response_class=HTMLResponse)
def criteria_page(request: Request, who: Annotated[Viewer, Depends(viewer)]) -> HTMLResponse:
    with transaction() as session:
        rows, suites = q.criteria_overview(session)
        components = q.suite_components(session)
    return render(request, who, "criteria.html", rows=rows, suites=suites, components=components)


@router.get("/judge", response_class=HTMLResponse)
def judge_page(request: Request, who: Annotated[Viewer, Depends(viewer)]) -> HTMLResponse:
    from assay import observability
    from assay.scoring.judge.providers.registry import configured_routes
    from assay.scoring.judge.wiring import build_breaker
    from assay.scoring.suites.loader import load_model_catalog

    settings = get_settings()
    error = None
    try:
        rows = {r["model"]: r for r in build_breaker(settings).status()}
    except Exception as exc:  # show what is down rather than fail the page
        rows, error = {}, f"cannot read the breaker state: {type(exc).__name__}: {exc}"
    try:
        models = configured_routes(load_model_catalog(settings.config_dir))
    except Exception:
        models = []
    breakers = [rows.get(m) or {"model": m, "state": "closed", "failures": 0, "opened_at": None, "next_probe_at": None} for m in models]
    breakers += [r for m, r in sorted(rows.items()) if m not in models]
    try:
        depth, unacked = observability.queue_depths(settings)
    except Exception as exc:
        depth, unacked = {}, None
        error = (error + "; " if error else "") + f"cannot read the queues: {type(exc).__name__}"
    return render(
        request,
        who,
        "judge.html",
        breakers=breakers,
        shared=bool(settings.redis_url),
        threshold=settings.breaker_threshold,
        cooldown=settings.breaker_cooldown_seconds,
        depth=depth,
        unacked=unacked,
        error=error,
    )

