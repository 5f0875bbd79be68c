"""Dashboard pages of online scoring: each suite's pass rate over time as a chart drawn on the server
(inline SVG: no script, no CDN, nothing the CSP has to allow), whose points link to the online scores
they hold, and the windows' numbers beside it."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, Literal
from urllib.parse import quote, urlencode

from fastapi import APIRouter, Depends, Path, Query, Request
from fastapi.responses import HTMLResponse
from markupsafe import Markup, escape
from pydantic import AwareDatetime

from assay.api.dashboard.routes import Viewer, render, viewer
from assay.api.json_body import StrictJsonRoute
from assay.api.routes.online import scores_between
from assay.scoring.online import windows
from assay.scoring.online.sampler import online_suites
from assay.scoring.store.db import transaction
from assay.scoring.store.models import utcnow

router = APIRouter(prefix="/dashboard", include_in_schema=False, route_class=StrictJsonRoute)

SuiteName = Annotated[str, Path(min_length=1, max_length=100, pattern=r"^[A-Za-z0-9_-]+$")]
WIDTH, HEIGHT, PAD = 640, 160, 28


def pass_rate_chart(suite: str, buckets: Sequence[windows.Bucket]) -> Markup:
    """An SVG line of the buckets' pass rates (empty buckets leave gaps); each point a link to its scores."""
    step = (WIDTH - 2 * PAD) / max(len(buckets) - 1, 1)

    def y(rate: float) -> float:
        return round(PAD + (1 - rate) * (HEIGHT - 2 * PAD), 1)

    parts = [
        f'<svg class="online-chart" viewBox="0 0 {WIDTH} {HEIGHT}" width="{WIDTH}" height="{HEIGHT}" role="img" '
        f'aria-label="pass rate of {escape(suite)} over time">',
        *(
            f'<line x1="{PAD}" x2="{WIDTH - PAD}" y1="{y(level)}" y2="{y(level)}" stroke="#ddd"/>'
            f'<text x="2" y="{y(level) + 4}" font-size="10" fill="#666">{int(level * 100)}%</text>'
            for level in (0.0, 0.5, 1.0)
        ),
    ]
    run: list[str] = []
    for i, bucket in enumerate(buckets):
        if bucket.pass_rate is None:
            if len(run) > 1:
                parts.append(f'<polyline fill="none" stroke="#2a6fdb" stroke-width="2" points="{" ".join(run)}"/>')
            run = []
            continue
        x, py = round(PAD + i * step, 1), y(bucket.pass_rate)
        run.append(f"{x},{py}")
        link = f"/dashboard/online/{quote(suite)}/scores?" + urlencode(
            {"since": bucket.start.isoformat(), "until": bucket.end.isoformat()}
        )
        parts.append(
            f'<a href="{escape(link)}" class="online-point"><circle cx="{x}" cy="{py}" r="4" fill="#2a6fdb">'
            f"<title>{bucket.start:%H:%M}–{bucket.end:%H:%M} UTC: {bucket.passed}/{bucket.count} passed</title></circle></a>"
        )
    if len(run) > 1:
        parts.append(f'<polyline fill="none" stroke="#2a6fdb" stroke-width="2" points="{" ".join(run)}"/>')
    parts.append("</svg>")
    return Markup("".join(parts))


@router.get("/online", response_class=HTMLResponse)
def online_page(
    request: Request,
    who: Annotated[Viewer, Depends(viewer)],
    window: Annotated[Literal["5m", "1h", "1d"], Query()] = "1h",
) -> HTMLResponse:
    now = utcnow()
    with transaction() as session:
        suites = [suite.record.name for suite in online_suites(session)]
        by_suite = {s.suite: s for s in windows.summaries(session, now, window) if s.slice is None}
        slices = [s for s in windows.summaries(session, now, window) if s.slice is not None]
        charts = {name: pass_rate_chart(name, windows.series(session, now, window, name)) for name in suites}
    return render(
        request, who, "online.html", nav="online", window=window, suites=suites, summaries=by_suite, slices=slices,
        charts=charts, now=now,
    )


@router.get("/online/{suite}/scores", response_class=HTMLResponse)
def online_scores_page(
    request: Request,
    suite: SuiteName,
    who: Annotated[Viewer, Depends(viewer)],
    since: Annotated[AwareDatetime, Query()],
    until: Annotated[AwareDatetime, Query()],
) -> HTMLResponse:
    found = scores_between(suite, since, until)
    return render(request, who, "online_scores.html", nav="online", suite=suite, since=since, until=until, found=found)
