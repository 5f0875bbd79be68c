"""``--by metadata.KEY`` as a user runs it: ``assay status``, ``compare`` and ``labels agreement`` in
subprocesses against a live API, on the designed data of tests/scoring/test_slices.py."""

from __future__ import annotations

import os

import pytest
from sqlalchemy import select

from tests.cli.test_cli import assay
from tests.conftest import API_KEY, REPO, worker_env
from tests.dashboard.support import api_process
from tests.scoring.test_slices import seed_two_runs


@pytest.fixture
def api_server(clean_db):
    with api_process() as url:
        yield url


def _lines(text: str) -> list[str]:
    return [" ".join(line.replace("│", " ").split()) for line in text.splitlines()]


def test_status_compare_and_agreement_by_a_metadata_key(api_server):
    from assay.scoring.store.db import transaction
    from assay.scoring.store.models import Label, Score

    with transaction() as session:
        a, b = seed_two_runs(session)
        for item_id in session.scalars(select(Score.item_id).where(Score.batch_id == b)):
            session.add(Label(suite_name="support", item_id=item_id, annotator="a", written_by="a", passed=True, source="upload"))
    env = worker_env({"ASSAY_API_URL": api_server, "ASSAY_API_KEY": API_KEY, "COLUMNS": "250"})

    status = assay("status", str(b), "--by", "metadata.product", env=env)
    assert status.returncode == 0, status.stderr
    lines = _lines(status.stdout)
    for expected in [
        "billing 12 12 12 0 100.0% 0.900 0.900 0.800",
        "shipping 12 12 0 0 0.0% 0.400 0.400 0.800",
        "returns small 3 3 3 0 100.0% 0.900",
        "(no value) small 2 2 2 0 100.0% 0.900",
    ]:
        assert any(line.startswith(expected) for line in lines), (expected, status.stdout)

    compared = assay("compare", str(a), str(b), "--by", "metadata.product", env=env)
    assert compared.returncode == 0, compared.stderr
    lines = _lines(compared.stdout)
    assert any(line.startswith("billing 12 0.900 → 0.900 +0.000 [+0.000, +0.000]") for line in lines), compared.stdout
    assert any(
        line.startswith("shipping 12 0.900 → 0.400 -0.500 [-0.500, -0.500]") and line.endswith("12 / 0 · p = 0.0004883")
        for line in lines
    ), compared.stdout

    agreed = assay("labels", "agreement", "--suite", "support", "--by", "metadata.product", env=env)
    assert agreed.returncode == 0, agreed.stderr
    lines = _lines(agreed.stdout)
    assert "component correctness compared 29 accuracy 0.586" in " | ".join(lines), agreed.stdout
    assert "slice shipping" in lines
    assert any(line.startswith("slice returns [small: fewer than 10 items") for line in lines), agreed.stdout

    refused = assay("status", str(b), "--by", "product", env=env)
    assert refused.returncode != 0
    assert "slice by metadata.KEY" in refused.stderr


def test_run_embedded_prints_the_summary_per_slice(tmp_path):
    """The laptop loop: `assay run --by` on SQLite, no API (the example's judge is skipped without a
    key, so its metrics alone score the items, renormalised)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ASSAY_", "ANTHROPIC_"))} | {"PYTHONPATH": str(REPO)}
    example = REPO / "examples" / "generic"
    result = assay(
        "run", str(example / "correctness.jsonl"), "--suite", str(example / "correctness.yaml"), "--by", "metadata.product",
        "--db", str(tmp_path / "e.db"), "--out", str(tmp_path / "out.jsonl"), "--no-live", env=env | {"COLUMNS": "250"}, cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr
    lines = _lines(result.stdout)
    assert any(line.startswith("by metadata.product (small: fewer than 10 scored items)") for line in lines), result.stdout
    assert any(line.startswith("billing small 2 2 1 0 50.0% 0.718 0.850 – 0.500 0.804") for line in lines), result.stdout
    assert any(line.startswith("shipping small 1 1 0 0 0.0% 0.166 0.388 – 0.000 0.111") for line in lines), result.stdout

    refused = assay("run", str(example / "correctness.jsonl"), "--suite", "x", "--by", "product", env=env, cwd=tmp_path)
    assert refused.returncode == 2 and "--by: by='product': slice by metadata.KEY" in refused.stderr
    assert not (tmp_path / ".assay").exists()  # refused before anything was written
