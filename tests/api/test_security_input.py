"""Issue 18's input defences, as a client meets them: one JSON reader for every body (NaN and Infinity
refused everywhere), JSON-array uploads streamed like JSONL, Idempotency-Keys scoped per principal
with a fingerprint, duplicate ids within an upload refused."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import tracemalloc
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
from fastapi.routing import APIRoute, iter_route_contexts
from sqlalchemy import func, select

from assay.scoring.intake.strict_json import NON_FINITE_REASON
from assay.scoring.store.db import transaction
from assay.scoring.store.models import Batch, Dataset, Item, Score
from tests.conftest import API_KEY, REPO

GOOD = {
    "prompt": "Count traces by level",
    "generated_kql": "Traces | summarize count() by level",
    "expected_kql": "Traces | summarize count() by level",
}
G = json.dumps(GOOD).encode()
PROXY = ("10.255.255.254", 40000)  # the trusted proxy of tests/conftest.py
NON_FINITE = ["NaN", "Infinity", "-Infinity", "1e999"]


def item(**fields: Any) -> bytes:
    return json.dumps({**GOOD, **fields}).encode()


def jsonl(*lines: bytes) -> bytes:
    return b"".join(line + b"\n" for line in lines)


def array(*items: bytes) -> bytes:
    return b"[" + b",\n".join(items) + b"]"


def counts() -> tuple[int, int, int]:
    with transaction() as s:
        return tuple(s.scalar(select(func.count()).select_from(m)) for m in (Batch, Item, Score))  # type: ignore[return-value]


@pytest.fixture
def upload(api_client, monkeypatch):
    monkeypatch.setattr("assay.api.routes.batches.start_planner", lambda batch_id: None)

    def post(body: bytes, headers: dict[str, str] | None = None, client: Any = None, **params: Any):
        return (client or api_client).post(
            "/api/v1/batches", params={"suite": "kql", **params}, content=body, headers=headers or {}
        )

    return post


@pytest.fixture
def proxy_client(api_client):
    """The same app reached through the trusted proxy as the user ``alice`` (same-origin, as a page)."""
    from fastapi.testclient import TestClient

    headers = {"X-Forwarded-User": "alice", "Origin": "http://testserver"}
    with TestClient(api_client.app, client=PROXY, headers=headers) as client:
        yield client


# --- one JSON reader: NaN, Infinity and numbers past the float range are refused on every route -------


def json_body_routes(app) -> list[Any]:
    """Every route of the app that FastAPI reads a JSON body for, with the path it is served at."""
    from fastapi import params

    found = []
    for context in iter_route_contexts(app.routes):
        route = context.original_route
        has_body = isinstance(route, APIRoute) and route.body_field is not None
        if has_body and not isinstance(route.body_field.field_info, params.Form):
            found.append(context)
    return found


def test_every_route_with_a_json_body_reads_it_with_the_strict_reader(api_client):
    from assay.api.json_body import StrictJsonRoute

    routes = json_body_routes(api_client.app)
    # The walk finds the JSON routes there are today (a route added later is walked too).
    assert {"/api/score-query", "/api/v1/sessions", "/api/v1/datasets", "/api/v1/scoring/sessions/rescore",
            "/api/v1/rescore", "/api/v1/batches/{batch_id}/resume"} <= {c.path for c in routes}
    lenient = [c.path for c in routes if not isinstance(c.original_route, StrictJsonRoute)]
    assert lenient == [], "create these routes' APIRouter with route_class=StrictJsonRoute (assay.api.json_body)"


@pytest.mark.parametrize("token", NON_FINITE)
def test_every_json_route_refuses_non_finite_numbers(api_client, token):
    body = '{"value": [1, {"nested": ' + token + "}]}"
    for context in json_body_routes(api_client.app):
        path = context.path.replace("{", "").replace("}", "")  # any path parameter: the body is read first
        for method in context.methods:
            r = api_client.request(method, path, content=body, headers={"Content-Type": "application/json"})
            assert r.status_code == 422, (method, path, r.text)
            assert r.json()["error"] == "invalid_input" and r.json()["message"] == NON_FINITE_REASON, (path, r.text)
    assert counts() == (0, 0, 0)


def test_nan_in_score_query_rows_is_refused_and_nothing_stored(api_client):
    request = {**GOOD, "generated_results": [{"level": "Error", "count_": 12.5}]}
    body = json.dumps(request).replace("12.5", "NaN")
    r = api_client.post("/api/score-query", content=body, headers={"Content-Type": "application/json"})
    assert r.status_code == 422 and r.json()["message"] == NON_FINITE_REASON
    assert counts() == (0, 0, 0)


def test_infinity_in_a_session_is_refused_and_nothing_stored(api_client):
    from tests.scoring.sessions.helpers import make_session

    session = make_session("sess-inf", alert_data={"rule": "r", "cpu": 0.5})
    body = json.dumps(session).replace('"cpu": 0.5', '"cpu": Infinity')  # alert_data is free-form
    assert "Infinity" in body
    r = api_client.post("/api/v1/sessions", content=body, headers={"Content-Type": "application/json"})
    assert r.status_code == 422 and r.json()["message"] == NON_FINITE_REASON
    assert counts() == (0, 0, 0)


def test_nan_in_inline_dataset_rows_is_refused_but_missing_values_in_files_stay_data(api_client):
    body = '{"name": "t", "tables": {"t": [{"a": 1.5}, {"a": NaN}]}}'
    r = api_client.post("/api/v1/datasets", content=body, headers={"Content-Type": "application/json"})
    assert r.status_code == 422 and r.json()["message"] == NON_FINITE_REASON
    with transaction() as s:
        assert s.scalar(select(func.count()).select_from(Dataset)) == 0
    # A missing value in a CSV file (an empty cell, or the text NaN) is data, not a JSON token.
    csv = b"a,b\n1.5,x\n,y\nNaN,z\n"
    r = api_client.post("/api/v1/datasets/files", files={"files": ("t.csv", csv, "text/csv")})
    assert r.status_code == 201, r.text
    assert r.json()["tables"]["t"]["rows"] == 3


def test_a_json_body_the_reader_refuses_is_a_422_naming_the_reason(api_client):
    def post(body: bytes):
        return api_client.post("/api/v1/rescore", content=body, headers={"Content-Type": "application/json"})

    for body, reason in [
        (b'{"suite": "kql",', "invalid JSON: EOF while parsing a value at line 1 column 16"),
        (b'{"suite": "k\\ud800"}', "invalid JSON: unexpected end of hex escape"),  # a lone surrogate
        (b'{"suite": "\xff"}', "invalid JSON: invalid unicode code point"),
        (b'{"n": 1' + b"0" * 5000 + b"}", "invalid JSON: number out of range"),
        (b"[" * 1000 + b"]" * 1000, "invalid JSON: recursion limit exceeded"),
    ]:
        r = post(body)
        assert r.status_code == 422, r.text
        assert r.json()["error"] == "invalid_input" and r.json()["message"].startswith(reason), r.text
        assert r.json()["details"] == {"location": "body"}
    # Standard JSON still reads, with a byte order mark too (as Windows tools write it).
    r = post(b'\xef\xbb\xbf{"suite": "kql", "dry_run": true}')
    assert r.status_code == 200, r.text


# --- JSON-array uploads are streamed: items are read (and refused) as they arrive ---------------------


def writer_for(session, *, max_item_bytes: int = 1 << 20, partial: bool = False):
    from assay.scoring.intake.ingest import BatchWriter, IngestLimits
    from assay.scoring.kinds import get_kind
    from assay.scoring.suites.criteria import current_suite

    record = current_suite(session, "kql")
    limits = IngestLimits(max_items=10**7, max_item_bytes=max_item_bytes, max_body_bytes=1 << 40, max_reported_bad_lines=100)
    writer = BatchWriter(session, suite=record, kind=get_kind(record.kind), created_by="t", limits=limits, partial=partial)
    writer.begin()
    return writer


def test_a_bad_item_in_a_json_array_is_named_before_the_body_has_been_read_whole(clean_db):
    from assay.scoring.intake.ingest import BadLine

    with transaction() as session:
        writer = writer_for(session)
        try:
            writer.feed(b"[" + G + b"," + G + b"," + item(generated_results=[{"a": 1}]).replace(b"1}", b"NaN}") + b"," + G[:40])
            # Items 1-3 have been read: the third is named while the rest of the body is still to come.
            assert writer.result.bad_lines == [BadLine(3, NON_FINITE_REASON)]
            assert writer.result.accepted == 2
            for _ in range(200):
                writer.feed(G[40:] + b"," + G[:40])
            writer.feed(G[40:] + b"]")
            assert writer.result.accepted == 203 and writer.result.bad_line_count == 1
        finally:
            writer.abort()
            session.rollback()


def array_chunks(items: int, chunk_bytes: int = 1 << 20) -> Iterator[bytes]:
    """A JSON array of ``items`` small items, made as it is sent, in chunks of about ``chunk_bytes``."""
    pending: list[bytes] = [b"["]
    size = 1
    for index in range(items):
        piece = (b"," if index else b"") + item(id=f"i-{index}")
        pending.append(piece)
        size += len(piece)
        if size >= chunk_bytes:
            yield b"".join(pending)
            pending, size = [], 0
    yield b"".join(pending) + b"]"


def test_a_json_array_is_split_in_bounded_memory():
    from assay.scoring.intake.ingest import LineSplitter

    splitter = LineSplitter(max_line_bytes=1 << 20, max_body_bytes=1 << 40)
    tracemalloc.start()
    try:
        seen = 0
        body_bytes = 0
        for chunk in array_chunks(150_000):  # about 24 MiB
            body_bytes += len(chunk)
            seen += sum(1 for _ in splitter.feed(chunk))
        seen += sum(1 for _ in splitter.close())
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert seen == 150_000 and body_bytes > 20 * 2**20
    assert peak < 8 * 2**20, f"peak {peak / 2**20:.1f} MiB while splitting {body_bytes / 2**20:.0f} MiB"


def test_an_oversize_item_in_a_json_array_streams_past_in_bounded_memory():
    from assay.scoring.intake.ingest import BadLine, LineSplitter

    splitter = LineSplitter(max_line_bytes=2000, max_body_bytes=1 << 40)
    tracemalloc.start()
    try:
        out = list(splitter.feed(b"[" + G + b', {"prompt": "'))
        for _ in range(32):  # a 32 MiB string in one item
            out += splitter.feed(b"x\\\"" * (1 << 18) + b"y" * (1 << 18))
        out += splitter.feed(b'"}, ' + G + b"]")
        out += splitter.close()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert out == [(1, G), (2, BadLine(2, "item longer than 2000 bytes")), (3, G)]
    assert peak < 6 * 2**20, f"peak {peak / 2**20:.1f} MiB"


@pytest.mark.parametrize("chunk", [1, 2, 3, 7, 64])
def test_a_json_array_split_at_any_chunk_boundary_gives_the_items_json_gives(chunk):
    import random

    from assay.scoring.intake.ingest import LineSplitter

    rnd = random.Random(chunk)
    texts = ['a"b', "c\\", '\\"', "]}[{,", "", "\u00e9\u2028", "\\u0041"]

    def value(depth: int = 0) -> Any:
        roll = rnd.random()
        if depth > 3 or roll < 0.35:
            return rnd.choice([0, -1.5e300, True, None, *texts])
        if roll < 0.7:
            return {rnd.choice(texts): value(depth + 1) for _ in range(rnd.randint(0, 3))}
        return [value(depth + 1) for _ in range(rnd.randint(0, 3))]

    for _ in range(60):
        values = [value() for _ in range(rnd.randint(0, 5))]
        body = json.dumps(values, indent=rnd.choice([None, 2]), ensure_ascii=rnd.random() < 0.5).encode()
        splitter = LineSplitter(max_line_bytes=1 << 20, max_body_bytes=1 << 30)
        out = []
        for start in range(0, len(body), chunk):
            out += splitter.feed(body[start : start + chunk])
        out += splitter.close()
        assert [index for index, _ in out] == list(range(1, len(values) + 1))
        assert [json.loads(raw) for _, raw in out] == values


def asgi_post(app, path: str, body: AsyncIterator[bytes], headers: dict[str, str], query: str = ""):
    """POST straight to the ASGI app, the body sent as ``body`` yields it (TestClient would read it
    whole first); returns (status, JSON body)."""
    scope = {
        "type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST", "scheme": "http",
        "path": path, "raw_path": path.encode(), "root_path": "", "query_string": query.encode(),
        "headers": [(k.lower().encode(), v.encode()) for k, v in {"host": "testserver", **headers}.items()],
        "client": ("127.0.0.1", 50000), "server": ("testserver", 80),
    }
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        try:
            return {"type": "http.request", "body": await anext(body), "more_body": True}
        except StopAsyncIteration:
            return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    async def call() -> tuple[int, Any]:
        await app(scope, receive, send)
        status = next(m["status"] for m in sent if m["type"] == "http.response.start")
        return status, json.loads(b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body"))

    return call()


UPLOAD_HEADERS = {"authorization": f"Bearer {API_KEY}", "content-type": "application/json"}


def test_a_broken_json_array_is_refused_before_the_rest_of_the_body_is_read(api_client, monkeypatch):
    monkeypatch.setattr("assay.api.routes.batches.start_planner", lambda batch_id: None)
    chunks = [b"[" + b",".join([G] * 3) + b" " + G]  # no comma after item 3
    chunks += [b"," + b",".join([G] * 2000)] * 50  # about 15 MiB more
    read = 0

    async def body() -> AsyncIterator[bytes]:
        nonlocal read
        for chunk in chunks:
            read += 1
            yield chunk + b"]" * (read == len(chunks))

    status, out = asyncio.run(asgi_post(api_client.app, "/api/v1/batches", body(), UPLOAD_HEADERS, "suite=kql"))
    assert status == 422 and out["message"].startswith("the body is not a valid JSON array: expected ',' or ']' after item 3")
    assert read < 10, f"{read} of {len(chunks)} chunks read"
    assert counts() == (0, 0, 0)


# --- Idempotency-Key: per principal, with a fingerprint of what was asked --------------------------


def test_the_same_key_with_another_body_suite_or_parameters_is_a_422_that_says_so(upload):
    key = {"Idempotency-Key": "nightly-1"}
    first = upload(jsonl(G, item(id="b")), key)
    assert first.status_code == 202, first.text
    batch_id = first.json()["batch_id"]
    retry = upload(jsonl(G, item(id="b")), key)
    assert retry.status_code == 202 and retry.json()["batch_id"] == batch_id and retry.json()["replayed"] is True
    assert retry.headers["idempotent-replay"] == "true"
    for body, params in [
        (jsonl(G, item(id="c")), {}),  # another body
        (jsonl(G, item(id="b")), {"suite": "kql_strict"}),  # another suite
        (jsonl(G, item(id="b")), {"partial": "true"}),  # another parameter
        (array(G, item(id="b")), {}),  # the same items in another shape
    ]:
        r = upload(body, key, **params)
        assert r.status_code == 422, (params, r.text)
        assert r.json()["message"].startswith("Idempotency-Key 'nightly-1' was already used for a different request")
        assert r.json()["details"]["batch_id"] == batch_id
    assert counts() == (1, 2, 2)


def test_keys_are_scoped_per_principal(upload, proxy_client):
    key = {"Idempotency-Key": "shared-name"}
    mine = upload(jsonl(G), key)
    theirs = upload(jsonl(G, G), key, client=proxy_client)
    assert mine.status_code == theirs.status_code == 202, theirs.text
    assert theirs.json()["batch_id"] != mine.json()["batch_id"] and theirs.json()["replayed"] is False
    assert upload(jsonl(G, G), key, client=proxy_client).json()["batch_id"] == theirs.json()["batch_id"]
    with transaction() as s:
        assert sorted(s.scalars(select(Batch.idempotency_scope))) == ["key:ci-tester", "proxy:alice"]


def test_a_retry_while_the_first_upload_still_streams_gets_409(api_client, monkeypatch):
    monkeypatch.setattr("assay.api.routes.batches.start_planner", lambda batch_id: None)
    headers = {**UPLOAD_HEADERS, "content-type": "application/x-ndjson", "idempotency-key": "slow-1"}
    body = jsonl(*[item(id=f"i-{n}") for n in range(50)])

    async def scenario() -> None:
        first_is_streaming, finish_first = asyncio.Event(), asyncio.Event()

        async def slow() -> AsyncIterator[bytes]:
            yield body[:100]
            first_is_streaming.set()
            await finish_first.wait()
            yield body[100:]

        async def whole() -> AsyncIterator[bytes]:
            yield body

        first = asyncio.create_task(asgi_post(api_client.app, "/api/v1/batches", slow(), headers, "suite=kql"))
        await first_is_streaming.wait()
        status, out = await asgi_post(api_client.app, "/api/v1/batches", whole(), headers, "suite=kql")
        assert status == 409, out
        assert out["message"].startswith("a request with Idempotency-Key 'slow-1' is still in progress")
        finish_first.set()
        status, created = await first
        assert status == 202 and created["accepted"] == 50, created
        status, replayed = await asgi_post(api_client.app, "/api/v1/batches", whole(), headers, "suite=kql")
        assert status == 202 and replayed["batch_id"] == created["batch_id"] and replayed["replayed"] is True

    asyncio.run(scenario())
    assert counts() == (1, 50, 50)


def test_a_failed_upload_leaves_its_key_free(upload):
    key = {"Idempotency-Key": "fix-and-retry"}
    assert upload(jsonl(G, b"{oops"), key).status_code == 422
    r = upload(jsonl(G, G), key)
    assert r.status_code == 202 and r.json()["replayed"] is False and r.json()["accepted"] == 2


def test_the_sessions_rescore_key_is_scoped_and_fingerprinted(api_client, proxy_client, monkeypatch):
    from tests.scoring.sessions.helpers import make_session, skip_unless_core_ready

    skip_unless_core_ready()
    monkeypatch.setattr("assay.api.routes.sessions.start_planner", lambda batch_id: None)
    monkeypatch.setattr("assay.api.routes.sessions.publish_components", lambda refs: None)
    for session_id in ("s1", "s2", "s3"):
        assert api_client.post("/api/v1/sessions", json=make_session(session_id)).status_code == 201

    def rescore(body: dict[str, Any], client: Any = api_client):
        return client.post("/api/v1/scoring/sessions/rescore", json=body, headers={"Idempotency-Key": "re-1"})

    first = rescore({"select": "unscored", "limit": 1})
    assert first.status_code == 202 and first.json()["selected"] == 1
    replay = rescore({"select": "unscored", "limit": 1})
    assert replay.status_code == 200 and replay.json()["replayed"] and replay.json()["batch_id"] == first.json()["batch_id"]
    other = rescore({"select": "unscored", "limit": 2})
    assert other.status_code == 422 and "already used for a different request" in other.json()["message"]
    # The same key from another principal is theirs: a batch of its own.
    theirs = rescore({"select": "unscored", "limit": 2}, client=proxy_client)
    assert theirs.status_code == 202 and theirs.json()["batch_id"] != first.json()["batch_id"]


# --- duplicate ids within one upload -----------------------------------------------------------------


def stored_positions(batch_id: str) -> dict[int, str | None]:
    with transaction() as s:
        rows = s.execute(
            select(Score.position, Item.external_id).join(Item, Item.id == Score.item_id).where(Score.batch_id == batch_id)
        ).all()
    return dict(rows)


@pytest.mark.parametrize("shape", ["jsonl", "array"])
def test_duplicate_ids_are_refused_listing_the_later_lines(upload, shape):
    items = [item(id="a"), item(id="b"), G, item(id="a"), G, item(id="b"), item(id="a")]
    r = upload(jsonl(*items) if shape == "jsonl" else array(*items))
    assert r.status_code == 422, r.text
    unit = "line" if shape == "jsonl" else "item"
    assert r.json()["details"]["bad_lines"] == [
        {"line": 4, "reason": f"duplicate id 'a': {unit} 1 has the same id"},
        {"line": 6, "reason": f"duplicate id 'b': {unit} 2 has the same id"},
        {"line": 7, "reason": f"duplicate id 'a': {unit} 1 has the same id"},
    ]
    assert r.json()["message"].startswith("3 bad line(s); nothing was written")
    assert counts() == (0, 0, 0)


def test_with_partial_the_later_duplicates_are_the_rejected_lines(upload, api_client):
    r = upload(jsonl(item(id="a"), b"{bad", G, item(id="a"), item(id="b"), G, item(id="b")), partial="true")
    assert r.status_code == 202, r.text
    out = r.json()
    assert out["accepted"] == 4 and out["rejected"] == 3
    assert [b["line"] for b in out["bad_lines"]] == [2, 4, 7]
    assert out["bad_lines"][1]["reason"] == "duplicate id 'a': line 1 has the same id"
    assert stored_positions(out["batch_id"]) == {1: "a", 3: None, 5: "b", 6: None}
    batch = api_client.get(f"/api/v1/batches/{out['batch_id']}").json()
    assert batch["total_items"] == 4 and batch["summary"]["rejected_lines"] == 3
    assert counts() == (1, 4, 4)  # the duplicates' rows are gone, not only unlisted


def test_lines_without_an_id_are_never_duplicates(upload):
    r = upload(jsonl(G, G, G))
    assert r.status_code == 202 and r.json()["accepted"] == 3


def test_duplicate_ids_are_refused_on_the_embedded_store_too(tmp_path):
    # `assay run` reads its file through the same ingest, into SQLite.
    items = tmp_path / "items.jsonl"
    items.write_bytes(jsonl(item(id="x"), item(id="y"), item(id="x")))
    env = {"PYTHONPATH": str(REPO), "COLUMNS": "200", "PATH": "/usr/bin:/bin"}
    result = subprocess.run(
        [sys.executable, "-m", "assay.cli", "run", str(items), "--suite", "kql", "--db", str(tmp_path / "e.db"), "--no-live"],
        env=env, cwd=tmp_path, capture_output=True, text=True, timeout=120, check=False,
    )
    output = result.stdout + result.stderr
    assert result.returncode == 2, output
    assert "1 bad line(s); nothing was written" in output
    assert "line 3: duplicate id 'x': line 1 has the same id" in output


def test_partial_duplicates_on_sqlite_keep_the_first_of_each_id(tmp_path):
    from sqlalchemy.orm import Session

    from assay.scoring.store.db import make_engine, migrate
    from assay.scoring.suites.criteria import register_all_suites
    from assay.settings import get_settings

    url = f"sqlite:///{tmp_path / 'e.db'}"
    migrate(url)
    engine = make_engine(url)
    with Session(engine, expire_on_commit=False) as session, session.begin():
        register_all_suites(session, get_settings().config_dir)
    with Session(engine, expire_on_commit=False) as session, session.begin():
        writer = writer_for(session, partial=True)
        writer.feed(jsonl(item(id="x"), item(id="y"), item(id="x"), G))
        result = writer.finish()
        assert result.accepted == 3 and [b.line for b in result.bad_lines] == [3]
        batch_id = result.batch.id
    with Session(engine) as session:
        rows = session.execute(
            select(Score.position, Item.external_id).join(Item, Item.id == Score.item_id).where(Score.batch_id == batch_id)
        ).all()
        assert dict(rows) == {1: "x", 2: "y", 4: None}
        assert session.scalar(select(func.count()).select_from(Item)) == 3
