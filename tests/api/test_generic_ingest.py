"""Batch uploads of the generic kind through the real API app: a suite's ``fields`` mapping turns the
objects users upload as they are into canonical items; a line the mapping does not fit is rejected with
its number and what is wrong, and nothing is half-stored."""

from __future__ import annotations

import json

import pytest
from sqlalchemy import func, select

from assay.scoring.store.db import transaction
from assay.scoring.store.models import Batch, Item, Score
from assay.scoring.suites.criteria import register_suite
from assay.scoring.suites.loader import parse_suite
from assay.settings import get_settings

MAPPED_SUITE = """
name: generic_mapped_upload
kind: generic
threshold: 0.5
fields:
  id: qid
  input: question
  output: reply.text
  expected: gold.answer
  context: docs
  metadata.team: team
components:
  exact:
    weight: 0.5
    metric: exact_match
    version: 1
    args: {case_sensitive: false}
  cites:
    weight: 0.5
    metric: regex_match
    version: 1
    args: {pattern: '\\[\\d+\\]'}
"""

PLAIN_SUITE = """
name: generic_plain_upload
kind: generic
threshold: 0.5
components:
  exact:
    weight: 1.0
    metric: exact_match
    version: 1
"""


def _line(n: int, **overrides: object) -> dict:
    line = {
        "qid": n,
        "question": f"Question {n}?",
        "reply": {"text": f"Answer {n} [1]", "tokens": 12},
        "gold": {"answer": f"answer {n} [1]"},
        "docs": ["first passage", "second passage"],
        "team": "support",
        "trace_id": "not stored",
    }
    line.update(overrides)
    return line


def jsonl(*items: object) -> bytes:
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
    started: list = []
    monkeypatch.setattr("assay.api.routes.batches.start_planner", started.append)
    return started


@pytest.fixture
def suites(api_client):
    config = get_settings().config_dir
    with transaction() as session:
        for text in (MAPPED_SUITE, PLAIN_SUITE):
            register_suite(session, parse_suite(text, config_dir=config, env={}, source="test"))
    return api_client


def test_mapped_upload_stores_canonical_items(suites):
    r = suites.post("/api/v1/batches?suite=generic_mapped_upload", content=jsonl(_line(1), _line(2, docs=[])))
    assert r.status_code == 202, r.text
    assert r.json()["accepted"] == 2
    with transaction() as s:
        items = {i.external_id: i.payload for i in s.scalars(select(Item))}
    assert items == {
        "1": {
            "id": "1",
            "input": "Question 1?",
            "output": "Answer 1 [1]",
            "expected": "answer 1 [1]",
            "context": ["first passage", "second passage"],
            "metadata": {"team": "support"},
        },
        "2": {
            "id": "2",
            "input": "Question 2?",
            "output": "Answer 2 [1]",
            "expected": "answer 2 [1]",
            "context": [],
            "metadata": {"team": "support"},
        },
    }


def test_mapped_upload_as_a_json_array(suites):
    r = suites.post("/api/v1/batches?suite=generic_mapped_upload", json=[_line(1), _line(2), _line(3)])
    assert r.status_code == 202, r.text
    assert r.json()["accepted"] == 3


def test_lines_the_mapping_does_not_fit_are_rejected_with_nothing_stored(suites):
    body = (
        jsonl(_line(1))
        + jsonl({k: v for k, v in _line(2).items() if k != "question"})  # required path missing
        + jsonl(_line(3, reply={"tokens": 3}))  # required nested path missing
        + jsonl(_line(4, question={"text": "q"}))  # mapped value of the wrong type
        + b"[1, 2]\n"  # not an object
        + b"{not json\n"
        + jsonl(_line(7, reply={"text": None}))  # a null output
        + jsonl(_line(8))
    )
    r = suites.post("/api/v1/batches?suite=generic_mapped_upload", content=body)
    assert r.status_code == 422, r.text
    err = r.json()
    assert err["error"] == "invalid_input"
    lines = {b["line"]: b["reason"] for b in err["details"]["bad_lines"]}
    assert set(lines) == {2, 3, 4, 5, 6, 7}
    assert lines[2] == "input (mapped from question) is not in the item: $ has no key 'question'"
    assert lines[3] == "output (mapped from reply.text) is not in the item: $.reply has no key 'text'"
    assert lines[4].startswith("input: ") and "string" in lines[4]
    assert lines[5] == "an item is a JSON object, got an array"
    assert lines[6].startswith("invalid JSON")
    assert lines[7] == "output (mapped from reply.text) is null"
    assert counts() == (0, 0, 0)


