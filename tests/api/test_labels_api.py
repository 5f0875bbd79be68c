"""Issue 21: POST /api/v1/suites/{name}/labels (CSV or JSONL) and GET /api/v1/suites/{name}/agreement."""

from __future__ import annotations

import hashlib
import json
import uuid
from datetime import timedelta

import pytest
from scipy import stats
from sqlalchemy import select, update

from assay.scoring.store.db import transaction
from assay.scoring.store.models import (
    CalibrationRun,
    CriteriaDefinition,
    Item,
    Label,
    Score,
    utcnow,
)
from assay.settings import get_settings

# Machine verdicts under the kql suite's criteria (threshold 0.9): external id -> (total, passed).
MACHINE = {"q1": (0.95, True), "q2": (0.92, True), "q3": (0.4, False), "q4": (0.3, False), "q5": (0.91, True)}


@pytest.fixture
def scored(api_client, monkeypatch):
    """Five kql items, each with a completed machine score; returns (client, batch id, {external id: item id}, hash)."""
    monkeypatch.setattr("assay.api.routes.batches.start_planner", lambda batch_id: None)
    lines = [
        json.dumps({"id": q, "prompt": "Count storms", "generated_kql": "T | count", "expected_kql": "T | count"})
        for q in MACHINE
    ]
    r = api_client.post(
        "/api/v1/batches?suite=kql", content="\n".join(lines) + "\n", headers={"Content-Type": "application/x-ndjson"}
    )
    assert r.status_code == 202, r.text
    batch_id = r.json()["batch_id"]
    with transaction() as session:
        rows = session.execute(
            select(Score.id, Item.external_id, Score.criteria_hash).join(Item, Item.id == Score.item_id).where(
                Score.batch_id == uuid.UUID(batch_id)
            )
        ).all()
        [criteria_hash] = {row.criteria_hash for row in rows}
        for score_id, external_id, _ in rows:
            total, passed = MACHINE[external_id]
            session.execute(
                update(Score)
                .where(Score.id == score_id)
                .values(status="completed", total=total, passed=passed, completed_at=utcnow())
            )
        items = dict(
            session.execute(select(Item.external_id, Item.id).join(Score, Score.item_id == Item.id).where(
                Score.batch_id == uuid.UUID(batch_id)
            )).all()
        )
    return api_client, batch_id, items, criteria_hash


def post_labels(client, body: str, content_type: str, **params):
    return client.post("/api/v1/suites/kql/labels", params=params, content=body, headers={"Content-Type": content_type})


def csv_body(rows: list[str], header: str = "item_id,passed,score,annotator,comment") -> str:
    return "\n".join([header, *rows]) + "\n"


def alice_rows(items) -> list[str]:
    i = {q: str(v) for q, v in items.items()}
    return [
        f"{i['q1']},pass,0.9,alice,clear",
        f"{i['q2']},fail,0.2,alice,",
        f"{i['q3']},false,0.3,alice,",
        f"{i['q4']},true,0.8,alice,",
        f"{i['q5']},yes,,alice,",
    ]


def bob_rows(items) -> list[str]:
    i = {q: str(v) for q, v in items.items()}
    return [
        f"{i['q1']},1,0.8,bob,",
        f"{i['q2']},no,0.4,bob,",
        f"{i['q3']},0,,bob,",
        f"{i['q4']},fail,0.6,bob,",
        f'{i["q5"]},,0.95,bob,"score only, above the threshold"',
    ]


def first_labels(items) -> str:
    """alice's and bob's labels in one file: uploaded by anyone else, an import of both."""
    return csv_body([*alice_rows(items), *bob_rows(items)])


