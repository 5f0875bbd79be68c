"""``assay suite list``, ``assay suite show`` and ``assay diff --versions`` as a user runs them: on the
embedded store (--db) and through the API (--api-url), the same service answering both."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml
from sqlalchemy.orm import Session

from tests.cli.test_suite_cli import assay, plain_env
from tests.conftest import API_KEY, REPO
from tests.dashboard.support import api_process

RUBRIC_V1 = "Is the answer correct?\nJudge the facts only."
RUBRIC_V2 = "Is the answer correct?\nJudge the facts and the tone."


def suite(weight: float, rubric: str) -> dict[str, Any]:
    """A generic suite whose second version moves weight 0.1 → 0.05 and edits the rubric."""
    return {
        "name": "support_bot",
        "kind": "generic",
        "threshold": 0.5,
        "components": {
            "correctness": {"weight": round(1 - weight, 6), "judge": {"rubric": rubric, "verdict": {"type": "score"}}},
            "close": {"weight": weight, "metric": "levenshtein_ratio", "version": 1, "args": {"reference": {"from": "expected"}}},
        },
    }


def write(path: Path, weight: float, rubric: str) -> Path:
    path.write_text(yaml.safe_dump(suite(weight, rubric), sort_keys=False))
    return path


def test_suite_list_and_show_read_the_embedded_store(tmp_path):
    from assay.scoring.store.db import make_engine, migrate
    from assay.scoring.store.models import Batch
    from assay.scoring.suites.criteria import load_suite_file, register_suite

    db = tmp_path / "embedded.db"
    migrate(f"sqlite:///{db}")
    engine = make_engine(f"sqlite:///{db}")
    first = load_suite_file(write(tmp_path / "v1.yaml", 0.1, RUBRIC_V1), REPO / "config")
    second = load_suite_file(write(tmp_path / "v2.yaml", 0.05, RUBRIC_V2), REPO / "config")
    with Session(engine) as session, session.begin():
        register_suite(session, first, origin="path")
        session.add(Batch(suite_name="support_bot", criteria_hash=first.criteria_hash, created_by="test", status="completed"))
        session.flush()
        register_suite(session, second, origin="path")
    engine.dispose()
    env = plain_env()
    listed = assay("suite", "list", "--db", str(db), env=env, cwd=tmp_path)
    assert listed.returncode == 0, listed.stderr
    assert "support_bot" in listed.stdout and second.criteria_hash in listed.stdout
    shown = assay("suite", "show", "support_bot", "--db", str(db), "--json", env=env, cwd=tmp_path)
    assert shown.returncode == 0, shown.stderr
    versions = json.loads(shown.stdout)["versions"]
    assert [(v["version"], v["criteria_hash"], v["batches"], v["current"]) for v in versions] == [
        (1, first.criteria_hash, 1, False),
        (2, second.criteria_hash, 0, True),
    ]
    one = assay("suite", "show", "support_bot", "--version", "1", "--db", str(db), "--json", env=env, cwd=tmp_path)
    assert json.loads(one.stdout)["criteria"]["components"]["close"]["weight"] == 0.1
    table = assay("suite", "show", "support_bot", "--db", str(db), env=env, cwd=tmp_path)
    assert table.returncode == 0 and first.criteria_hash in table.stdout and "yes" in table.stdout
    missing = assay("suite", "show", "support_bot", "--version", "3", "--db", str(db), env=env, cwd=tmp_path)
    assert missing.returncode == 2 and "has no version 3; it has 2" in " ".join(missing.stderr.split())
    unknown = assay("suite", "show", "nope", "--db", str(db), env=env, cwd=tmp_path)
    assert unknown.returncode == 2 and "no suite named 'nope'" in unknown.stderr


def _score_both(name: str, old_hash: str, new_hash: str) -> None:
    """Two items scored under each hash: q1 0.8 → 0.6, q2 0.4 → 0.6 (a fail→pass flip)."""
    from assay.scoring.store.db import transaction
    from assay.scoring.store.models import Item, Score

    with transaction() as session:
        for external_id, old_total, new_total in (("q1", 0.8, 0.6), ("q2", 0.4, 0.6)):
            item = Item(kind="generic", external_id=external_id, payload={}, content_hash=external_id * 32)
            session.add(item)
            session.flush()
            for criteria_hash, total in ((old_hash, old_total), (new_hash, new_total)):
                session.add(
                    Score(
                        item_id=item.id, suite_name=name, criteria_hash=criteria_hash, status="completed", total=total,
                        passed=total >= 0.5, cost_usd=0.0, components_total=0, components_landed=0, triggered_by="test",
                    )
                )


def test_diff_by_versions_shows_the_criteria_change_beside_the_scores(clean_db, tmp_path):
    with api_process() as url:
        env = plain_env(ASSAY_API_URL=url, ASSAY_API_KEY=API_KEY)
        hashes = []
        for weight, rubric in ((0.1, RUBRIC_V1), (0.05, RUBRIC_V2)):
            pushed = assay("suite", "push", str(write(tmp_path / "s.yaml", weight, rubric)), env=env, cwd=tmp_path)
            assert pushed.returncode == 0, pushed.stderr
            hashes.append(pushed.stdout.strip())
        shown = json.loads(assay("suite", "show", "support_bot", "--json", env=env, cwd=tmp_path).stdout)
        assert [v["criteria_hash"] for v in shown["versions"]] == hashes and shown["versions"][1]["current"]
        _score_both("support_bot", *hashes)
        result = assay("diff", "--suite", "support_bot", "--versions", "1", "2", env=env, cwd=tmp_path)
        assert result.returncode == 0, result.stderr
        text = result.stdout
        assert "close.weight 0.1 → 0.05" in text and "correctness.weight 0.9 → 0.95" in text
        assert "-Judge the facts only." in text and "+Judge the facts and the tone." in text
        assert "items compared" in text and "2" in text
        as_json = json.loads(assay("diff", "--suite", "support_bot", "--versions", "1", "2", "--json", env=env, cwd=tmp_path).stdout)
        change = as_json["criteria_change"]
        assert change["changed"] and change["components_added"] == [] and change["threshold"] is None
        close = next(c for c in change["components"] if c["component"] == "close")
        assert close["changes"] == [{"what": "weight", "from": 0.1, "to": 0.05}]
        assert (as_json["from_hash"], as_json["to_hash"]) == tuple(hashes)
        bad = assay("diff", "--suite", "support_bot", "--versions", "1", "3", env=env, cwd=tmp_path)
        assert bad.returncode == 2 and "has no version 3" in bad.stderr
        both = assay("diff", "--suite", "support_bot", "--versions", "1", "2", "--from", hashes[0], env=env, cwd=tmp_path)
        assert both.returncode == 2 and "--versions A B, or --from H1 --to H2" in both.stderr
        over = assay("diff", "--suite", "support_bot", "--versions", "1", "2", "--limit", "101", env=env, cwd=tmp_path)
        assert over.returncode == 2
