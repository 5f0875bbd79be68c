"""Batch reports: JSON, CSV and Excel, with the KQL scoring design's columns for KQL, an Excel summary sheet, and
streaming a batch bigger than one fetch chunk. Scores are made in this process against the loopback
judge fake (no worker needed)."""

from __future__ import annotations

import csv
import io
import json

import pytest
from fastapi.testclient import TestClient
from openpyxl import load_workbook

from assay.scoring.trust.review import HUMAN_COLUMNS
from tests.conftest import API_KEY, REPO
from tests.dashboard.support import judge_runtime, make_app, score_in_process
from tests.fakes.anthropic_server import FakeAnthropic

EXAMPLES = REPO / "examples" / "kql_items.jsonl"
DESIGN_000 = [
    "Total Score", "Score Status", "Schema Match Score", "Semantic Similarity Score",
    "Results Match Score", "LLM Grading Score", "LLM Reasoning",
]
KQL_COLUMNS = DESIGN_000 + ["Prompt", "Generated Query", "Expected Query", "Execution Error", "Pass Blocker",
                            "Position", "External ID", "Item ID", "Score ID",
                            # the human verdict beside the machine one (assay.scoring.trust.review)
                            "human_reviewer", "human_passed", "human_score", "human_comment", "human_reviewed_at",
                            "human_labels", "human_majority"]
HOSTILE_PROMPT = '=HYPERLINK("http://127.0.0.1/x","click")'


@pytest.fixture
def client(clean_db, monkeypatch):
    monkeypatch.setattr("assay.api.routes.batches.start_planner", lambda batch_id: None)
    with TestClient(make_app(), headers={"Authorization": f"Bearer {API_KEY}"}) as c:
        yield c


def upload(client, body: bytes) -> str:
    r = client.post("/api/v1/batches?suite=kql", content=body, headers={"Content-Type": "application/x-ndjson"})
    assert r.status_code == 202, r.text
    return r.json()["batch_id"]


@pytest.fixture
def scored(client):
    lines = EXAMPLES.read_text().splitlines()
    hostile = json.loads(lines[0]) | {"id": "hostile", "prompt": HOSTILE_PROMPT + "\x07 bell"}
    body = "\n".join(lines + [json.dumps(hostile)]).encode()
    batch_id = upload(client, body)
    with FakeAnthropic() as fake:
        score_in_process(batch_id, judge_runtime(fake.base_url))
    results = client.get(f"/api/v1/batches/{batch_id}/results").json()["results"]
    return batch_id, {r["position"]: r for r in results}


def test_json_report(client, scored):
    batch_id, results = scored
    r = client.get(f"/api/v1/batches/{batch_id}/report.json")
    assert r.status_code == 200 and r.headers["content-type"].startswith("application/json")
    assert f"batch-{batch_id}-report.json" in r.headers["content-disposition"]
    doc = r.json()
    assert doc["columns"] == KQL_COLUMNS
    assert doc["batch"]["batch_id"] == batch_id and doc["batch"]["status"] == "completed"
    assert doc["summary"]["counts"]["completed"] == 5 and doc["threshold"] == 0.9
    rows = {row["Position"]: row for row in doc["rows"]}
    assert sorted(rows) == [1, 2, 3, 4, 5]
    for pos, row in rows.items():
        assert list(row) == KQL_COLUMNS
        result = results[pos]
        assert row["Score Status"] == ("PASS" if result["passed"] else "FAIL")
        assert row["Total Score"] == pytest.approx(result["total_score"])
        assert row["LLM Grading Score"] == pytest.approx(result["components"]["llm_grading"]["score"])
        assert row["LLM Reasoning"] == result["components"]["llm_grading"]["details"]["reasoning"]
        assert row["Score ID"] == result["score_id"]
    assert rows[1]["Prompt"] == "Count traces by level in the last hour"
    assert rows[4]["Execution Error"]  # the example whose generated query did not run
    assert rows[5]["Prompt"].startswith("=HYPERLINK")  # JSON keeps text as it is