def test_csv_labels_and_the_agreement_they_give(scored, principals):
    _, _, items, criteria_hash = scored
    alice, bob = principals.key("alice"), principals.key("bob")
    for who, rows in ((alice, alice_rows(items)), (bob, bob_rows(items))):
        r = post_labels(who, csv_body(rows), "text/csv")
        assert r.status_code == 200, r.text
        assert r.json() == {
            "suite": "kql", "accepted": 5, "created": 5, "imported": 0, "replaced": 0, "skipped": 0,
            "skipped_lines": [], "rejected": 0, "bad_lines": [],
        }
    client = scored[0]

    report = client.get("/api/v1/suites/kql/agreement").json()
    assert report["labelled_items"] == 5 and report["labels"] == 10 and len(report["hashes"]) == 1
    h = report["hashes"][0]
    assert h["criteria_hash"] == criteria_hash and h["threshold"] == 0.9
    # Majorities: q1 pass, q2 fail, q3 fail, q4 tie (1-1), q5 pass (bob's 0.95 votes pass at 0.9).
    assert h["confusion"] == {
        "machine_pass_human_pass": 2, "machine_pass_human_fail": 1, "machine_fail_human_pass": 0, "machine_fail_human_fail": 1,
    }
    assert h["compared_items"] == 4 and h["accuracy"] == pytest.approx(0.75)
    # observed 0.75; expected 3/4·2/4 + 1/4·2/4 = 0.5; kappa (0.75 - 0.5) / 0.5
    assert h["kappa"] == pytest.approx(0.5) and h["kappa_reason"] is None
    assert h["ties"]["count"] == 1 and h["ties"]["items"][0]["external_id"] == "q4"
    assert h["ties"]["items"][0]["human_pass_votes"] == 1 and h["ties"]["items"][0]["human_fail_votes"] == 1
    [wrong] = h["disagreeing"]["items"]
    assert h["disagreeing"]["count"] == 1
    assert wrong["external_id"] == "q2" and wrong["machine_passed"] is True and wrong["human_passed"] is False
    assert wrong["human_score"] == pytest.approx(0.3) and wrong["gap"] == pytest.approx(0.62)
    # Spearman over every item with a machine total and a human score (the tie included).
    machine = [0.95, 0.92, 0.4, 0.3, 0.91]
    human = [0.85, 0.3, 0.3, 0.7, 0.95]
    expected = stats.spearmanr(machine, human)
    assert h["spearman"]["pairs"] == 5 and h["spearman"]["reason"] is None
    assert h["spearman"]["rho"] == pytest.approx(expected.statistic) and h["spearman"]["p_value"] == pytest.approx(expected.pvalue)

    # alice changes her mind on q2: her label is replaced, bob's stays; q2 becomes a tie.
    again = post_labels(alice, csv_body([f"{items['q2']},pass,0.9,alice,second look"]), "text/csv")
    assert again.json()["replaced"] == 1 and again.json()["created"] == 0
    with transaction() as session:
        mine = session.scalars(select(Label).where(Label.item_id == items["q2"]).order_by(Label.annotator)).all()
    assert [(x.annotator, x.written_by, x.passed, x.score, x.comment) for x in mine] == [
        ("key:alice", "key:alice", True, 0.9, "second look"), ("key:bob", "key:bob", False, 0.4, None),
    ]
    h = client.get("/api/v1/suites/kql/agreement").json()["hashes"][0]
    assert h["ties"]["count"] == 2 and h["disagreeing"]["count"] == 0 and h["kappa"] == pytest.approx(1.0)


def test_a_new_criteria_hash_has_its_own_agreement_and_calibration_scores_stay_out(scored):
    client, _, items, criteria_hash = scored
    assert post_labels(client, first_labels(items), "text/csv").status_code == 200
    with transaction() as session:
        content = dict(session.get(CriteriaDefinition, criteria_hash).criteria_content) | {"threshold": 0.5}
        new_hash = hashlib.sha256(json.dumps(content, sort_keys=True).encode()).hexdigest()
        session.add(CriteriaDefinition(criteria_hash=new_hash, criteria_content=content, created_at=utcnow() + timedelta(seconds=5)))
        session.flush()
        # The re-score under the new rubric fails q2 and passes q4 (each a human majority now, q4 a tie).
        rescored = {"q1": (0.9, True), "q2": (0.2, False), "q3": (0.3, False), "q4": (0.7, True), "q5": (0.8, True)}
        for q, (total, passed) in rescored.items():
            session.add(Score(
                item_id=items[q], suite_name="kql", criteria_hash=new_hash, status="completed", total=total,
                passed=passed, components_total=1, components_landed=1, triggered_by="t", completed_at=utcnow(),
            ))
        # A calibration repeat of q3 under the first hash, later and passing: never a machine verdict.
        run = CalibrationRun(suite_name="kql", criteria_hash=criteria_hash, sample=1, repeats=2, created_by="t")
        session.add(run)
        session.flush()
        session.add(Score(
            item_id=items["q3"], suite_name="kql", criteria_hash=criteria_hash, status="completed", total=0.99,
            passed=True, components_total=1, components_landed=1, triggered_by="t",
            completed_at=utcnow() + timedelta(hours=1), calibration_run_id=run.id, calibration_repeat=1,
        ))
    report = client.get("/api/v1/suites/kql/agreement").json()
    assert [h["criteria_hash"] for h in report["hashes"]] == [new_hash, criteria_hash]
    new, old = report["hashes"]
    assert old["confusion"]["machine_fail_human_fail"] == 1 and old["disagreeing"]["count"] == 1  # q3 still fails
    # Under threshold 0.5 bob's 0.95 still votes pass; q2 now agrees: 4 compared, all agree.
    assert new["threshold"] == 0.5 and new["compared_items"] == 4 and new["accuracy"] == 1.0
    assert new["disagreeing"]["count"] == 0 and new["kappa"] == pytest.approx(1.0)
    only = client.get("/api/v1/suites/kql/agreement", params={"criteria_hash": new_hash}).json()
    assert [h["criteria_hash"] for h in only["hashes"]] == [new_hash]
    assert client.get("/api/v1/suites/kql/agreement", params={"criteria_hash": "0" * 64}).status_code == 404
    assert client.get("/api/v1/suites/kql/agreement", params={"criteria_hash": "xyz"}).status_code == 422


