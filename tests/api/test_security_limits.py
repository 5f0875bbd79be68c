"""Limits every route gets without anyone remembering them: a cap on the request body (413 naming
the limit), bounds on every numeric parameter (a 422, never a 500), error bodies that describe the
input and never the server (paths, SQL), and dataset folders that stay inside the data directory.

The route-table tests walk the app's routes as FastAPI serves them, so a route added later is
covered (or, for a body limit of its own, has to be listed here).
"""

from __future__ import annotations

import asyncio
import json
import shutil
import tempfile
import typing
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import annotated_types
import httpx
import pytest
from fastapi.routing import iter_route_contexts
from sqlalchemy import func, select

from assay.scoring.store.db import transaction
from assay.scoring.store.models import Item
from tests.conftest import API_KEY, REPO
from tests.scoring.sessions.helpers import make_session

PROXY = ("10.255.255.254", 40000)  # the trusted proxy of the test settings: dashboard pages open
HEADERS = {"Authorization": f"Bearer {API_KEY}", "X-Forwarded-User": "alice"}
GOOD = {
    "prompt": "Count traces by level",
    "generated_kql": "Traces | summarize count() by level",
    "expected_kql": "Traces | summarize count() by level",
}


def api_routes(app: Any) -> Iterator[tuple[str, Any]]:
    """(method, route) for every route the app serves with parameters (FastAPI's own /openapi.json
    and /docs, and the static mount, have none)."""
    for route in iter_route_contexts(app.routes):
        if getattr(route, "dependant", None) is None:
            continue
        for method in sorted(route.methods or ()):
            if method != "HEAD":
                yield method, route


def parameters(dependant: Any) -> Iterator[Any]:
    """Every path, query, header and cookie parameter of a route, its dependencies' included."""
    for kind in ("path_params", "query_params", "header_params", "cookie_params"):
        yield from getattr(dependant, kind)
    for sub in dependant.dependencies:
        yield from parameters(sub)


def is_numeric(field: Any) -> bool:
    annotation = field.field_info.annotation
    return any(arg in (int, float) for arg in typing.get_args(annotation) or (annotation,))


@pytest.fixture
def limits(monkeypatch):
    """Small limits, each different, so a 413 shows which one applied."""
    from assay.settings import get_settings

    values = {
        "max_body_bytes": 1000,
        "max_item_bytes": 1500,
        "max_upload_bytes": 2500,
        "max_session_bytes": 6000,
        "max_dataset_bytes": 7000,
        "max_suite_bytes": 800,
        "otlp_max_body_bytes": 3500,
    }
    for name, value in values.items():
        monkeypatch.setattr(get_settings(), name, value)
    return values


@pytest.fixture
def no_workers(monkeypatch):
    """Work created by these requests is recorded, not sent (no worker here)."""
    monkeypatch.setattr("assay.api.routes.batches.start_planner", lambda batch_id: None)
    monkeypatch.setattr("assay.api.routes.score_query.publish_components", lambda refs: None)
    monkeypatch.setattr("assay.api.routes.sessions.publish_components", lambda refs: None)
    monkeypatch.setattr("assay.api.routes.sessions.start_planner", lambda batch_id: None)


@pytest.fixture
def proxy_client(clean_db, no_workers):
    """The API as the trusted proxy's user with an API key (JSON routes and dashboard pages), with a
    500 returned rather than raised."""
    from fastapi.testclient import TestClient

    from assay.api.app import create_app

    with TestClient(create_app(), client=PROXY, headers=HEADERS, raise_server_exceptions=False) as client:
        yield client


def items_stored() -> int:
    with transaction() as session:
        return session.scalar(select(func.count()).select_from(Item))


# --- 5: a body cap on every route -------------------------------------------------------------------------

