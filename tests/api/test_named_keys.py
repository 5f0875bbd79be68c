"""Issue 21: API keys have names (``ASSAY_API_KEYS`` entries ``name:key``); the principal of a bearer
request or a dashboard sign-in is the key's name, a bare key's is ``key-`` and 8 hex digits of its
SHA-256 — never a name every key shares."""

from __future__ import annotations

import hashlib
import json
import random

import pytest
from fastapi.testclient import TestClient
from pydantic import SecretStr, ValidationError

from assay.settings import ApiKey, Settings, get_settings, parse_api_key, unnamed_key_name
from tests.dashboard.support import post_sign_in

ALICE_KEY = "alice-key-" + "a" * 30
BOB_KEY = "b" * 40
ITEM = {"id": "q1", "prompt": "Count storms", "generated_kql": "StormEvents | count", "expected_kql": "StormEvents | count"}


def test_an_entry_is_name_colon_key_or_a_bare_key_named_by_its_fingerprint():
    assert parse_api_key(f"alice:{ALICE_KEY}") == ApiKey("alice", ALICE_KEY)
    assert parse_api_key("ci.bot@example.com:" + BOB_KEY) == ApiKey("ci.bot@example.com", BOB_KEY)
    fingerprint = hashlib.sha256(BOB_KEY.encode()).hexdigest()[:8]
    assert parse_api_key(BOB_KEY) == ApiKey(f"key-{fingerprint}", BOB_KEY)
    assert unnamed_key_name(BOB_KEY) == f"key-{fingerprint}"
    assert unnamed_key_name(ALICE_KEY) != unnamed_key_name(BOB_KEY)
    # The key part may hold more colons: the entry splits at the first.
    assert parse_api_key("svc:" + "x:" * 20) == ApiKey("svc", "x:" * 20)


@pytest.mark.parametrize("entry", [":" + BOB_KEY, "has space:" + BOB_KEY, "-dash:" + BOB_KEY, "n" * 65 + ":" + BOB_KEY])
def test_a_bad_name_is_refused_without_echoing_the_key(entry):
    with pytest.raises(ValidationError) as info:
        Settings(api_keys=[BOB_KEY + "c", entry])
    message = str(info.value)
    assert "API key 2 of 2" in message and "name before ':'" in message and BOB_KEY not in message


def test_the_32_character_rule_applies_to_the_key_part():
    with pytest.raises(ValidationError, match="API key 1 of 1 is 31 characters long; at least 32"):
        Settings(api_keys=["a-long-enough-name-for-32-chars:" + "k" * 31])
    assert Settings(api_keys=["n:" + "k" * 32]).api_keys[0].get_secret_value() == "n:" + "k" * 32


def test_one_key_under_two_entries_is_refused_but_one_name_may_hold_two_keys():
    with pytest.raises(ValidationError, match="API key 2 of 2 is the same key as API key 1"):
        Settings(api_keys=[f"alice:{BOB_KEY}", f"bob:{BOB_KEY}"])
    # Rotating a person's key: the old and the new one under the same name.
    assert len(Settings(api_keys=[f"alice:{ALICE_KEY}", f"alice:{BOB_KEY}"]).api_keys) == 2


@pytest.fixture
def app(clean_db, monkeypatch):
    monkeypatch.setattr("assay.api.routes.batches.start_planner", lambda batch_id: None)
    monkeypatch.setattr(get_settings(), "api_keys", [SecretStr(f"alice:{ALICE_KEY}"), SecretStr(BOB_KEY)])
    from assay.api.app import create_app

    return create_app()


def _client(app, **options) -> TestClient:
    address = f"198.18.{random.randint(0, 255)}.{random.randint(1, 254)}"
    return TestClient(app, base_url="https://testserver", follow_redirects=False, client=(address, 40000), **options)


def _upload(client: TestClient, key: str) -> dict:
    r = client.post(
        "/api/v1/batches?suite=kql",
        content=json.dumps(ITEM) + "\n",
        headers={"Authorization": f"Bearer {key}", "Content-Type": "application/x-ndjson"},
    )
    assert r.status_code == 202, r.text
    return client.get(f"/api/v1/batches/{r.json()['batch_id']}", headers={"Authorization": f"Bearer {key}"}).json()


def test_a_bearer_request_acts_as_its_key_name(app):
    with _client(app) as client:
        assert _upload(client, ALICE_KEY)["created_by"] == "key:alice"
        assert _upload(client, BOB_KEY)["created_by"] == "key:" + unnamed_key_name(BOB_KEY)
        # The name is not a key: offering "alice:<key>" as the bearer is a wrong key.
        r = client.get("/api/v1/batches", headers={"Authorization": f"Bearer alice:{ALICE_KEY}"})
        assert r.status_code == 401


def test_a_dashboard_sign_in_keeps_the_key_name_and_renaming_the_key_signs_it_out(app, monkeypatch):
    from assay.api import signin_sessions as cookie
    from assay.scoring.store.db import transaction
    from assay.scoring.store.models import SignedInSession

    with _client(app) as browser:
        r = post_sign_in(browser, ALICE_KEY)
        assert r.status_code == 303, r.text
        data = cookie.verify(get_settings(), browser.cookies[cookie.COOKIE_NAME])
        assert data is not None and data.user == "alice"
        with transaction() as session:
            assert session.get(SignedInSession, cookie.row_id(data.session_id)).user_name == "alice"
        page = browser.get("/dashboard/")
        assert page.status_code == 200 and "alice" in page.text
        # The JSON API takes the cookie as the same principal.
        token = cookie.verify(get_settings(), browser.cookies[cookie.COOKIE_NAME]).csrf
        r = browser.post(
            "/api/v1/batches?suite=kql",
            content=json.dumps(ITEM) + "\n",
            headers={"Content-Type": "application/x-ndjson", "X-CSRF-Token": token},
        )
        assert r.status_code == 202, r.text
        assert browser.get(f"/api/v1/batches/{r.json()['batch_id']}").json()["created_by"] == "key:alice"  # the key's principal

        monkeypatch.setattr(get_settings(), "api_keys", [SecretStr(f"carol:{ALICE_KEY}"), SecretStr(BOB_KEY)])
        assert browser.get("/api/v1/batches").status_code == 401
