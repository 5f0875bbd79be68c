"""The batch API as a user meets it: uploads, bad input, idempotency, auth. No worker needed here."""

import json
import uuid

import pytest
from sqlalchemy import func, select

from assay.scoring.store.db import transaction
from assay.scoring.store.models import Batch, Item, Score
from tests.conftest import API_KEY

GOOD = {
    "prompt": "Count traces by level",
    "generated_kql": "Traces | summarize count() by level",
    "expected_kql": "Traces | summarize count() by level",
    "generated_columns": ["level", "count_"],
    "expected_columns": ["level", "count_"],
}


def jsonl(*items) -> bytes:
    return b"".join(json.dumps(i).encode() + b"\n" for i in items)


def counts() -> tuple[int, int, int]:
    with transaction() as s:
        return (
            s.scalar(select(func.count()).select_from(Batch)),
            s.scalar(select(func.count()).select_from(Item)),
            s.scalar(select(func.count()).select_from(Score)),
        )


@pytest.fixture(autouse=True)
def no_planner(monkeypatch):
    """These tests look at what the API writes; the planner hand-off is recorded instead of sent."""
    started = []
    monkeypatch.setattr("assay.api.routes.batches.start_planner", started.append)
    return started


def test_upload_jsonl_returns_202_with_batch_and_writes_items(api_client, no_planner):
    r = api_client.post("/api/v1/batches?suite=kql", content=jsonl(GOOD, {**GOOD, "id": "q2"}))
    assert r.status_code == 202, r.text
    body = r.json()
    assert body["accepted"] == 2 and body["rejected"] == 0 and body["replayed"] is False
    assert r.headers["location"] == f"/api/v1/batches/{body['batch_id']}"
    assert counts() == (1, 2, 2)
    assert no_planner == [uuid.UUID(body["batch_id"])]
    batch = api_client.get(f"/api/v1/batches/{body['batch_id']}").json()
    assert batch["status"] == "planning" and batch["total_items"] == 2
    assert batch["progress"]["pending"] == 2 and batch["progress"]["done"] == 0


def test_upload_json_array(api_client):
    r = api_client.post("/api/v1/batches?suite=kql", json=[GOOD, GOOD, GOOD])
    assert r.status_code == 202, r.text
    assert r.json()["accepted"] == 3


def test_bad_lines_reject_the_whole_upload_with_line_numbers(api_client):
    body = jsonl(GOOD) + b"{not json\n" + jsonl({"prompt": "p"}) + jsonl({**GOOD, "generated_kql": 5}) + jsonl(GOOD)
    r = api_client.post("/api/v1/batches?suite=kql", content=body)
    assert r.status_code == 422
    err = r.json()
    assert err["error"] == "invalid_input"
    lines = {b["line"]: b["reason"] for b in err["details"]["bad_lines"]}
    assert set(lines) == {2, 3, 4}
    assert "invalid JSON" in lines[2]
    assert "generated_kql" in lines[3] and "required" in lines[3].lower()
    assert "generated_kql" in lines[4]
    assert counts() == (0, 0, 0)


def test_partial_accepts_good_lines_and_reports_bad(api_client):
    body = jsonl(GOOD) + b"[1,2]\n" + jsonl(GOOD)
    r = api_client.post("/api/v1/batches?suite=kql&partial=true", content=body)
    assert r.status_code == 202
    assert r.json()["accepted"] == 2 and r.json()["rejected"] == 1
    assert r.json()["bad_lines"][0]["line"] == 2
    assert counts()[1] == 2


def test_blank_lines_are_skipped_and_line_numbers_stay_true(api_client):
    body = b"\n" + jsonl(GOOD) + b"   \n" + b"oops\n"
    r = api_client.post("/api/v1/batches?suite=kql", content=body)
    assert r.status_code == 422
    assert r.json()["details"]["bad_lines"] == [{"line": 4, "reason": r.json()["details"]["bad_lines"][0]["reason"]}]


def test_empty_upload_is_rejected(api_client):
    r = api_client.post("/api/v1/batches?suite=kql", content=b"")
    assert r.status_code == 422
    assert "no valid item" in r.json()["message"]
    assert counts() == (0, 0, 0)


def test_oversize_line_is_a_bad_line(api_client, monkeypatch):
    from assay.settings import get_settings

    monkeypatch.setattr(get_settings(), "max_item_bytes", 2000)
    big = {**GOOD, "prompt": "x" * 5000}
    r = api_client.post("/api/v1/batches?suite=kql", content=jsonl(GOOD, big, GOOD))
    assert r.status_code == 422
    assert r.json()["details"]["bad_lines"][0]["line"] == 2
    assert "longer than 2000 bytes" in r.json()["details"]["bad_lines"][0]["reason"]


