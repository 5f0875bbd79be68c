"""Issue 29 (security review): typed principals, labels that belong to who wrote them, owned API suites.

Each test reproduces a finding against the real store through the API: another principal replacing a
label, a proxy user and a key of the same name being one principal, and anyone posting versions of
anyone's API suite."""

from __future__ import annotations

import json
import uuid

import pytest
from pydantic import ValidationError
from sqlalchemy import select, update

from assay.scoring.store.db import transaction
from assay.scoring.store.models import Batch, Label, Review, SuiteRecord
from assay.settings import Settings
from tests.api.principals import KEYS
from tests.api.test_labels_api import csv_body, post_labels, scored  # noqa: F401  (scored: a fixture)
from tests.api.test_review_api import _queued
from tests.api.test_suites_api import post, suite_dict, unique


def labels_on(item_id: uuid.UUID) -> dict[str, tuple]:
    """annotator -> (written by, source, passed) of the item's labels."""
    with transaction() as session:
        rows = session.scalars(select(Label).where(Label.item_id == item_id))
        return {x.annotator: (x.written_by, x.source, x.passed) for x in rows}


# --- labels belong to who wrote them ------------------------------------------------------------------------


def test_bob_cannot_replace_alices_label_and_his_import_is_skipped_with_the_reason(scored, principals):
    _, _, items, _ = scored
    q1, q2 = items["q1"], items["q2"]
    alice, bob = principals.key("alice"), principals.key("bob")
    assert post_labels(alice, csv_body([f"{q1},pass,0.9,,mine"]), "text/csv").json()["created"] == 1

    # The finding: bob uploads annotator=alice for an item alice labelled (it answered 200, replaced: 1).
    r = post_labels(bob, csv_body([f"{q1},fail,0.1,alice,overwritten", f"{q2},fail,0.2,alice,from her sheet"]), "text/csv")
    assert r.status_code == 200, r.text
    out = r.json()
    assert (out["created"], out["imported"], out["replaced"], out["skipped"]) == (0, 1, 0, 1)
    assert out["skipped_lines"] == [{
        "line": 2,
        "reason": "key:alice already has a label on this item (upload, stored by key:alice); an import never replaces a label",
    }]
    assert labels_on(q1) == {"key:alice": ("key:alice", "upload", True)}
    # q2 had no label by alice: the import is stored, recorded as bob's act.
    assert labels_on(q2) == {"alice": ("key:bob", "import", False)}
    # An import never replaces one either, not even bob's own earlier import.
    again = post_labels(bob, csv_body([f"{q2},pass,,alice,"]), "text/csv").json()
    assert (again["imported"], again["skipped"]) == (0, 1) and "stored by key:bob" in again["skipped_lines"][0]["reason"]
    assert labels_on(q2) == {"alice": ("key:bob", "import", False)}

    # Naming alice's principal itself is not an import: a bad row, nothing stored.
    typed = post_labels(bob, csv_body([f"{q2},fail,,key:alice,"]), "text/csv")
    assert typed.status_code == 422
    assert typed.json()["details"]["bad_lines"] == [{
        "line": 2,
        "reason": "annotator 'key:alice' is another principal: only it writes its own labels (to import someone's "
        "labels, name them without key: or proxy:)",
    }]
    # alice's own re-upload still replaces her label.
    mine = post_labels(alice, csv_body([f"{q1},fail,0.3,key:alice,second look"]), "text/csv").json()
    assert (mine["replaced"], mine["skipped"]) == (1, 0)
    assert labels_on(q1) == {"key:alice": ("key:alice", "upload", False)}


def test_a_reviewers_label_changes_only_through_a_review(api_client, principals):
    (score_id,) = _queued(1)
    entry_id = api_client.get("/api/v1/suites/kql/review-queue").json()["entries"][0]["entry_id"]
    alice, bob = principals.key("alice"), principals.key("bob")
    assert alice.post(f"/api/v1/review-queue/{entry_id}/review", json={"passed": False}).status_code == 201
    with transaction() as session:
        item_id = session.scalar(select(Review.item_id).where(Review.score_id == score_id))
    assert labels_on(item_id) == {"key:alice": ("key:alice", "review", False)}

    # bob cannot overwrite the reviewer's gold label by naming her ...
    out = post_labels(bob, csv_body([f"{item_id},pass,,alice,"]), "text/csv").json()
    assert out["skipped"] == 1 and "key:alice already has a label on this item (review" in out["skipped_lines"][0]["reason"]
    # ... and neither can alice by an upload: her review's label changes through a review.
    own = post_labels(alice, csv_body([f"{item_id},pass,,,"]), "text/csv").json()
    assert (own["replaced"], own["skipped"]) == (0, 1)
    assert own["skipped_lines"][0]["reason"] == (
        "your label on this item was recorded by your review: it changes only through a review"
    )
    assert labels_on(item_id) == {"key:alice": ("key:alice", "review", False)}
    assert alice.post(f"/api/v1/review-queue/{entry_id}/review", json={"passed": True}).status_code == 201
    assert labels_on(item_id) == {"key:alice": ("key:alice", "review", True)}


# --- a proxy user and a key of the same name are two principals -----------------------------------------------