def test_jsonl_labels_by_batch_and_external_id_default_to_the_callers_principal(scored):
    client, batch_id, items, _ = scored
    body = "\n".join([
        json.dumps({"batch_id": batch_id, "external_id": "q1", "passed": True}),
        "",
        json.dumps({"item_id": str(items["q3"]), "score": 0.25, "annotator": "carol", "comment": "weak"}),
    ]) + "\n"
    r = post_labels(client, body, "application/x-ndjson")
    assert r.status_code == 200, r.text
    assert (r.json()["created"], r.json()["imported"]) == (1, 1)
    with transaction() as session:
        got = {(x.item_id, x.annotator, x.written_by, x.passed, x.score, x.source) for x in session.scalars(select(Label))}
    # carol is not the caller: her label is an import, recorded as stored by the caller.
    assert got == {
        (items["q1"], "key:ci-tester", "key:ci-tester", True, None, "upload"),
        (items["q3"], "carol", "key:ci-tester", None, 0.25, "import"),
    }


def test_bad_rows_are_listed_with_their_line_numbers_and_nothing_is_stored(scored):
    client, batch_id, items, _ = scored
    q1 = items["q1"]
    body = csv_body([
        f"{q1},pass,0.5,dora,",
        f"{q1},pass,1.5,erin,",
        f"{uuid.uuid4()},pass,,erin,",
        f"{q1},,,erin,",
        f"{q1},maybe,,frank,",
        "not-a-uuid,pass,,frank,",
        f"{q1},fail,,dora,",
        f'{q1},pass,,"multi\nline",',
        f"{q1},pass,,gus,,extra",
    ])
    r = post_labels(client, body, "text/csv")
    assert r.status_code == 422, r.text
    bad = r.json()["details"]["bad_lines"]
    assert [b["line"] for b in bad] == [3, 4, 5, 6, 7, 8, 11]
    reasons = {b["line"]: b["reason"] for b in bad}
    assert "from 0 to 1" in reasons[3] and "no item" in reasons[4] and "passed (true/false) or a score" in reasons[5]
    assert "pass/fail" in reasons[6] and "not a UUID" in reasons[7] and "line 2 already labels" in reasons[8]
    assert "more fields" in reasons[11]
    with transaction() as session:
        assert session.scalars(select(Label)).all() == []
    # partial: the good rows are stored (line 2, and the quoted two-line annotator on lines 9-10).
    r = post_labels(client, body, "text/csv", partial="true")
    assert r.status_code == 200 and r.json()["accepted"] == 2 and r.json()["rejected"] == 7
    # JSONL: NaN is not JSON, an array is not an object, unknown fields are named.
    jsonl = "\n".join([
        json.dumps({"item_id": str(q1), "passed": True, "annotator": "hal"}),
        f'{{"item_id": "{q1}", "score": NaN}}',
        "[1]",
        json.dumps({"item_id": str(q1), "passed": True, "annotater": "typo"}),
        json.dumps({"item_id": str(q1), "passed": "yes"}),
        json.dumps({"batch_id": batch_id, "external_id": "nope", "passed": True}),
        json.dumps({"batch_id": str(uuid.uuid4()), "external_id": "q1", "passed": True}),
    ])
    bad = post_labels(client, jsonl, "application/x-ndjson").json()["details"]["bad_lines"]
    assert [b["line"] for b in bad] == [2, 3, 4, 5, 6, 7]
    assert "unknown field 'annotater'" in bad[2]["reason"] and "has no item 'nope'" in bad[4]["reason"]
    assert "no batch" in bad[5]["reason"]


