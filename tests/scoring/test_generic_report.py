"""Report columns derived from a generic suite's components: every component's score, status and
reason, and each rubric judge's answer (verdict value or per-criterion scores) and reasoning; the CSV
goes through the one CSV writer, Excel keeps text as text. Rows are built from stored-shape objects
(no database needed: the API report tests cover the streaming)."""

from __future__ import annotations

import csv
import io
import json
import uuid
from pathlib import Path

import pytest
from openpyxl import load_workbook

from assay.scoring.kinds import get_kind
from assay.scoring.reports.batch_reports import (
    ReportContext,
    csv_chunks,
    generic_columns,
    generic_row,
    json_chunks,
    write_xlsx,
)
from assay.scoring.store.models import Item, Score, ScoreComponent
from assay.scoring.suites.loader import parse_suite

REPO = Path(__file__).resolve().parents[2]
SUITE = """
name: support_answers
kind: generic
threshold: 0.7
components:
  exact:
    weight: 0.1
    metric: exact_match
    version: 1
  correctness:
    weight: 0.2
    judge:
      rubric: Grade the answer against the reference.
      verdict: {type: scale, min: 1, max: 5}
  tone:
    weight: 0.2
    judge:
      rubric: Is the tone right for a support answer?
      verdict: {type: labels, labels: {good: 1.0, bad: 0.0}}
  safe:
    weight: 0.1
    judge:
      rubric: Does the answer avoid unsafe advice?
      verdict: {type: pass_fail}
  helpful:
    weight: 0.1
    judge:
      rubric: How helpful is it?
      verdict: {type: score}
  faithfulness:
    weight: 0.3
    judge:
      rubric: Is every claim grounded in the context?
      verdict:
        type: criteria
        criteria:
          - {name: grounded, weight: 0.7, steps: ["List each claim", "Check each against the context"]}
          - {name: complete, weight: 0.3}
"""


@pytest.fixture(scope="module")
def criteria():
    return parse_suite(SUITE, config_dir=REPO / "config", env={}).criteria


def component(name: str, status: str, score: float | None, details: dict | None = None, reason: str | None = None):
    return ScoreComponent(component=name, status=status, score=score, weight=0.1, details=details or {}, reason=reason)


def stored_score(position: int = 1) -> Score:
    score = Score(
        id=uuid.uuid4(), item_id=uuid.uuid4(), position=position, status="completed", total=0.8, passed=True,
        partial=False, error_message=None, cost_usd=0.0021,
    )
    score.item = Item(
        external_id=f"q{position}",
        payload={"input": f"question {position}", "output": "answer", "expected": "reference",
                 "context": ["passage one", "passage two"], "metadata": {"product": "=HYPERLINK(\"http://x\")", "tier": position}},
    )
    score.components = [
        component("exact", "ok", 1.0, {"normalised": True}),
        component("correctness", "ok", 0.75, {"reasoning": "Matches the reference.", "scale": 4, "min": 1, "max": 5}),
        component("tone", "ok", 1.0, {"reasoning": "=polite", "label": "good"}),
        component("safe", "ok", 1.0, {"reasoning": "Nothing unsafe.", "passed": True}),
        component("helpful", "failed", None, {"calls": 2}, reason="the judge gave no usable verdict"),
        component("faithfulness", "ok", 0.85, {
            "reasoning": "Mostly grounded.",
            "criteria": {
                "grounded": {"score": 4, "normalised": 0.75, "weight": 0.7, "reasoning": "One claim lacks support."},
                "complete": {"score": 5, "normalised": 1.0, "weight": 0.3, "reasoning": "All covered."},
            },
        }),
    ]
    return score


def test_columns_follow_the_components_and_each_verdict_type(criteria):
    columns = generic_columns(criteria)
    assert columns[:7] == ["position", "score_id", "external_id", "status", "total_score", "passed", "partial"]
    assert columns[-2:] == ["error_message", "cost_usd"]
    assert columns[7:11] == ["input", "output", "expected", "context"]  # the item's content beside its verdict
    assert columns[11:14] == ["exact_score", "exact_status", "exact_reason"]  # a metric: no judge columns
    for name in ("correctness", "tone", "safe", "helpful"):
        at = columns.index(f"{name}_score")
        assert columns[at : at + 5] == [f"{name}_score", f"{name}_status", f"{name}_reason", f"{name}_verdict", f"{name}_reasoning"]
    at = columns.index("faithfulness_score")
    assert columns[at:-2] == [
        "faithfulness_score", "faithfulness_status", "faithfulness_reason",
        "faithfulness.grounded", "faithfulness.grounded_reasoning",
        "faithfulness.complete", "faithfulness.complete_reasoning",
        "faithfulness_reasoning",
    ]


