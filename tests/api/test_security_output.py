"""What the API sends that a browser or a spreadsheet acts on: every CSV it produces is safe to open
(no cell runs as a formula), and the API docs page loads only this site's assets under a CSP that
forbids inline scripts and other origins."""

from __future__ import annotations

import csv
import hashlib
import io
import json
import re
import uuid
from datetime import timedelta
from html.parser import HTMLParser
from urllib.parse import urlsplit

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select

from assay.scoring.reports.csv_writer import csv_chunks, safe_cell
from assay.scoring.store.db import transaction
from assay.scoring.store.models import Batch, CriteriaDefinition, Score
from tests.conftest import API_KEY, REPO
from tests.dashboard.support import make_app, score_in_process

# Text a spreadsheet runs as a formula (OWASP's list), one of each kind.
HOSTILE_IDS = ['=HYPERLINK("http://127.0.0.1/x","click")', "+1+1", "-2+3", "@SUM(1)", "\tTAB", "\rCR"]
HOSTILE_PROMPT = "=cmd|' /C calc'!A0"
FORMULA_START = ("=", "+", "-", "@", "\t", "\r")
OTHER_HASH = hashlib.sha256(b"other criteria").hexdigest()
OTHER_BATCH = uuid.UUID(int=21)  # carries the scores under OTHER_HASH, so batch compare has pairs to write


def _is_number(cell: str) -> bool:
    try:
        float(cell)
    except ValueError:
        return False
    return True


def _runnable_cells(text: str) -> list[str]:
    """Every cell of a CSV document that a spreadsheet would run as a formula."""
    return [
        cell
        for row in csv.reader(io.StringIO(text, newline=""))
        for cell in row
        if cell.startswith(FORMULA_START) and not _is_number(cell)
    ]


# --- CSV --------------------------------------------------------------------------------------------------------


@pytest.fixture
def client(clean_db, monkeypatch):
    monkeypatch.setattr("assay.api.routes.batches.start_planner", lambda batch_id: None)
    with TestClient(make_app(), headers={"Authorization": f"Bearer {API_KEY}"}) as c:
        yield c


@pytest.fixture
def hostile_batch(client):
    """A KQL batch whose item ids and prompt are formulas, scored (judge skipped), and every one of its
    items scored again under a second criteria hash (in batch OTHER_BATCH), so the criteria diff and
    the batch comparison have rows to write."""
    template = json.loads((REPO / "examples" / "kql_items.jsonl").read_text().splitlines()[0])
    lines = [json.dumps(template | {"id": item_id, "prompt": HOSTILE_PROMPT}) for item_id in HOSTILE_IDS]
    r = client.post("/api/v1/batches?suite=kql", content="\n".join(lines).encode(),
                    headers={"Content-Type": "application/x-ndjson"})
    assert r.status_code == 202, r.text
    batch_id = r.json()["batch_id"]
    score_in_process(batch_id)
    with transaction() as session:
        scores = session.scalars(select(Score).where(Score.batch_id == batch_id)).all()
        assert scores and all(s.status == "completed" for s in scores)
        first_hash = scores[0].criteria_hash
        session.add(CriteriaDefinition(criteria_hash=OTHER_HASH, criteria_content={"kind": "kql", "components": {}}))
        session.flush()
        session.add(Batch(id=OTHER_BATCH, suite_name=scores[0].suite_name, criteria_hash=OTHER_HASH, status="completed",
                          created_by="test", total_items=len(scores)))
        session.flush()
        for s in scores:
            session.add(Score(
                item_id=s.item_id, batch_id=OTHER_BATCH, suite_name=s.suite_name, criteria_hash=OTHER_HASH, status="completed",
                total=(s.total or 0) / 2, passed=False, cost_usd=0.0, components_total=0, components_landed=0,
                triggered_by="test", created_at=s.created_at, completed_at=s.completed_at + timedelta(seconds=1),
            ))
    return batch_id, first_hash