def test_the_format_is_declared_and_limits_apply(scored, monkeypatch):
    client, _, items, _ = scored
    row = csv_body([f"{items['q1']},pass,,ivy,"])
    assert post_labels(client, row, "text/plain").status_code == 415
    assert client.post("/api/v1/suites/kql/labels", content=row.encode()).status_code == 415
    assert post_labels(client, row, "application/json").status_code == 415
    r = post_labels(client, "item_id,pased\n", "text/csv")
    assert r.status_code == 422 and "unknown CSV column 'pased'" in r.json()["message"]
    assert post_labels(client, "", "text/csv").status_code == 422
    assert post_labels(client, "item_id,passed\n", "text/csv").json()["message"] == "the upload holds no labels"
    assert client.post("/api/v1/suites/nope/labels", content=row, headers={"Content-Type": "text/csv"}).status_code == 404
    assert client.get("/api/v1/suites/nope/agreement").status_code == 404
    monkeypatch.setattr(get_settings(), "max_body_bytes", 50)
    assert post_labels(client, row * 3, "text/csv").status_code == 413


def test_a_suite_without_labels_reports_no_hashes(scored):
    client = scored[0]
    assert client.get("/api/v1/suites/kql/agreement").json()["hashes"] == []


def test_the_cli_pushes_labels_and_prints_the_agreement(scored, tmp_path, monkeypatch):
    from typer.testing import CliRunner

    from assay import cli

    client, _, items, criteria_hash = scored
    monkeypatch.setattr("assay.cli.stores.api_client", lambda api_url, api_key: client)
    monkeypatch.setattr(client, "close", lambda: None)  # each command closes its client; this one is shared
    monkeypatch.setenv("ASSAY_API_URL", "http://testserver")  # through the API, not the embedded store
    runner = CliRunner()
    labels_file = tmp_path / "labels.csv"
    labels_file.write_text(first_labels(items))
    pushed = runner.invoke(cli.cli, ["labels", "push", str(labels_file), "--suite", "kql"])
    assert pushed.exit_code == 0, pushed.output
    assert "suite kql: 10 label(s) stored (0 new, 10 imported, 0 replaced)" in pushed.output
    # Pushed again: an import never replaces a label, and the CLI says which rows were skipped and why.
    again = runner.invoke(cli.cli, ["labels", "push", str(labels_file), "--suite", "kql"])
    assert again.exit_code == 0, again.output
    assert "suite kql: 0 label(s) stored (0 new, 0 imported, 0 replaced), 10 skipped" in again.output
    said = " ".join(again.output.split())  # the console wraps long lines
    assert "line 2 skipped: alice already has a label on this item (import, stored by key:ci-tester)" in said
    shown = runner.invoke(cli.cli, ["labels", "agreement", "--suite", "kql"])
    assert shown.exit_code == 0, shown.output
    assert f"criteria {criteria_hash[:12]} (current), pass at 0.9" in shown.output
    assert "accuracy 0.750   kappa 0.500" in shown.output
    assert "  machine pass             2            1" in shown.output
    assert "disagrees: q2  machine pass (0.920), people fail (0-2)" in shown.output
    as_json = runner.invoke(cli.cli, ["labels", "agreement", "--suite", "kql", "--json"])
    assert json.loads(as_json.output)["hashes"][0]["kappa"] == pytest.approx(0.5)
    wrong = tmp_path / "labels.txt"
    wrong.write_text("x")
    refused = runner.invoke(cli.cli, ["labels", "push", str(wrong), "--suite", "kql"])
    assert refused.exit_code == 2 and ".csv, .jsonl or .ndjson" in refused.output
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"item_id": str(items["q1"]), "score": 2}) + "\n")
    failed = runner.invoke(cli.cli, ["labels", "push", str(bad), "--suite", "kql"])
    assert failed.exit_code == 2 and "line 1: score must be from 0 to 1" in failed.output  # a refused upload: a usage error