def test_proxy_alice_and_key_alice_have_separate_idempotency_labels_and_reviews(scored, principals):
    client, _, items, _ = scored
    key_alice, proxy_alice = principals.key("alice"), principals.proxy("alice")
    line = json.dumps({"id": "x", "prompt": "p", "generated_kql": "T | count", "expected_kql": "T | count"}) + "\n"

    def upload(who, body: str):  # type: ignore[no-untyped-def]
        return who.post(
            "/api/v1/batches?suite=kql",
            content=body,
            headers={"Content-Type": "application/x-ndjson", "Idempotency-Key": "alice-nightly"},
        )

    by_key = upload(key_alice, line)
    by_proxy = upload(proxy_alice, line + line.replace('"x"', '"y"'))
    assert by_key.status_code == by_proxy.status_code == 202, by_proxy.text
    # The same key from the other alice is not a retry (nor a reuse for another body): it is her own.
    assert by_proxy.json()["replayed"] is False and by_proxy.json()["batch_id"] != by_key.json()["batch_id"]
    with transaction() as session:
        scopes = session.scalars(select(Batch.idempotency_scope).where(Batch.idempotency_key == "alice-nightly"))
        assert sorted(scopes) == ["key:alice", "proxy:alice"]

    # Labels: each alice's own label, neither replacing the other's.
    q1 = items["q1"]
    assert post_labels(key_alice, csv_body([f"{q1},pass,,alice,"]), "text/csv").json()["created"] == 1
    theirs = post_labels(proxy_alice, csv_body([f"{q1},fail,,alice,"]), "text/csv").json()
    assert (theirs["created"], theirs["replaced"], theirs["skipped"]) == (1, 0, 0)
    assert labels_on(q1) == {"key:alice": ("key:alice", "upload", True), "proxy:alice": ("proxy:alice", "upload", False)}

    # Reviews: two reviewers, two gold labels.
    _queued(1)
    entry_id = client.get("/api/v1/suites/kql/review-queue").json()["entries"][0]["entry_id"]
    for who, passed in ((key_alice, True), (proxy_alice, False)):
        made = who.post(f"/api/v1/review-queue/{entry_id}/review", json={"passed": passed})
        assert made.status_code == 201, made.text
    reviewers = [r["reviewer"] for r in client.get(f"/api/v1/review-queue/{entry_id}").json()["reviews"]]
    assert reviewers == ["key:alice", "proxy:alice"]


# --- API suites have owners -----------------------------------------------------------------------------------


def test_only_the_owner_or_an_operator_changes_an_api_suite(principals):
    alice, bob, ops, proxy_alice = principals.key("alice"), principals.key("bob"), principals.key("ops"), principals.proxy("alice")
    name = unique()
    created = post(alice, suite_dict(name))
    assert created.status_code == 201 and created.json()["suite"]["owner"] == "key:alice"

    refusal = f"suite {name!r} belongs to key:alice: only its owner or an operator (ASSAY_OPERATOR_KEYS) may"
    for who in (bob, proxy_alice):  # proxy alice is not key alice
        r = post(who, suite_dict(name, threshold=0.9))
        assert r.status_code == 403, r.text
        assert r.json()["message"] == f"{refusal} post versions of it"
        for method, path, doing in (
            ("post", "disable", "disable"), ("post", "enable", "enable"), ("delete", "", "delete")
        ):
            url = f"/api/v1/suites/{name}" + (f"/{path}" if path else "")
            denied = getattr(who, method)(url)
            assert denied.status_code == 403 and denied.json()["message"] == f"{refusal} {doing} it", denied.text
        checked = who.post("/api/v1/suites/validate", content=json.dumps(suite_dict(name)), headers={"Content-Type": "application/json"})
        assert checked.json()["valid"] is False
        assert checked.json()["problems"] == [f"name: {refusal} post versions of it (POST /api/v1/suites would answer 403)"]
    shown = alice.get(f"/api/v1/suites/{name}").json()
    assert shown["versions"] == 1 and shown["state"] == "active"

    assert post(alice, suite_dict(name, threshold=0.9)).status_code == 201  # the owner
    by_operator = post(ops, suite_dict(name, threshold=0.8))
    assert by_operator.status_code == 201 and by_operator.json()["suite"]["owner"] == "key:alice"  # still alice's
    assert ops.post(f"/api/v1/suites/{name}/disable").json()["state"] == "disabled"
    assert alice.post(f"/api/v1/suites/{name}/enable").json()["state"] == "active"
    assert alice.delete(f"/api/v1/suites/{name}").json()["state"] == "deleted"
    # A deleted suite's name stays its owner's.
    assert post(bob, suite_dict(name)).status_code == 403


def test_an_api_suite_without_an_owner_is_changed_by_operators_only(principals):
    alice, ops = principals.key("alice"), principals.key("ops")
    name = unique()
    assert post(alice, suite_dict(name)).status_code == 201
    with transaction() as session:  # as migration 0011 leaves a suite registered before owners were kept
        session.execute(update(SuiteRecord).where(SuiteRecord.name == name).values(owner=None))
    r = alice.post(f"/api/v1/suites/{name}/disable")
    assert r.status_code == 403
    assert r.json()["message"] == (
        f"suite {name!r} was registered before suites had owners: only an operator (ASSAY_OPERATOR_KEYS) may disable it"
    )
    assert ops.post(f"/api/v1/suites/{name}/disable").status_code == 200
    assert post(ops, suite_dict(name, threshold=0.9)).status_code == 201


def test_operator_keys_must_be_names_of_configured_keys():
    keys = [f"{name}:{key}" for name, key in KEYS.items()]
    assert Settings(api_keys=keys, operator_keys=["ops"]).operator_keys == ["ops"]
    with pytest.raises(ValidationError, match="ASSAY_OPERATOR_KEYS names 'carol', which no ASSAY_API_KEYS entry is named"):
        Settings(api_keys=keys, operator_keys=["carol"])
    with pytest.raises(ValidationError, match="operator key 1 of 1 is not a key name"):
        Settings(api_keys=keys, operator_keys=["ops:" + KEYS["ops"]])