def test_csv_report(client, scored):
    batch_id, results = scored
    r = client.get(f"/api/v1/batches/{batch_id}/report.csv")
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/csv")
    rows = list(csv.DictReader(io.StringIO(r.text)))
    assert len(rows) == 5 and list(rows[0]) == KQL_COLUMNS
    assert {row["Score Status"] for row in rows} <= {"PASS", "FAIL"}
    assert rows[4]["Prompt"].startswith("'=HYPERLINK")  # not a formula when opened in a spreadsheet


def test_excel_report_has_a_summary_sheet_and_the_results(client, scored, tmp_path):
    batch_id, results = scored
    r = client.get(f"/api/v1/batches/{batch_id}/report.xlsx")
    assert r.status_code == 200
    assert r.headers["content-type"] == "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet"
    path = tmp_path / "r.xlsx"
    path.write_bytes(r.content)
    wb = load_workbook(path)
    assert wb.sheetnames == ["Summary", "Results"]
    summary = {row[0]: row[1] for row in wb["Summary"].iter_rows(values_only=True) if row and row[0]}
    passed = sum(1 for res in results.values() if res["passed"])
    assert summary["Batch"] == batch_id and summary["Suite"] == "kql" and summary["Items"] == 5
    assert summary["Passed"] == passed and summary["Pass Rate"] == pytest.approx(passed / 5)
    assert summary["Cost (USD)"] == pytest.approx(sum(res["cost_usd"] for res in results.values()))
    assert summary["Component"] == "Weight"  # the per-component table's header
    assert summary["llm_grading"] == 0.25
    sheet = wb["Results"]
    rows = list(sheet.iter_rows(values_only=True))
    assert list(rows[0]) == KQL_COLUMNS and len(rows) == 6
    by_pos = {row[KQL_COLUMNS.index("Position")]: dict(zip(KQL_COLUMNS, row)) for row in rows[1:]}
    assert by_pos[1]["Total Score"] == pytest.approx(results[1]["total_score"])
    assert by_pos[1]["Score Status"] in ("PASS", "FAIL")
    hostile = next(c for c in sheet[6] if isinstance(c.value, str) and c.value.startswith("=HYPERLINK"))
    assert hostile.data_type == "s"  # stored as text, never a formula
    assert "\x07" not in hostile.value  # XML cannot hold it: dropped


def test_every_export_of_a_jury_batch_answers_and_the_summary_names_the_members_models(client, tmp_path):
    """A jury makes no judge call of its own (its members do): the Excel summary names its members'
    models instead of failing on it, and so does every other export of the batch."""
    members = [{"provider": "anthropic", "model": "claude-sonnet-5-5"}, {"provider": "anthropic", "model": "claude-haiku-5-5"}]
    suite = {
        "name": "report_jury",
        "kind": "generic",
        "threshold": 0.5,
        "components": {
            "exact": {"weight": 0.5, "metric": "exact_match", "version": 1},
            "panel": {"weight": 0.5, "judge": {"rubric": "Is it right?", "verdict": {"type": "score"}, "aggregate": "mean", "judges": members}},
        },
    }
    r = client.post("/api/v1/suites", content=json.dumps(suite), headers={"Content-Type": "application/json"})
    assert r.status_code == 201, r.text
    items = "".join(json.dumps({"id": str(i), "input": f"q{i}", "output": "a", "expected": "a"}) + "\n" for i in range(2))
    r = client.post("/api/v1/batches?suite=report_jury", content=items, headers={"Content-Type": "application/x-ndjson"})
    assert r.status_code == 202, r.text
    batch_id = r.json()["batch_id"]
    with FakeAnthropic() as fake:
        score_in_process(batch_id, judge_runtime(fake.base_url))
    for url in (*(f"results?format={f}" for f in ("json", "jsonl", "csv")), "report.json", "report.csv", "report.xlsx"):
        r = client.get(f"/api/v1/batches/{batch_id}/{url}")
        assert r.status_code == 200, f"{url}: {r.text}"
    path = tmp_path / "jury.xlsx"
    path.write_bytes(r.content)
    summary = {row[0]: row[1:] for row in load_workbook(path)["Summary"].iter_rows(values_only=True) if row and row[0]}
    assert summary["panel"][0] == 0.5 and summary["panel"][6] == "anthropic/claude-sonnet-5-5, anthropic/claude-haiku-5-5"
    assert summary["exact"][0] == 0.5 and not any(summary["exact"][6:])  # a metric: no judge


