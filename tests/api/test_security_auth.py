"""Issue 18: who the client is, CSRF for every browser identity, sign-out that ends the session, the
failure throttle and the key length.

The route-table walks cover every route the app has, so routes added later are covered too. Each test
client here speaks from its own address, so the throttle's counts of one test never reach another.
"""

from __future__ import annotations

import hashlib
import json
import random
import re
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest
from fastapi.routing import APIRoute, iter_route_contexts
from fastapi.testclient import TestClient

from tests.conftest import API_KEY, REPO, worker_env
from tests.dashboard.support import api_process, free_port, post_sign_in

GOOD = {"id": "q1", "prompt": "Count storms", "generated_kql": "StormEvents | count", "expected_kql": "StormEvents | count"}
BODY = (json.dumps(GOOD) + "\n").encode()
ORIGIN = "https://testserver"
FOREIGN = "https://evil.example"
PROXY = "10.255.255.254"  # ASSAY_TRUSTED_PROXIES in tests/conftest.py
UNSAFE = {"POST", "PUT", "PATCH", "DELETE"}


def a_client_address() -> str:
    """A fresh address (from the benchmarking range), so no other test's failures count against this one."""
    return f"198.18.{random.randint(0, 255)}.{random.randint(1, 254)}"


@pytest.fixture
def app(clean_db, monkeypatch):
    monkeypatch.setattr("assay.api.routes.batches.start_planner", lambda batch_id: None)
    from assay.api.app import create_app

    return create_app()


@contextmanager
def client_from(app, address: str | None = None, **options) -> Iterator[TestClient]:
    options.setdefault("base_url", ORIGIN)
    options.setdefault("follow_redirects", False)
    with TestClient(app, client=(address or a_client_address(), 40000), **options) as client:
        yield client


def sign_in(client: TestClient) -> str:
    r = post_sign_in(client)
    assert r.status_code == 303, r.text
    return client.cookies["assay_session"]


def page_token(client: TestClient, headers: dict[str, str] | None = None) -> str:
    page = client.get("/dashboard/", headers=headers or {})
    assert page.status_code == 200, page.text
    return re.search(r'name="csrf-token" content="([^"]*)"', page.text).group(1)


def unsafe_routes(app) -> list[tuple[str, str]]:
    """(method, concrete path) for every route of the app that changes something."""
    found = []
    for route in iter_route_contexts(app.routes):
        for method in sorted(route.methods or ()):
            if method in UNSAFE:
                found.append((method, re.sub(r"\{[^}]+\}", str(uuid.uuid4()), route.path)))
    return found


# --- 1. the trusted proxy: judged by the real socket peer ---------------------------------------------------


def assay_api(trusted_proxies: list[str], tmp_path: Path):  # type: ignore[no-untyped-def]
    """A real ``assay api`` process on a free loopback port, on this run's database."""
    return api_process(worker_env({"ASSAY_TRUSTED_PROXIES": json.dumps(trusted_proxies)}), log=tmp_path / "api.log")


def test_assay_api_takes_no_proxy_identity_from_a_forged_forwarded_for(clean_db, tmp_path):
    from assay.scoring.store.db import transaction
    from assay.scoring.store.models import Batch

    forged = {"X-Forwarded-For": "10.9.9.9", "X-Forwarded-User": "attacker"}
    with assay_api(["10.9.9.9"], tmp_path) as url:
        page = httpx.get(f"{url}/dashboard/", headers=forged)
        assert page.status_code == 303 and page.headers["location"].startswith("/dashboard/sign-in")
        upload = httpx.post(
            f"{url}/api/v1/batches?suite=kql", content=BODY,
            headers={**forged, "Content-Type": "application/x-ndjson", "Origin": url},
        )
        assert upload.status_code == 401, upload.text
    with transaction() as session:
        assert session.query(Batch).filter(Batch.created_by == "attacker").count() == 0