# The routes with a limit of their own: (setting, multipart framing allowed on top). Every other
# route has ASSAY_MAX_BODY_BYTES.
OWN_LIMITS = {
    ("POST", "/api/v1/batches"): ("max_upload_bytes", 0),
    ("POST", "/api/score-query"): ("max_item_bytes", 0),
    ("POST", "/api/v1/sessions"): ("max_session_bytes", 0),
    ("POST", "/api/v1/datasets/files"): ("max_dataset_bytes", 64 * 1024),
    ("POST", "/api/v1/suites"): ("max_suite_bytes", 0),
    ("POST", "/api/v1/suites/validate"): ("max_suite_bytes", 0),
    ("POST", "/v1/traces"): ("otlp_max_body_bytes", 0),
}
CHUNK = 100
BOUNDARY = "limitsboundary"
# How a body starts in each encoding a route may read: JSON, a form, a multipart file upload.
ENCODINGS = {
    "json": ("application/json", b'{"x": "'),
    "form": ("application/x-www-form-urlencoded", b"x="),
    "multipart": (
        f"multipart/form-data; boundary={BOUNDARY}",
        f'--{BOUNDARY}\r\nContent-Disposition: form-data; name="files"; filename="T.csv"\r\n'
        "Content-Type: text/csv\r\n\r\n".encode(),
    ),
}


def expected_limit(method: str, path: str, limits: dict[str, int]) -> tuple[int, str]:
    setting, framing = OWN_LIMITS.get((method, path), ("max_body_bytes", 0))
    name = f"ASSAY_{setting.upper()}"
    return limits[setting] + framing, f"{name} + {framing} bytes of multipart framing" if framing else name


@dataclass
class Sent:
    status: int
    body: dict[str, Any] | None
    pulled: int  # bytes of the body the app asked for


async def send_streamed(app: Any, method: str, url: str, content_type: str, head: bytes, size: int, declare: bool) -> Sent:
    """A body of ``size`` bytes, handed to the app in CHUNK-byte pieces only as it reads them."""
    pulled = 0

    async def body() -> AsyncIterator[bytes]:
        nonlocal pulled
        sent = 0
        while sent < size:
            piece = (head if sent == 0 else b"")[: size - sent]
            piece += b"a" * min(CHUNK - len(piece), size - sent - len(piece))
            pulled += len(piece)
            sent += len(piece)
            yield piece

    headers = {**HEADERS, "Content-Type": content_type}
    if declare:
        headers["Content-Length"] = str(size)
    transport = httpx.ASGITransport(app=app, client=PROXY, raise_app_exceptions=False)
    async with httpx.AsyncClient(transport=transport, base_url="http://testserver") as client:
        response = await client.request(method, url, content=body(), headers=headers)
    try:
        parsed = response.json()
    except ValueError:
        parsed = None
    return Sent(response.status_code, parsed if isinstance(parsed, dict) else None, pulled)


def some_url(route: Any) -> str:
    """The route's path with placeholder parameters (a body is read before they are looked up) and
    its required query parameters."""
    path = route.path_format
    for field in parameters(route.dependant):
        path = path.replace("{" + field.alias + "}", "00000000-0000-4000-8000-000000000000")
    return path + "?suite=kql"


def test_no_route_reads_a_body_past_its_limit_and_413_names_the_limit(clean_db, no_workers, limits):
    """For every route and method, in every body encoding: a body a few chunks over the route's limit
    is never read past it; a route that reads it gets 413 naming the limit; with a Content-Length
    over the limit not one byte is read."""
    from assay.api.app import create_app

    app = create_app()
    problems = []
    for method, route in api_routes(app):
        if method == "GET":
            continue
        size, setting = expected_limit(method, route.path, limits)
        refusal = {
            "error": "payload_too_large",
            "message": f"the request body is larger than this route's limit of {size} bytes ({setting})",
            "details": {"limit_bytes": size, "setting": setting},
        }
        for encoding, (content_type, head) in ENCODINGS.items():
            for declare in (False, True):
                where = f"{method} {route.path} ({encoding}, {'Content-Length' if declare else 'streamed'})"
                sent = asyncio.run(send_streamed(app, method, some_url(route), content_type, head, size + 5 * CHUNK, declare))
                if declare and sent.pulled:
                    problems.append(f"{where}: read {sent.pulled} bytes of a body declared over its limit")
                if sent.pulled > size + CHUNK:
                    problems.append(f"{where}: read {sent.pulled} bytes past its limit of {size}")
                read_past = sent.pulled > size or (declare and sent.status == 413)
                if read_past and (sent.status, sent.body) != (413, refusal):
                    problems.append(f"{where}: answered {sent.status} {sent.body} to a body over {setting}")
    assert problems == []