def test_partial_upload_keeps_the_good_mapped_lines(suites):
    body = jsonl(_line(1), _line(2, reply=[]), _line(3))
    r = suites.post("/api/v1/batches?suite=generic_mapped_upload&partial=true", content=body)
    assert r.status_code == 202, r.text
    assert r.json()["accepted"] == 2 and r.json()["rejected"] == 1
    assert r.json()["bad_lines"] == [
        {"line": 2, "reason": "output (mapped from reply.text) is not in the item: $.reply is not an object"}
    ]
    assert counts() == (1, 2, 2)


def test_mapped_ids_must_be_unique_within_an_upload(suites):
    r = suites.post("/api/v1/batches?suite=generic_mapped_upload", content=jsonl(_line(1), _line(1)))
    assert r.status_code == 422
    assert r.json()["details"]["bad_lines"] == [{"line": 2, "reason": "duplicate id '1': line 1 has the same id"}]
    assert counts() == (0, 0, 0)


def test_without_fields_a_line_is_the_canonical_item(suites):
    good = {"id": "a", "input": "q", "output": {"json": True}, "expected": "x", "metadata": {"k": 1}}
    r = suites.post(
        "/api/v1/batches?suite=generic_plain_upload",
        content=jsonl(good, {"input": "q", "answer": "unknown key"}),
    )
    assert r.status_code == 422
    reasons = [b["reason"] for b in r.json()["details"]["bad_lines"]]
    assert len(reasons) == 1 and "answer: Extra inputs are not permitted" in reasons[0]
    r = suites.post("/api/v1/batches?suite=generic_plain_upload", content=jsonl(good))
    assert r.status_code == 202, r.text
    with transaction() as s:
        assert s.scalars(select(Item.payload)).one() == good


def test_every_export_carries_the_items_content_and_metadata_columns(suites):
    """The results exports (JSONL, CSV) and the report (CSV) carry each item's content; CSV has one
    ``metadata.KEY`` column per key any item has (read before streaming), escaped by the CSV writer."""
    import csv
    import io

    lines = [_line(1, team='=HYPERLINK("http://x")'), _line(2, team="billing")]
    r = suites.post("/api/v1/batches?suite=generic_mapped_upload", content=jsonl(*lines))
    assert r.status_code == 202, r.text
    batch_id = r.json()["batch_id"]
    exported = suites.get(f"/api/v1/batches/{batch_id}/results", params={"format": "jsonl"})
    first = json.loads(exported.text.splitlines()[0])
    assert first["item"]["input"] == "Question 1?" and first["item"]["metadata"] == {"team": '=HYPERLINK("http://x")'}
    for url, params in (
        (f"/api/v1/batches/{batch_id}/results", {"format": "csv"}),
        (f"/api/v1/batches/{batch_id}/report.csv", {}),
    ):
        text = suites.get(url, params=params).text
        rows = list(csv.DictReader(io.StringIO(text)))
        assert [row["metadata.team"] for row in rows] == ['\'=HYPERLINK("http://x")', "billing"], url
        assert rows[0]["input"] == "Question 1?" and rows[0]["expected"] == "answer 1 [1]", url
        assert json.loads(rows[0]["context"]) == ["first passage", "second passage"], url