def test_assay_api_sees_the_real_peer_of_a_trusted_proxy(clean_db, tmp_path):
    # The peer (loopback) is the trusted proxy; what it forwards for is not the peer. A server that
    # rewrote the client from X-Forwarded-For would see 203.0.113.9 and trust nobody.
    with assay_api(["127.0.0.1/32"], tmp_path) as url:
        r = httpx.get(
            f"{url}/dashboard/", headers={"X-Forwarded-For": "203.0.113.9", "X-Forwarded-User": "alice@example.com"}
        )
        assert r.status_code == 200 and "alice@example.com" in r.text


def test_a_proxy_named_in_its_own_forwarded_for_is_not_trusted(app):
    # What a server that rewrites the client address from X-Forwarded-For hands the app.
    with client_from(app, PROXY) as rewritten:
        r = rewritten.get("/dashboard/", headers={"X-Forwarded-For": f"198.51.100.7, {PROXY}", "X-Forwarded-User": "mallory"})
        assert r.status_code == 303
        assert rewritten.get("/api/v1/batches", headers={"X-Forwarded-For": PROXY, "X-Forwarded-User": "mallory"}).status_code == 401
    with client_from(app, PROXY) as proxy:
        r = proxy.get("/dashboard/", headers={"X-Forwarded-For": "198.51.100.7", "X-Forwarded-User": "alice"})
        assert r.status_code == 200 and "alice" in r.text


def test_the_client_is_the_peer_or_what_the_trusted_proxy_forwarded(app):
    from starlette.requests import Request

    from assay.api.auth import client_address
    from assay.settings import get_settings

    def address(peer: str, forwarded: str | None) -> str:
        headers = [(b"x-forwarded-for", forwarded.encode())] if forwarded else []
        return client_address(Request({"type": "http", "headers": headers, "client": (peer, 1)}), get_settings())

    assert address("198.51.100.7", "203.0.113.1") == "198.51.100.7"  # not a proxy: its header means nothing
    assert address(PROXY, "203.0.113.1, 198.51.100.7") == "198.51.100.7"  # the hop the proxy added
    assert address(PROXY, None) == PROXY


# --- 2. CSRF for every browser identity, on every route -----------------------------------------------------


def test_every_unsafe_route_refuses_a_cookie_request_without_token_or_same_origin(app):
    routes = unsafe_routes(app)
    assert len(routes) >= 12 and ("POST", "/dashboard/sign-out") in routes
    with client_from(app) as browser:
        sign_in(browser)
        for method, path in routes:
            for headers in ({}, {"Origin": FOREIGN}, {"Origin": "null"}, {"X-CSRF-Token": "forged", "Origin": FOREIGN}):
                r = browser.request(method, path, headers=headers, content=b"{}")
                assert r.status_code == 403, (method, path, headers, r.status_code)
                assert r.json()["error"] == "csrf_check_failed"
        assert browser.get("/dashboard/").status_code == 200  # signed in all along: sign-out was refused too


def test_every_unsafe_route_refuses_a_proxy_request_without_token_or_same_origin(app):
    with client_from(app, PROXY) as proxy:
        for method, path in unsafe_routes(app):
            r = proxy.request(method, path, headers={"X-Forwarded-User": "alice", "Origin": FOREIGN}, content=b"x")
            assert r.status_code == 403, (method, path, r.status_code)


def test_the_issue_s_text_plain_upload_from_another_site_is_refused(app):
    from assay.scoring.store.db import transaction
    from assay.scoring.store.models import Batch

    with client_from(app, PROXY) as proxy:
        r = proxy.post(
            "/api/v1/batches?suite=kql", content=BODY,
            headers={"X-Forwarded-User": "alice", "Origin": FOREIGN, "Content-Type": "text/plain"},
        )
        assert r.status_code == 403
        files = {"files": ("t.csv", b"a,b\n1,2\n", "text/csv")}
        r = proxy.post("/api/v1/datasets/files", data={"name": "t"}, files=files, headers={"X-Forwarded-User": "alice", "Origin": FOREIGN})
        assert r.status_code == 403
    with transaction() as session:
        assert session.query(Batch).count() == 0