# Each CSV route of the API: how this test asks it for the hostile batch's rows, and the hostile text
# its columns carry (the results export has the kind's report columns, without the ids).
CSV_REQUESTS = {
    "/api/v1/batches/{batch_id}/results": (
        lambda batch, h: (f"/api/v1/batches/{batch}/results", {"format": "csv"}), [HOSTILE_PROMPT]
    ),
    "/api/v1/batches/{batch_id}/report.csv": (
        lambda batch, h: (f"/api/v1/batches/{batch}/report.csv", {}), [HOSTILE_PROMPT, *HOSTILE_IDS]
    ),
    "/api/v1/criteria/diff": (
        lambda batch, h: ("/api/v1/criteria/diff", {"from": h, "to": OTHER_HASH, "format": "csv"}), HOSTILE_IDS
    ),
    "/api/v1/compare": (
        lambda batch, h: ("/api/v1/compare", {"a": batch, "b": str(OTHER_BATCH), "format": "csv"}), HOSTILE_IDS
    ),
}


def _csv_routes(client: TestClient) -> set[str]:
    """Every path of the route table with a GET that may answer text/csv (from the OpenAPI document)."""
    paths = client.get("/openapi.json").json()["paths"]
    return {
        path
        for path, operations in paths.items()
        for response in ((operations.get("get") or {}).get("responses") or {}).values()
        if "text/csv" in (response.get("content") or {})
    }


def test_every_csv_route_neutralises_formula_cells(client, hostile_batch):
    batch_id, first_hash = hostile_batch
    routes = _csv_routes(client)
    assert routes == set(CSV_REQUESTS), "a CSV route without a case here: add it to CSV_REQUESTS"
    for path in sorted(routes):
        request, hostile = CSV_REQUESTS[path]
        url, params = request(batch_id, first_hash)
        r = client.get(url, params=params)
        assert r.status_code == 200, (path, r.text)
        assert r.headers["content-type"].startswith("text/csv"), path
        assert _runnable_cells(r.text) == [], path
        cells = {cell for row in csv.reader(io.StringIO(r.text, newline="")) for cell in row}
        # The text is all there, shown as text: nothing was dropped or mangled.
        assert {"'" + text for text in hostile} <= cells, path


def test_the_cli_results_export_is_the_neutralised_csv(client, hostile_batch, tmp_path, monkeypatch):
    # `assay results --format csv` writes what the API sends, byte for byte (no newline translation).
    import httpx
    from typer.testing import CliRunner

    import assay.cli

    batch_id, _ = hostile_batch
    real_client = httpx.Client

    def through_the_app(*args, **kwargs):
        # The CLI's requests go to the app in this process (the TestClient), answered whole.
        def handle(request: httpx.Request) -> httpx.Response:
            answer = client.request(request.method, str(request.url), headers=request.headers)
            return httpx.Response(answer.status_code, headers=answer.headers, content=answer.content)

        return real_client(*args, transport=httpx.MockTransport(handle), **kwargs)

    monkeypatch.setattr(httpx, "Client", through_the_app)
    out = tmp_path / "results.csv"
    result = CliRunner().invoke(
        assay.cli.cli, ["results", batch_id, "--format", "csv", "-o", str(out), "--api-url", "http://testserver",
                        "--api-key", API_KEY],
    )
    assert result.exit_code == 0, (result.output, result.exception)
    expected = client.get(f"/api/v1/batches/{batch_id}/results", params={"format": "csv"}).content
    assert out.read_bytes() == expected
    assert _runnable_cells(out.read_bytes().decode()) == []


@pytest.mark.parametrize(
    "value,cell",
    [
        ("=1+1", "'=1+1"), ("+1", "'+1"), ("-x", "'-x"), ("@A1", "'@A1"), ("\t=1", "'\t=1"), ("\r=1", "'\r=1"),
        ("plain", "plain"), ("a=b", "a=b"), ("", ""), (-0.5, -0.5), (3, 3), (None, None), (True, True),
        ({"k": "=v"}, '{"k": "=v"}'), (["=x"], '["=x"]'),
    ],
)
def test_safe_cell(value, cell):
    assert safe_cell(value) == cell