def test_oversize_body_gets_413_and_writes_nothing(api_client, monkeypatch):
    from assay.settings import get_settings

    monkeypatch.setattr(get_settings(), "max_upload_bytes", 10_000)
    body = jsonl(*[GOOD] * 100)
    assert len(body) > 10_000
    r = api_client.post("/api/v1/batches?suite=kql", content=body)
    assert r.status_code == 413
    # Streamed without a length header: caught while reading, still nothing written.
    r = api_client.post("/api/v1/batches?suite=kql", content=iter([body[:6000], body[6000:]]))
    assert r.status_code == 413
    assert counts() == (0, 0, 0)


def test_too_many_items_gets_413(api_client, monkeypatch):
    from assay.settings import get_settings

    monkeypatch.setattr(get_settings(), "max_items_per_batch", 3)
    r = api_client.post("/api/v1/batches?suite=kql", content=jsonl(*[GOOD] * 4))
    assert r.status_code == 413
    assert counts() == (0, 0, 0)


def test_idempotency_key_returns_the_first_batch(api_client, no_planner):
    headers = {"Idempotency-Key": "upload-123"}
    first = api_client.post("/api/v1/batches?suite=kql", content=jsonl(GOOD, GOOD), headers=headers)
    again = api_client.post("/api/v1/batches?suite=kql", content=jsonl(GOOD, GOOD), headers=headers)
    assert first.status_code == again.status_code == 202
    assert again.json()["batch_id"] == first.json()["batch_id"]
    assert again.json()["replayed"] is True and again.headers["idempotent-replay"] == "true"
    assert counts() == (1, 2, 2)
    assert len(no_planner) == 1  # the replay starts no second planner


def test_unknown_suite_is_404_listing_suites(api_client):
    r = api_client.post("/api/v1/batches?suite=nope", content=jsonl(GOOD))
    assert r.status_code == 404
    assert "kql" in r.json()["message"]


def test_missing_suite_parameter_is_422(api_client):
    r = api_client.post("/api/v1/batches", content=jsonl(GOOD))
    assert r.status_code == 422
    assert any("suite" in e["location"] for e in r.json()["details"]["errors"])


def test_unknown_batch_is_404_and_bad_id_is_422(api_client):
    assert api_client.get(f"/api/v1/batches/{uuid.uuid4()}").status_code == 404
    assert api_client.get("/api/v1/batches/not-a-uuid").status_code == 422


def test_auth_required(api_client):
    r = api_client.get("/api/v1/batches", headers={"Authorization": ""})
    assert r.status_code == 401 and r.headers["www-authenticate"] == "Bearer"
    r = api_client.get("/api/v1/batches", headers={"Authorization": "Bearer wrong"})
    assert r.status_code == 401
    assert api_client.get("/api/v1/batches", headers={"Authorization": f"Bearer {API_KEY}"}).status_code == 200


def test_forwarded_user_is_ignored_from_untrusted_clients(api_client):
    # The test client is not a trusted proxy: the header alone authenticates nobody ...
    r = api_client.get("/api/v1/batches", headers={"Authorization": "", "X-Forwarded-User": "mallory"})
    assert r.status_code == 401
    # ... and with a key, the batch is attributed to the key, not to the claimed user.
    r = api_client.post("/api/v1/batches?suite=kql", content=jsonl(GOOD), headers={"X-Forwarded-User": "mallory"})
    batch = api_client.get(f"/api/v1/batches/{r.json()['batch_id']}").json()
    assert batch["created_by"] == "key:ci-tester"


def test_forwarded_user_from_trusted_proxy_authenticates(clean_db, monkeypatch):
    from fastapi.testclient import TestClient

    from assay.api.app import create_app
    from assay.settings import get_settings

    monkeypatch.setattr(get_settings(), "trusted_proxies", ["127.0.0.1/32"])
    with TestClient(create_app(), client=("127.0.0.1", 50000)) as client:
        # A browser's same-origin request (the proxy's user needs the CSRF token or this Origin).
        proxied = {"X-Forwarded-User": "alice@example.com", "Origin": "http://testserver"}
        r = client.post("/api/v1/batches?suite=kql", content=jsonl(GOOD), headers=proxied)
        assert r.status_code == 202, r.text
        batch = client.get(f"/api/v1/batches/{r.json()['batch_id']}", headers={"X-Forwarded-User": "alice@example.com"})
        assert batch.json()["created_by"] == "proxy:alice@example.com"
        assert client.get("/api/v1/batches").status_code == 401  # no header, no key