def test_a_browser_identity_goes_on_with_the_page_token_or_a_same_origin_origin(app):
    upload = {"Content-Type": "application/x-ndjson"}
    with client_from(app, PROXY) as proxy:
        alice = {"X-Forwarded-User": "alice"}
        token = page_token(proxy, alice)
        assert token
        r = proxy.post("/api/v1/batches?suite=kql", content=BODY, headers={**alice, **upload, "X-CSRF-Token": token})
        assert r.status_code == 202, r.text
        assert proxy.get(f"/api/v1/batches/{r.json()['batch_id']}", headers=alice).json()["created_by"] == "proxy:alice"
        # A token is the user's own: bob cannot use alice's.
        r = proxy.post("/api/v1/batches?suite=kql", content=BODY, headers={"X-Forwarded-User": "bob", **upload, "X-CSRF-Token": token})
        assert r.status_code == 403
        r = proxy.post("/api/v1/batches?suite=kql", content=BODY, headers={**alice, **upload, "Origin": ORIGIN})
        assert r.status_code == 202, r.text
        # Behind a proxy that rewrites Host, the origin is what it forwarded.
        forwarded_site = {"X-Forwarded-Host": "assay.example.com", "X-Forwarded-Proto": "https", "Origin": "https://assay.example.com"}
        r = proxy.post("/api/v1/batches?suite=kql", content=BODY, headers={**alice, **upload, **forwarded_site})
        assert r.status_code == 202, r.text
    with client_from(app) as browser:
        sign_in(browser)
        token = page_token(browser)
        assert browser.post("/api/v1/batches?suite=kql", content=BODY, headers={**upload, "X-CSRF-Token": token}).status_code == 202
        # X-Forwarded-Host from anyone but the trusted proxy names no site.
        r = browser.post("/api/v1/batches?suite=kql", content=BODY, headers={**upload, "X-Forwarded-Host": "evil.example", "Origin": FOREIGN})
        assert r.status_code == 403


def test_an_expired_proxy_token_is_refused():
    from assay.api.csrf import proxy_token, proxy_token_valid
    from assay.settings import get_settings

    settings = get_settings()
    token = proxy_token(settings, "alice", now=1000)
    assert proxy_token_valid(settings, "alice", token, now=1001)
    assert not proxy_token_valid(settings, "alice", token, now=1000 + settings.session_max_age_seconds + 1)
    assert not proxy_token_valid(settings, "bob", token, now=1001)
    assert not proxy_token_valid(settings, "alice", "garbage", now=1001)


def test_a_bearer_key_needs_no_csrf_token(app):
    with client_from(app) as script:
        r = script.post(
            "/api/v1/batches?suite=kql", content=BODY,
            headers={"Authorization": f"Bearer {API_KEY}", "Content-Type": "application/x-ndjson", "Origin": FOREIGN},
        )
        assert r.status_code == 202, r.text


@pytest.mark.parametrize("content_type", ["text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x", ""])
def test_batch_uploads_refuse_other_content_types(app, content_type):
    with client_from(app) as script:
        r = script.post(
            "/api/v1/batches?suite=kql", content=BODY,
            headers={"Authorization": f"Bearer {API_KEY}", "Content-Type": content_type},
        )
        assert r.status_code == 415, r.text
        assert r.json()["error"] == "unsupported_media_type" and "application/x-ndjson" in r.json()["message"]


@pytest.mark.parametrize("content_type", ["application/x-ndjson", "application/json; charset=utf-8", None])
def test_batch_uploads_take_json_and_ndjson(app, content_type):
    headers = {"Authorization": f"Bearer {API_KEY}"} | ({"Content-Type": content_type} if content_type else {})
    body = json.dumps([GOOD]).encode() if content_type and "json;" in content_type else BODY
    with client_from(app) as script:
        r = script.post("/api/v1/batches?suite=kql", content=body, headers=headers)
        assert r.status_code == 202, r.text


# --- 9. sign-out ends the session ---------------------------------------------------------------------------