def test_reports_need_credentials_and_a_batch(client, scored):
    batch_id, _ = scored
    for fmt in ("json", "csv", "xlsx"):
        assert client.get(f"/api/v1/batches/{batch_id}/report.{fmt}", headers={"Authorization": ""}).status_code == 401
        missing = client.get(f"/api/v1/batches/00000000-0000-0000-0000-000000000000/report.{fmt}")
        assert missing.status_code == 404 and missing.json()["error"] == "not_found"
    assert client.get(f"/api/v1/batches/{batch_id}/report.pdf").status_code in (404, 422)


def test_big_batch_is_streamed_in_chunks(client, tmp_path):
    """More rows than one fetch chunk (1000) and a multiple of the JSON chunk (200): every row once."""
    line = EXAMPLES.read_text().splitlines()[0]
    n = 2400
    items = [json.loads(line) | {"id": f"q{i}"} for i in range(n)]
    batch_id = upload(client, "\n".join(json.dumps(i) for i in items).encode())
    with client.stream("GET", f"/api/v1/batches/{batch_id}/report.json") as r:
        chunks = [c for c in r.iter_bytes()]
    assert len(chunks) > 3  # streamed, not one body
    doc = json.loads(b"".join(chunks))
    assert [row["Position"] for row in doc["rows"]] == list(range(1, n + 1))
    assert {row["Score Status"] for row in doc["rows"]} == {"PENDING"}
    text = client.get(f"/api/v1/batches/{batch_id}/report.csv").text
    assert len(text.strip().splitlines()) == n + 1
    path = tmp_path / "big.xlsx"
    path.write_bytes(client.get(f"/api/v1/batches/{batch_id}/report.xlsx").content)
    wb = load_workbook(path, read_only=True)
    assert sum(1 for _ in wb["Results"].iter_rows()) == n + 1
    wb.close()


def test_each_kind_names_its_columns(client):
    """Another kind's batch report has that kind's columns (the alert-session suite, when present)."""
    from assay.scoring.kinds import get_kind, known_kinds

    if "alert_session" not in known_kinds():
        pytest.skip("the alert_session kind (issue 5) is not in this tree yet")
    import importlib

    kind = get_kind("alert_session")
    declared = getattr(kind, "report_columns", None) or getattr(
        importlib.import_module(kind.report_row.__module__), "REPORT_COLUMNS", None
    )
    session = {
        "session_id": "report-s1", "status": "completed", "alert_data": {"pod": "web-1"},
        "conversation": [{"type": "message", "role": "user", "content": "Alert: web-1 restarts."}],
        "final_analysis": "OOMKilled.", "available_tools": ["pods_get"],
    }
    r = client.post("/api/v1/batches?suite=alert_session", content=json.dumps(session).encode() + b"\n",
                    headers={"Content-Type": "application/x-ndjson"})
    assert r.status_code == 202, r.text
    batch_id = r.json()["batch_id"]
    with FakeAnthropic() as fake:
        score_in_process(batch_id, judge_runtime(fake.base_url))
    doc = client.get(f"/api/v1/batches/{batch_id}/report.json").json()
    ids = ["Position", "External ID", "Item ID", "Score ID"]
    human = list(HUMAN_COLUMNS)
    if declared:
        assert doc["columns"] == [*declared, *ids, *human]
    else:  # learnt from the first row
        assert doc["columns"][-11:] == [*ids, *human] and len(doc["columns"]) > 11
    assert len(doc["rows"]) == 1 and list(doc["rows"][0]) == doc["columns"]
    assert doc["rows"][0]["External ID"] == "report-s1"
    assert "Total Score" in doc["columns"] and "Score ID" in doc["columns"]