def test_a_body_over_the_default_limit_is_refused_where_a_route_has_none(proxy_client, limits):
    rows = [{"State": "TEXAS", "Damage": n} for n in range(60)]
    body = json.dumps({"name": "big", "tables": {"T": rows}}).encode()
    assert limits["max_body_bytes"] < len(body) < limits["max_dataset_bytes"]
    r = proxy_client.post("/api/v1/datasets", content=body, headers={"Content-Type": "application/json"})
    assert r.status_code == 413, r.text
    assert r.json()["details"] == {"limit_bytes": 1000, "setting": "ASSAY_MAX_BODY_BYTES"}
    assert proxy_client.get("/api/v1/datasets").json()["datasets"] == []


def score_query_body(size: int) -> bytes:
    body = json.dumps({**GOOD, "prompt": ""}).encode()
    return json.dumps({**GOOD, "prompt": "p" * (size - len(body))}).encode()


def test_score_query_takes_an_item_no_larger_than_a_batch_line(proxy_client, limits):
    """ASSAY_MAX_ITEM_BYTES holds for /api/score-query as for a line of a batch upload: over it, 413
    and nothing stored; at it, the item is scored."""
    over = score_query_body(limits["max_item_bytes"] + 1)
    r = proxy_client.post("/api/score-query", content=over, headers={"Content-Type": "application/json"})
    assert r.status_code == 413, r.text
    assert r.json()["details"] == {"limit_bytes": 1500, "setting": "ASSAY_MAX_ITEM_BYTES"}
    assert items_stored() == 0

    exact = score_query_body(limits["max_item_bytes"])
    assert len(exact) == limits["max_item_bytes"]
    r = proxy_client.post("/api/score-query", content=exact, headers={"Content-Type": "application/json"})
    assert r.status_code == 202, r.text
    assert items_stored() == 1