def test_sign_out_ends_the_session_for_every_process(app):
    from assay.api.app import create_app

    with client_from(app) as browser:
        old_cookie = sign_in(browser)
        token = page_token(browser)
        out = browser.post("/dashboard/sign-out", headers={"X-CSRF-Token": token})
        assert out.status_code == 303 and out.headers["location"] == "/dashboard/sign-in"
    # The old cookie, replayed here and in another API process, opens nothing.
    for other in (app, create_app()):
        with client_from(other, cookies={"assay_session": old_cookie}) as replay:
            assert replay.get("/dashboard/").status_code == 303
            assert replay.get("/api/v1/batches").status_code == 401
            r = replay.post("/api/v1/batches?suite=kql", content=BODY, headers={"X-CSRF-Token": token, "Content-Type": "application/x-ndjson"})
            assert r.status_code == 401


def test_sign_out_without_the_token_is_refused_and_the_session_lives_on(app):
    with client_from(app) as browser:
        sign_in(browser)
        r = browser.post("/dashboard/sign-out", headers={"Origin": FOREIGN})
        assert r.status_code == 403
        assert browser.get("/dashboard/").status_code == 200


def test_sessions_are_rows_an_operator_can_revoke(app):
    from sqlalchemy import update

    from assay.api import signin_sessions as cookie
    from assay.scoring.store.db import transaction
    from assay.scoring.store.models import SignedInSession
    from assay.settings import get_settings

    with client_from(app) as browser:
        value = sign_in(browser)
        data = cookie.verify(get_settings(), value)
        with transaction() as session:
            row = session.get(SignedInSession, cookie.row_id(data.session_id))
            assert row is not None and row.revoked_at is None and row.user_name == "ci-tester"
            assert row.id == hashlib.sha256(data.session_id.encode()).hexdigest() != data.session_id
            session.execute(update(SignedInSession).where(SignedInSession.id == row.id).values(revoked_at=row.created_at))
        assert browser.get("/dashboard/").status_code == 303
        assert browser.get("/api/v1/batches").status_code == 401


# --- 10. wrong keys are throttled; short keys are refused ---------------------------------------------------


def test_wrong_keys_are_throttled_then_even_the_right_key_waits(app):
    from assay.settings import get_settings

    limit = get_settings().auth_failures_per_minute
    with client_from(app) as guesser, client_from(app) as bystander:
        started = time.monotonic()
        for n in range(limit):
            assert guesser.get("/api/v1/batches", headers={"Authorization": f"Bearer wrong-{n}"}).status_code == 401
        for key in ("wrong-again", API_KEY):
            r = guesser.get("/api/v1/batches", headers={"Authorization": f"Bearer {key}"})
            assert r.status_code == 429 and r.json()["error"] == "too_many_failed_keys"
            assert 1 <= int(r.headers["Retry-After"]) <= 60 - int(time.monotonic() - started) + 1
        # The sign-in form is the same door.
        r = post_sign_in(guesser)
        assert r.status_code == 429 and "Retry-After" in r.headers and "assay_session" not in r.headers.get("set-cookie", "")
        # Another client, and requests that present no key, are not held back.
        assert bystander.get("/api/v1/batches", headers={"Authorization": f"Bearer {API_KEY}"}).status_code == 200
        assert guesser.get("/api/v1/batches").status_code == 401


def test_wrong_sign_in_keys_count_too(app):
    from assay.settings import get_settings

    with client_from(app) as guesser:
        for n in range(get_settings().auth_failures_per_minute):
            r = post_sign_in(guesser, f"wrong-{n}")
            assert r.status_code == 401
        assert guesser.get("/api/v1/batches", headers={"Authorization": f"Bearer {API_KEY}"}).status_code == 429


def test_every_route_that_takes_a_key_is_throttled(app):
    from assay.api.auth import require_principal
    from assay.settings import get_settings

    def takes_key(dependant) -> bool:
        return any(d.call is require_principal or takes_key(d) for d in dependant.dependencies)

    routes = [
        r for r in iter_route_contexts(app.routes) if isinstance(r.original_route, APIRoute) and takes_key(r.dependant)
    ]
    assert len(routes) >= 20
    with client_from(app) as guesser:
        for n in range(get_settings().auth_failures_per_minute):
            guesser.get("/api/v1/batches", headers={"Authorization": f"Bearer wrong-{n}"})
        for route in routes:
            method = sorted(route.methods)[0]
            path = re.sub(r"\{[^}]+\}", str(uuid.uuid4()), route.path)
            r = guesser.request(method, path, headers={"Authorization": f"Bearer {API_KEY}"})
            assert r.status_code == 429, (method, path, r.status_code)