def test_csv_chunks_header_missing_and_extra_keys():
    rows = [{"a": "=1", "b": 2}, {"a": "x", "c": "dropped"}]
    text = "".join(csv_chunks(rows, rows_per_chunk=1))
    assert list(csv.reader(io.StringIO(text))) == [["a", "b"], ["'=1", "2"], ["x", ""]]
    assert "".join(csv_chunks([], ["=Total"])) == "'=Total\r\n"
    assert "".join(csv_chunks([])) == ""


# --- the API docs -----------------------------------------------------------------------------------------------


class _PageRefs(HTMLParser):
    """The URLs a page makes the browser load (src, link href), and the text of inline scripts."""

    def __init__(self) -> None:
        super().__init__()
        self.urls: list[tuple[str, str]] = []
        self.inline_scripts: list[str] = []
        self._in_script = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        values = dict(attrs)
        for attr in ("src", "href"):
            if values.get(attr) and (attr == "src" or tag == "link"):
                self.urls.append((tag, values[attr] or ""))
        if any(name.startswith("on") for name in values):
            self.inline_scripts.append(f"<{tag}> event handler attribute")
        self._in_script = tag == "script"

    def handle_endtag(self, tag: str) -> None:
        self._in_script = False

    def handle_data(self, data: str) -> None:
        if self._in_script and data.strip():
            self.inline_scripts.append(data)


def _csp(header: str) -> dict[str, list[str]]:
    return {d.split()[0]: d.split()[1:] for d in (part.strip() for part in header.split(";")) if d}


CONTENT_TYPES = {".js": "javascript", ".css": "text/css", ".png": "image/png"}


def test_the_docs_page_loads_only_its_own_assets_under_a_csp_without_inline_scripts(clean_db):
    with TestClient(make_app()) as anonymous:  # the docs need no key, like the OpenAPI document
        r = anonymous.get("/docs")
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/html")
        csp = _csp(r.headers["content-security-policy"])
        assert csp["default-src"] == ["'self'"] and csp["script-src"] == ["'self'"]
        assert csp["connect-src"] == ["'self'"] and csp["base-uri"] == ["'none'"]
        refs = _PageRefs()
        refs.feed(r.text)
        assert refs.inline_scripts == []
        scripts = [url for tag, url in refs.urls if tag == "script"]
        assert len(scripts) == 2 and refs.urls, refs.urls
        for _, url in refs.urls:
            parts = urlsplit(url)
            assert not parts.scheme and not parts.netloc and url.startswith("/"), f"not this site's: {url}"
            asset = anonymous.get(url)
            assert asset.status_code == 200, url
            kind = CONTENT_TYPES[url[url.rindex("."):]]
            assert kind in asset.headers["content-type"], (url, asset.headers["content-type"])
            assert asset.headers["x-content-type-options"] == "nosniff"
        bundle = anonymous.get(scripts[0]).text
        assert "SwaggerUIBundle" in bundle and len(bundle) > 100_000  # the real Swagger UI, from the package
        openapi_url = re.search(r'data-openapi-url="([^"]+)"', r.text)[1]
        assert openapi_url == "/openapi.json" and anonymous.get(openapi_url).json()["info"]["title"] == "Assay"
        assert "dataset.openapiUrl" in anonymous.get(scripts[1]).text


@pytest.mark.parametrize("path", ["/redoc", "/docs/assets/index.html", "/docs/assets/swagger-initializer.js",
                                  "/docs/assets/..%2F..%2Fsettings.py", "/docs/oauth2-redirect"])
def test_no_other_docs_page_or_package_file_is_served(clean_db, path):
    # /redoc would load its script from a CDN; the package's demo page loads the petstore example.
    with TestClient(make_app()) as anonymous:
        assert anonymous.get(path).status_code == 404