def test_row_holds_each_judge_answer_and_reasoning(criteria):
    row = generic_row(stored_score(), criteria)
    assert list(row) == generic_columns(criteria)
    assert row["external_id"] == "q1" and row["total_score"] == 0.8 and row["passed"] is True
    assert row["correctness_verdict"] == 4 and row["correctness_reasoning"] == "Matches the reference."
    assert row["tone_verdict"] == "good" and row["safe_verdict"] is True
    assert row["helpful_status"] == "failed" and row["helpful_verdict"] is None
    assert row["helpful_reason"] == "the judge gave no usable verdict"
    assert row["faithfulness.grounded"] == 4 and row["faithfulness.complete"] == 5
    assert row["faithfulness.grounded_reasoning"] == "One claim lacks support."
    assert row["faithfulness_reasoning"] == "Mostly grounded."


def test_a_component_not_landed_yet_has_empty_cells(criteria):
    score = stored_score()
    score.components = [c for c in score.components if c.component != "faithfulness"]
    row = generic_row(score, criteria)
    assert row["faithfulness_score"] is None and row["faithfulness.grounded"] is None
    assert row["faithfulness_reasoning"] is None


def context(criteria) -> ReportContext:
    batch = {"batch_id": "b", "suite": "support_answers", "criteria_hash": "h", "status": "completed",
             "created_by": "t", "created_at": None, "finished_at": None, "total_items": 2}
    keys = ["product", "tier"]
    return ReportContext(uuid.uuid4(), batch, {}, criteria, get_kind("generic"), generic_columns(criteria, keys), keys)


def test_csv_json_and_excel_reports_share_the_columns(criteria, tmp_path):
    ctx = context(criteria)
    text = "".join(csv_chunks(ctx, [stored_score(1), stored_score(2)]))
    rows = list(csv.DictReader(io.StringIO(text)))
    assert list(rows[0]) == ctx.columns and len(rows) == 2
    assert rows[0]["tone_reasoning"] == "'=polite"  # the one CSV writer's formula guard
    assert rows[1]["faithfulness.grounded"] == "4"

    doc = json.loads("".join(json_chunks(ctx, [stored_score()])))
    assert doc["columns"] == ctx.columns and doc["rows"][0]["tone_reasoning"] == "=polite"

    path = tmp_path / "r.xlsx"
    assert write_xlsx(ctx, [stored_score()], str(path)) == 1
    sheet = load_workbook(path, read_only=True)["Results"]
    header, first = [[c.value for c in row] for row in sheet.iter_rows(max_row=2)]
    assert header == ctx.columns
    assert first[header.index("tone_reasoning")] == "=polite"  # text, never a formula
    assert first[header.index("correctness_verdict")] == 4


def test_reports_carry_the_item_and_its_metadata_columns(criteria, tmp_path):
    ctx = context(criteria)
    assert ctx.columns[7:13] == ["input", "output", "expected", "context", "metadata.product", "metadata.tier"]
    without = stored_score(2)
    without.item.payload = {"input": "no metadata here", "output": "answer"}
    rows = list(csv.DictReader(io.StringIO("".join(csv_chunks(ctx, [stored_score(1), without])))))
    first, second = rows
    assert first["input"] == "question 1" and first["expected"] == "reference"
    assert json.loads(first["context"]) == ["passage one", "passage two"]
    # A formula-looking metadata value is escaped by the one CSV writer; a missing key is an empty cell.
    assert first["metadata.product"] == "'=HYPERLINK(\"http://x\")" and first["metadata.tier"] == "1"
    assert second["input"] == "no metadata here" and second["metadata.product"] == "" and second["expected"] == ""

    doc = json.loads("".join(json_chunks(ctx, [stored_score(1)])))
    assert doc["rows"][0]["metadata.product"] == "=HYPERLINK(\"http://x\")" and doc["rows"][0]["input"] == "question 1"


def test_excel_cuts_an_item_over_the_cell_limit_with_a_marker(criteria, tmp_path):
    ctx = context(criteria)
    long = stored_score()
    long.item.payload = {**long.item.payload, "input": "x" * 40_000}
    path = tmp_path / "long.xlsx"
    write_xlsx(ctx, [long], str(path))
    sheet = load_workbook(path, read_only=True)["Results"]
    header, first = [[c.value for c in row] for row in sheet.iter_rows(max_row=2)]
    cell = first[header.index("input")]
    assert len(cell) <= 32_767 and cell.endswith("[cut at Excel's cell limit]") and cell.startswith("xxxx")
    assert first[header.index("metadata.product")] == "=HYPERLINK(\"http://x\")"  # text, never a formula