def test_failures_are_shared_by_api_processes_through_redis():
    from assay.api.throttle import FailureThrottle, TooManyFailures
    from assay.settings import get_settings

    settings = get_settings()
    prefix = f"{settings.redis_key_prefix}:{uuid.uuid4().hex[:8]}"
    one, other = (FailureThrottle(3, settings.redis_url, prefix) for _ in range(2))
    for _ in range(3):
        one.check("198.51.100.20")
        one.failed("198.51.100.20")
    with pytest.raises(TooManyFailures):
        other.check("198.51.100.20")
    other.check("198.51.100.21")
    # An IPv6 client is its /64.
    for n in range(3):
        one.failed(f"2001:db8::{n + 1}")
    with pytest.raises(TooManyFailures):
        other.check("2001:db8::ffff")
    other.check("2001:db8:0:1::1")


def test_while_redis_is_down_each_process_counts_on_its_own(app, monkeypatch):
    from assay.settings import get_settings

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        dead = f"redis://127.0.0.1:{s.getsockname()[1]}/0"  # nothing listens there once closed
    monkeypatch.setattr(get_settings(), "redis_url", dead)
    with client_from(app) as guesser:
        for n in range(get_settings().auth_failures_per_minute):
            assert guesser.get("/api/v1/batches", headers={"Authorization": f"Bearer wrong-{n}"}).status_code == 401
        assert guesser.get("/api/v1/batches", headers={"Authorization": f"Bearer {API_KEY}"}).status_code == 429
    with client_from(app) as other:
        assert other.get("/api/v1/batches", headers={"Authorization": f"Bearer {API_KEY}"}).status_code == 200


def test_without_a_redis_url_the_throttle_counts_in_memory(app, monkeypatch):
    from assay.settings import get_settings

    monkeypatch.setattr(get_settings(), "redis_url", "")
    with client_from(app) as guesser:
        for n in range(get_settings().auth_failures_per_minute):
            guesser.get("/api/v1/batches", headers={"Authorization": f"Bearer wrong-{n}"})
        assert guesser.get("/api/v1/batches", headers={"Authorization": f"Bearer {API_KEY}"}).status_code == 429


def test_keys_shorter_than_32_characters_are_refused():
    from pydantic import ValidationError

    from assay.settings import Settings

    with pytest.raises(ValidationError, match="API key 2 of 2 is 31 characters long; at least 32"):
        Settings(api_keys=["k" * 32, "k" * 31])
    with pytest.raises(ValidationError, match="session secret is 8 characters"):
        Settings(session_secret="12345678")
    assert len(Settings(api_keys=["k" * 32]).api_keys) == 1


def test_assay_api_refuses_to_start_with_a_short_key():
    env = worker_env({"ASSAY_API_KEYS": '["too-short"]'})
    done = subprocess.run(
        [str(Path(sys.executable).parent / "assay"), "api", "--port", str(free_port())],
        env=env, cwd=REPO, capture_output=True, text=True, timeout=60,
    )
    assert done.returncode == 2
    assert "ASSAY_API_KEYS" in done.stderr and "at least 32" in done.stderr and "Traceback" not in done.stderr


def test_every_example_key_is_long_enough():
    # Every documented setup: the README, the docs site's pages and the compose file.
    documents = [REPO / "README.md", REPO / "docker-compose.yml", *sorted((REPO / "docs").rglob("*.md"))]
    texts = {str(path.relative_to(REPO)): path.read_text() for path in documents}
    examples = [
        (name, key)
        for name, text in texts.items()
        for listing in re.findall(r'ASSAY_API_KEYS[^\n]*?(\["[^\]\n]*\])', text)
        for key in re.findall(r'"([^"]*)"', listing)
    ]
    assert len(examples) >= 3
    assert all(len(key) >= 32 for _, key in examples), examples
    assert len(API_KEY) >= 32