def test_health_endpoints(api_client):
    assert api_client.get("/healthz").json()["status"] == "ok"
    ready = api_client.get("/readyz")
    assert ready.status_code == 200 and ready.json()["checks"] == {"database": "ok", "broker": "ok"}


def test_readyz_reports_an_unreachable_broker(api_client, monkeypatch):
    from assay.settings import get_settings

    monkeypatch.setattr(get_settings(), "broker_url", "redis://127.0.0.1:1/0")
    r = api_client.get("/readyz")
    assert r.status_code == 503
    assert r.json()["checks"]["broker"].startswith("unreachable")


def test_criteria_endpoints(api_client):
    listed = api_client.get("/api/v1/criteria").json()["criteria"]
    current = [c for c in listed if "kql" in c["suites"]]
    assert len(current) == 1
    one = api_client.get(f"/api/v1/criteria/{current[0]['criteria_hash']}").json()
    assert one["criteria_content"]["kind"] == "kql"
    assert api_client.get("/api/v1/criteria/" + "0" * 64).status_code == 404


def test_openapi_documents_every_endpoint(api_client):
    paths = api_client.get("/openapi.json").json()["paths"]
    for path in [
        "/api/v1/batches",
        "/api/v1/batches/{batch_id}",
        "/api/v1/batches/{batch_id}/cancel",
        "/api/v1/batches/{batch_id}/retry-failed",
        "/api/v1/batches/{batch_id}/results",
        "/api/v1/items/{item_id}",
        "/api/v1/criteria",
        "/api/v1/criteria/{criteria_hash}",
        "/healthz",
        "/readyz",
    ]:
        assert path in paths, path


def test_nul_characters_and_unicode_edges(api_client):
    nul = b'{"prompt": "a\\u0000b", "generated_kql": "T", "expected_kql": "T"}\n'
    escaped_backslash = b'{"prompt": "a\\\\u0000b", "generated_kql": "T", "expected_kql": "T"}\n'
    r = api_client.post("/api/v1/batches?suite=kql", content=nul + escaped_backslash)
    assert r.status_code == 422
    assert [b["line"] for b in r.json()["details"]["bad_lines"]] == [1]
    assert "NUL" in r.json()["details"]["bad_lines"][0]["reason"]
    edgy = {**GOOD, "prompt": "émoji 🧪, RTL \u202e, surrogate-free \U0001f600, tab\t, newline\n, backslash \\"}
    r = api_client.post("/api/v1/batches?suite=kql", content=jsonl(edgy, GOOD))
    assert r.status_code == 202, r.text
    batch = r.json()["batch_id"]
    from assay.scoring.store.db import transaction
    from assay.scoring.store.models import Item

    with transaction() as s:
        prompts = {i.payload["prompt"] for i in s.query(Item).all()}
    assert edgy["prompt"] in prompts  # stored byte-for-byte through COPY's escaping
    assert batch


def test_a_disabled_suite_takes_no_new_work(api_client):
    from sqlalchemy import update

    from assay.scoring.store.models import SuiteRecord

    with transaction() as s:
        record = s.get(SuiteRecord, "kql")
        s.execute(update(SuiteRecord).where(SuiteRecord.name == "kql").values(options={**record.options, "enabled": False}))
    r = api_client.post("/api/v1/batches?suite=kql", content=jsonl(GOOD))
    assert r.status_code == 409 and "disabled" in r.json()["message"]
    assert counts() == (0, 0, 0)


def test_an_invalid_suite_file_disables_that_suite_only(clean_db, tmp_path, monkeypatch):
    import shutil

    from fastapi.testclient import TestClient

    from assay.api.app import create_app
    from assay.settings import get_settings

    config = tmp_path / "config"
    shutil.copytree(get_settings().config_dir, config)
    (config / "suites" / "broken.yaml").write_text("name: broken\nkind: sql\nthreshold: 0.9\ncomponents: {}\n")
    monkeypatch.setattr(get_settings(), "config_dir", config)
    with TestClient(create_app(), headers={"Authorization": f"Bearer {API_KEY}"}) as client:  # starts anyway
        assert client.post("/api/v1/batches?suite=kql", content=jsonl(GOOD)).status_code == 202
        r = client.post("/api/v1/batches?suite=broken", content=jsonl(GOOD))
        assert r.status_code == 422 and "unknown suite kind 'sql'" in r.json()["message"]
