"""Issue 19.8: a recovered item is scored on the code the model ended with (its last recovery
attempt); the recovery component still scores how it got there. Issue 19.9 (invariant 7): an item
whose correctness cannot be established does not pass, whatever its total."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys

import pytest

from assay.scoring.kinds import get_kind
from assay.scoring.kinds.pandas_codegen import (
    PandasItem,
    code_quality,
    correctness,
    performance,
)
from tests.scoring.pandas.scoring import CTX, REPO, score_item
from tests.scoring.pandas.validity_cases import SHOP

QUESTION = "What is the total amount of the shipped orders?"
REFERENCE = "result = orders[orders['status'] == 'shipped']['amount'].sum()"
KEY_ERROR = "result = orders[orders['state'] == 'shipped']['amount'].sum()"
FIXED = "result = orders.loc[orders['status'].eq('shipped'), 'amount'].sum()"


def recovered(*attempts: str, generated: str = KEY_ERROR, **fields) -> dict:
    return {"question": QUESTION, "frames": SHOP, "generated_code": generated, "reference_code": REFERENCE,
            "recovery_attempts": [{"code": code} for code in attempts], **fields}


def test_a_recovered_item_is_scored_on_its_last_attempt():
    scored = score_item(recovered("result = orders[orders.State == 'shipped'].amount.sum()", FIXED))
    for name in ("correctness", "code_quality", "performance", "prompt_understanding", "requirement_coverage"):
        component = scored.components[name]
        assert component.details["code_scored"] == "recovery attempt 2, the last", (name, component.details)
    assert scored.score("correctness") == 1.0 and scored.components["correctness"].details["executed"] is True
    assert scored.score("performance") > 0 and scored.score("prompt_understanding") == pytest.approx(1.0)
    recovery = scored.components["error_recovery"].details
    assert recovery["error_type"] == "column_error" and recovery["recovery_attempts_count"] == 2
    assert [row["success"] for row in recovery["recovery_details"]] == [False, True]
    assert scored.passed, {n: c.score for n, c in scored.components.items()}


def test_a_syntax_error_fixed_is_understood_on_the_fixed_code():
    scored = score_item(recovered("result = orders.query(\"status == 'shipped'\").amount.sum()",
                                  generated="result = orders.query(\"status == 'shipped'\"].amount.sum()"))
    assert scored.score("code_quality") > 0.9 and scored.score("prompt_understanding") == pytest.approx(1.0)
    assert scored.passed


def test_a_wrong_last_attempt_is_wrong():
    scored = score_item(recovered("result = orders['amount'].sum()"))
    assert scored.score("correctness") < 1.0 and not scored.passed
    still_failing = score_item(recovered("result = orders[orders['State'] == 'shipped']['amount'].sum()"))
    assert still_failing.score("correctness") == 0.0 and still_failing.score("performance") == 0.0
    assert still_failing.components["correctness"].details["code_scored"] == "recovery attempt 1, the last"
    assert not still_failing.passed


def test_an_item_without_attempts_scores_its_generated_code():
    item = PandasItem.model_validate({"question": QUESTION, "frames": SHOP, "generated_code": REFERENCE, "reference_code": REFERENCE})
    for factory in (correctness, code_quality, performance):
        assert factory()(item, CTX).details["code_scored"] == "the generated code"


def test_no_truth_no_pass_but_the_total_shows_what_was_measured():
    raw = {"question": QUESTION, "frames": SHOP, "generated_code": REFERENCE}
    scored = score_item(raw)
    assert scored.components["correctness"].status == "skipped"
    assert scored.total == pytest.approx(1.0) and not scored.passed
    assert scored.blockers == ("correctness: could not be established: the item has neither reference code nor an expected result",)
    for truth in ({"expected_result": 2875.0}, {"reference_code": REFERENCE}):
        checked = score_item({**raw, **truth})
        assert checked.passed and checked.blockers == () and checked.components["correctness"].pass_blocker is None


def test_assay_run_stores_the_blocker_and_passes_the_recovered_item(tmp_path):
    items = tmp_path / "items.jsonl"
    unchecked = {"id": "unchecked", "question": QUESTION, "frames": SHOP, "generated_code": REFERENCE}
    items.write_text(json.dumps(unchecked) + "\n" + json.dumps({"id": "recovered", **recovered(FIXED)}) + "\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ASSAY_", "ANTHROPIC_"))} | {"PYTHONPATH": str(REPO)}
    result = subprocess.run(
        [sys.executable, "-m", "assay.cli", "run", str(items), "--suite", "pandas_codegen", "--db", str(tmp_path / "e.db"), "--no-live"],
        env=env, cwd=tmp_path, capture_output=True, text=True, timeout=240, check=False,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    with sqlite3.connect(tmp_path / "e.db") as conn:
        rows = {
            external_id: (status, total, passed, message)
            for external_id, status, total, passed, message in conn.execute(
                "SELECT i.external_id, s.status, s.total, s.passed, s.error_message FROM scores s JOIN items i ON i.id = s.item_id"
            )
        }
    status, total, passed, message = rows["unchecked"]
    assert status == "completed" and total > 0.85 and not passed
    assert message == "correctness: could not be established: the item has neither reference code nor an expected result"
    status, total, passed, message = rows["recovered"]
    assert status == "completed" and passed and message is None


def test_the_judge_reviews_the_final_code():
    item = PandasItem.model_validate(recovered(FIXED))
    inputs = get_kind("pandas_codegen").judge_inputs(item)
    assert inputs["GENERATED_CODE"] == FIXED


def test_without_a_sandbox_correctness_fails_and_so_does_the_score():
    from assay.scoring.pandas.execution import clear_caches
    from assay.scoring.sandbox import SandboxClient, sandbox_client, set_sandbox_client

    working = sandbox_client()
    broken = SandboxClient(required=("a_layer_no_machine_has",))  # fails closed: the sandbox is unavailable
    set_sandbox_client(broken)
    clear_caches()
    try:
        scored = score_item(recovered(FIXED))
    finally:
        set_sandbox_client(working)
        broken.close()
    correctness = scored.components["correctness"]
    assert correctness.status == "failed" and "the sandbox could not run the code" in correctness.reason
    assert scored.total is None and not scored.passed