@pytest.mark.parametrize(
    "method, path, setting",
    [
        ("POST", "/api/v1/batches?suite=kql", "max_upload_bytes"),
        ("POST", "/api/v1/sessions", "max_session_bytes"),
    ],
)
def test_a_route_with_its_own_limit_takes_bodies_past_the_default(proxy_client, limits, method, path, setting):
    """Above ASSAY_MAX_BODY_BYTES, within the route's own limit: not refused for size."""
    if "sessions" in path:
        body = json.dumps(make_session("sess-limits")).encode()
    else:
        line = json.dumps(GOOD).encode() + b"\n"
        body = line * (limits["max_body_bytes"] // len(line) + 2)
    assert limits["max_body_bytes"] < len(body) <= limits[setting]
    r = proxy_client.request(method, path, content=body, headers={"Content-Type": "application/json"})
    assert r.status_code in (200, 201, 202), r.text


# --- 6: bounded numeric parameters ----------------------------------------------------------------------


def test_every_numeric_parameter_declares_both_bounds():
    from assay.api.app import create_app

    unbounded = []
    for method, route in api_routes(create_app()):
        for field in parameters(route.dependant):
            if not is_numeric(field):
                continue
            kinds = {type(m) for m in field.field_info.metadata}
            if not (kinds & {annotated_types.Ge, annotated_types.Gt} and kinds & {annotated_types.Le, annotated_types.Lt}):
                unbounded.append(f"{method} {route.path}: {field.alias}")
    assert unbounded == []


@pytest.fixture
def world(proxy_client) -> dict[str, str]:
    """One stored thing of each kind a path names, so a request reaches the store."""
    c = proxy_client
    r = c.post("/api/v1/batches?suite=kql", content=json.dumps(GOOD).encode() + b"\n")
    assert r.status_code == 202, r.text
    batch_id = r.json()["batch_id"]
    item_id = c.get(f"/api/v1/batches/{batch_id}/results").json()["results"][0]["item_id"]
    score_id = c.post("/api/score-query", json=GOOD).json()["score_id"]
    assert c.post("/api/v1/sessions", json=make_session("sess-limits")).status_code == 201
    dataset = c.post("/api/v1/datasets", json={"name": "limits", "tables": {"T": [{"a": 1}]}}).json()["content_hash"]
    kql_hash = next(d["criteria_hash"] for d in c.get("/api/v1/criteria").json()["criteria"] if "kql" in d["suites"])
    import yaml

    schema_match = yaml.safe_load((REPO / "config" / "suites" / "kql.yaml").read_text())["components"]["schema_match"]
    suite = {"name": "limits", "kind": "kql", "threshold": 0.5, "components": {"schema_match": {**schema_match, "weight": 1}}}
    assert c.post("/api/v1/suites", json=suite).status_code == 201
    return {
        "batch_id": batch_id,
        "item_id": item_id,
        "score_id": score_id,
        "session_id": "sess-limits",
        "reference": dataset,
        "criteria_hash": kql_hash,
        "name": "limits",  # an API suite, with its first version
        "version": "1",
        # required query parameters
        "suite": "kql",
        "from": kql_hash,
        "to": kql_hash,
        "baseline": batch_id,  # the gate compares a batch with itself
        "candidate": batch_id,
    }


OUT_OF_RANGE = [str(2**63), str(2**64), "-1", "inf", "-inf", "nan", "1e400"]


def test_out_of_range_numbers_are_a_4xx_on_every_route(proxy_client, world):
    """For every route and every numeric parameter: 2**63, -1, inf, nan... give a 4xx, never a
    500 (dashboard pages too)."""
    problems = []
    checked = 0
    for method, route in api_routes(proxy_client.app):
        fields = list(parameters(route.dependant))
        numeric = [f for f in fields if is_numeric(f)]
        if not numeric:
            continue
        for field in fields:
            if "{" + field.alias + "}" in route.path_format:
                assert field.alias in world, f"{route.path}: add a stored {field.alias} to the world fixture"
        required = {f.alias: world[f.alias] for f in route.dependant.query_params if f.field_info.is_required()}
        for field in numeric:
            for value in OUT_OF_RANGE:
                # The value goes where the parameter is: in the path, or in the query.
                path, params = route.path_format, {**required, field.alias: value}
                for placed in fields:
                    if "{" + placed.alias + "}" in path:
                        path = path.replace("{" + placed.alias + "}", params.pop(placed.alias, world[placed.alias]))
                r = proxy_client.request(method, path, params=params)
                checked += 1
                if not 400 <= r.status_code < 500:
                    problems.append(f"{method} {route.path} {field.alias}={value}: {r.status_code}")
    assert checked > 0 and problems == []


def test_an_offset_past_bigint_is_a_422_that_names_the_parameter(proxy_client):
    r = proxy_client.get("/api/v1/batches", params={"offset": 2**63})
    assert r.status_code == 422, r.text
    assert [e["location"] for e in r.json()["details"]["errors"]] == ["query.offset"]
    assert proxy_client.get("/api/v1/batches", params={"offset": 2**63 - 1}).json() == {"batches": []}


# --- 14: error bodies describe the input, never the server ------------------------------------------------


def server_details(text: str, *places: Path) -> list[str]:
    """What of the server an error body shows: its directories, temporary files, SQL."""
    markers = [tempfile.gettempdir() + "/", str(REPO), "site-packages", "Traceback", "[SQL", "SELECT ", "LINE 1"]
    markers += [str(p) for p in places] + [str(p.resolve()) for p in places]
    return [m for m in markers if m in text]


@pytest.fixture
def data_dir(tmp_path, monkeypatch) -> Path:
    from assay.settings import get_settings

    directory = tmp_path / "data"
    directory.mkdir()
    monkeypatch.setattr(get_settings(), "data_dir", directory)
    return directory


@pytest.fixture
def broken_suite(tmp_path, monkeypatch) -> str:
    """A suite file that does not parse, registered (and refused) from a config directory of its own."""
    from assay.scoring.suites.criteria import register_all_suites
    from assay.settings import get_settings

    config = tmp_path / "config"
    shutil.copytree(REPO / "config", config)
    (config / "suites" / "broken.yaml").write_text("name: broken\nkind: [kql\n")
    monkeypatch.setattr(get_settings(), "config_dir", config)
    monkeypatch.setattr("assay.scoring.suites.criteria.invalid_suites", {})
    with transaction() as session:
        register_all_suites(session, config)
    return "broken"


def bad_file(name: str, data: bytes) -> dict[str, Any]:
    return {"files": [("files", (name, data, "application/octet-stream"))]}


def test_error_bodies_show_no_server_path_or_sql(proxy_client, data_dir, broken_suite, tmp_path):
    """Error paths that used to echo a temporary file, the data directory, a config file or SQL."""
    (tmp_path / "secret.csv").write_text("a\n1\n")
    (data_dir / "storm").mkdir()
    (data_dir / "storm" / "Events.csv").write_text("a\n1\n")
    (data_dir / "storm" / "Secret.csv").symlink_to(tmp_path / "secret.csv")
    c = proxy_client
    cases = [
        (c.post("/api/v1/datasets/files", **bad_file("T.parquet", b"not parquet")), 422, "not readable as parquet"),
        (c.post("/api/v1/datasets/files", **bad_file("T.json", b"{not json")), 422, "not readable as json"),
        (c.post("/api/v1/datasets/files", **bad_file("T.csv", b"\xff\xfe\x00garbage")), 422, "This file is not utf-8 encoded"),
        (c.post("/api/v1/datasets", json={"path": "../secret.csv"}), 422, "outside the data directory"),
        (c.post("/api/v1/datasets", json={"path": str(tmp_path / "secret.csv")}), 422, "outside the data directory"),
        (c.post("/api/v1/datasets", json={"path": "storm"}), 422, "'storm/Secret.csv' links outside the data directory"),
        (c.post("/api/v1/datasets", json={"path": "storm\u0000"}), 422, "cannot be read"),
        (c.post("/api/v1/datasets", json={"path": "x" * 5000}), 422, "cannot be read"),
        (c.post(f"/api/v1/batches?suite={broken_suite}", content=json.dumps(GOOD)), 422, "broken.yaml: not valid YAML"),
        (c.post(f"/api/score-query?suite={broken_suite}", json=GOOD), 422, "broken.yaml: not valid YAML"),
        (c.post("/api/v1/rescore", json={"suite": broken_suite, "dry_run": True}), 422, "broken.yaml: not valid YAML"),
    ]
    for r, status, says in cases:
        where = f"{r.request.method} {r.request.url.path}"
        assert r.status_code == status, f"{where}: {r.status_code} {r.text}"
        assert says in r.json()["message"], f"{where}: {r.text}"
        assert server_details(r.text, data_dir, tmp_path) == [], f"{where}: {r.text}"


@pytest.fixture
def broken_models(tmp_path, monkeypatch) -> Path:
    """A config directory of its own whose models.yaml does not parse: every suite file in it is
    invalid, and every suite body needs the catalog."""
    from assay.scoring.suites.criteria import register_all_suites
    from assay.settings import get_settings

    config = tmp_path / "config"
    shutil.copytree(REPO / "config", config)
    (config / "models.yaml").write_text("models: [not closed\n")
    monkeypatch.setattr(get_settings(), "config_dir", config)
    invalid: dict[str, str] = {}  # this test's own record of invalid files, read by the suites listing too
    monkeypatch.setattr("assay.scoring.suites.criteria.invalid_suites", invalid)
    monkeypatch.setattr("assay.scoring.suites.api_suites.invalid_suites", invalid)
    with transaction() as session:
        register_all_suites(session, config)
    return config


def test_problem_texts_in_200_bodies_show_no_server_path(proxy_client, broken_models, tmp_path):
    """Problems answered with a 200 — a suite body's validation, a file suite's reason for being
    invalid — go through the error mapping: the broken models.yaml is named, its directory is not."""
    c = proxy_client
    suite = (REPO / "examples" / "generic" / "correctness.yaml").read_text()  # a judge: it needs models.yaml
    validated = c.post("/api/v1/suites/validate", content=suite.encode(), headers={"Content-Type": "application/yaml"})
    listed = c.get("/api/v1/suites")
    shown = c.get("/api/v1/suites/kql")
    for r in (validated, listed, shown):
        assert r.status_code == 200, r.text
        assert server_details(r.text, broken_models, tmp_path) == [], f"{r.request.url.path}: {r.text}"
    assert validated.json()["valid"] is False
    assert "<config dir>/models.yaml" in validated.json()["problems"][0]
    invalid = {s["name"]: s["problem"] for s in listed.json()["suites"] if s["state"] == "invalid"}
    assert "kql" in invalid and all("<config dir>/models.yaml" in problem for problem in invalid.values())
    assert shown.json()["state"] == "invalid" and "<config dir>/models.yaml" in shown.json()["problem"]


def test_every_response_field_that_carries_a_problem_goes_through_the_mapping():
    """A response model's problem, reason or error text is declared ``ProblemText`` (assay/api/errors.py),
    so a new field of that kind cannot skip the mapping unnoticed."""
    from pydantic import BaseModel

    from assay.api.app import create_app
    from assay.api.errors import public_text

    problem_names = {"problem", "problems", "reason", "error", "error_message", "message", "failure"}

    def models_of(annotation: Any) -> Iterator[type[BaseModel]]:
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            yield annotation
        for arg in typing.get_args(annotation):
            yield from models_of(arg)

    def mapped(field: Any) -> bool:
        annotated = [field.annotation, *typing.get_args(field.annotation)]
        metadata = list(field.metadata)
        for annotation in annotated:
            for arg in typing.get_args(annotation):
                metadata += getattr(arg, "__metadata__", [])
            metadata += getattr(annotation, "__metadata__", [])
        return any(getattr(m, "func", None) is public_text for m in metadata)

    seen: set[type[BaseModel]] = set()
    answers = [
        answer
        for _, route in api_routes(create_app())
        for answer in (route.response_model, *(r.get("model") for r in route.responses.values()))
    ]
    pending = [model for answer in answers for model in models_of(answer)]
    unmapped, checked = [], 0
    while pending:
        model = pending.pop()
        if model in seen:
            continue
        seen.add(model)
        for name, field in model.model_fields.items():
            pending.extend(models_of(field.annotation))
            if name in problem_names:
                checked += 1
                if not mapped(field):
                    unmapped.append(f"{model.__name__}.{name}")
    assert checked >= 8 and unmapped == []


def test_the_error_mapping_keeps_server_details_out_of_every_kind_of_error(clean_db):
    """Whatever a handler puts in an error — a database error's text, a temporary path, the data
    directory — the client sees what was wrong, not where; a failure nobody mapped is a bare 500."""
    from fastapi import HTTPException
    from fastapi.testclient import TestClient
    from sqlalchemy import text
    from sqlalchemy.exc import DBAPIError

    from assay.api.app import create_app
    from assay.scoring.errors import InvalidInput
    from assay.settings import get_settings

    app = create_app()
    data = get_settings().data_dir.resolve()

    def database_error() -> DBAPIError:
        try:
            with transaction() as session:
                session.execute(text("SELECT 1 OFFSET 9223372036854775808"))
        except DBAPIError as exc:
            return exc
        raise AssertionError("the statement did not fail")

    @app.get("/test/domain")
    def domain() -> None:
        raise InvalidInput(f"cannot page: {database_error()}", file=f"{data}/storm/x.csv")

    @app.get("/test/http")
    def http() -> None:
        raise HTTPException(404, detail=f"no file {tempfile.gettempdir()}/tmpab12cd.parquet")

    @app.get("/test/unmapped")
    def unmapped() -> None:
        raise database_error()

    @app.get("/test/oserror")
    def oserror() -> None:
        open(data / "missing" / "x.csv")  # noqa: SIM115

    with TestClient(app, headers=HEADERS, raise_server_exceptions=False) as client:
        r = client.get("/test/domain")
        assert r.status_code == 422 and r.json()["message"].startswith("cannot page: (psycopg.errors.")
        assert r.json()["details"] == {"file": "<data dir>/storm/x.csv"}
        r2 = client.get("/test/http")
        assert r2.status_code == 404 and r2.json()["message"] == "no file <temp dir>/tmpab12cd.parquet"
        for response in (r, r2):
            assert server_details(response.text, data) == [], response.text
        for path in ("/test/unmapped", "/test/oserror"):
            r = client.get(path)
            assert r.status_code == 500
            assert r.json() == {"error": "internal_error", "message": "an internal error occurred; it has been logged"}


# --- 11: dataset folders stay inside the data directory -------------------------------------------------


def test_a_folder_holding_a_link_out_of_the_data_directory_is_refused(proxy_client, data_dir, tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "Secret.csv").write_text("password\nhunter2\n")
    (data_dir / "storm").mkdir()
    (data_dir / "storm" / "Events.csv").write_text("State,Damage\nTEXAS,10\n")
    (data_dir / "storm" / "Secret.csv").symlink_to(outside / "Secret.csv")
    (data_dir / "linked").symlink_to(outside, target_is_directory=True)

    r = proxy_client.post("/api/v1/datasets", json={"path": "storm"})
    assert r.status_code == 422, r.text
    assert r.json()["message"] == "'storm/Secret.csv' links outside the data directory; only files inside it are read"
    for path in ("storm/Secret.csv", "linked", "linked/Secret.csv"):
        r = proxy_client.post("/api/v1/datasets", json={"path": path})
        assert r.status_code == 422 and "outside the data directory" in r.json()["message"], (path, r.text)
    assert proxy_client.get("/api/v1/datasets").json()["datasets"] == []


def test_a_link_to_a_file_inside_the_data_directory_is_read(proxy_client, data_dir):
    (data_dir / "shared").mkdir()
    (data_dir / "shared" / "Population.csv").write_text("State,People\nTEXAS,30\n")
    (data_dir / "storm").mkdir()
    (data_dir / "storm" / "Events.csv").write_text("State,Damage\nTEXAS,10\n")
    (data_dir / "storm" / "Population.csv").symlink_to(Path("..") / "shared" / "Population.csv")
    (data_dir / "storm" / ".hidden.csv").symlink_to("/etc/hostname")  # hidden files are never read
    r = proxy_client.post("/api/v1/datasets", json={"path": "storm"})
    assert r.status_code == 201, r.text
    assert set(r.json()["tables"]) == {"Events", "Population"}


def test_data_directory_files_over_the_dataset_limit_are_refused_before_reading(proxy_client, data_dir, monkeypatch):
    from assay.scoring.intake import datasets
    from assay.settings import get_settings

    monkeypatch.setattr(get_settings(), "max_dataset_bytes", 100)
    (data_dir / "big").mkdir()
    (data_dir / "big" / "T.csv").write_text("a\n" + "1\n" * 200)
    reads = []
    monkeypatch.setattr(datasets, "_read_inside", lambda shown, path: reads.append(shown) or b"")
    r = proxy_client.post("/api/v1/datasets", json={"path": "big"})
    assert r.status_code == 413, r.text
    assert r.json() == {
        "error": "payload_too_large",
        "message": "the files under 'big' hold 402 bytes; the limit is 100 (ASSAY_MAX_DATASET_BYTES)",
        "details": {"limit_bytes": 100},
    }
    assert reads == []

