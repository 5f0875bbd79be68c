"""A jury of an Anthropic, an OpenAI and a local judge, scored embedded (``assay run --db``) against the
loopback fakes, each scripted per model name: the known answers of docs/juries.md. One member always
disagrees: the jury gives the majority, and ``assay jury agreement`` gives the alpha the
``krippendorff`` library computes on the same matrix. A member that fails leaves the jury landed when
the quorum holds, and skipped with the reason when it does not."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys

import krippendorff
import pytest
import yaml
from openpyxl import load_workbook

from tests.cli.test_run_embedded import embedded_env
from tests.fakes.configs import local_config_dir
from tests.fakes.openai_server import FakeOpenAI

MEMBERS = ["claude-haiku-5-5", "gpt-5-mini", "contrarian"]
ITEMS = [{"id": f"q{n}", "input": f"What is {n} plus {n}?", "output": f"{2 * n}", "expected": f"{2 * n}"} for n in range(4)]


def jury_suite(min_members: int = 2) -> dict:
    return {
        "name": "jury_demo",
        "kind": "generic",
        "threshold": 0.5,
        "components": {
            "correctness": {
                "weight": 1.0,
                "judge": {
                    "rubric": "Is the answer to the arithmetic question correct?",
                    "verdict": {"type": "pass_fail"},
                    "max_tokens": 256,
                    "judges": [
                        {"provider": "anthropic", "model": "claude-haiku-5-5"},
                        {"provider": "openai", "model": "gpt-5-mini"},
                        {"provider": "local", "model": "contrarian"},
                    ],
                    "aggregate": "majority",
                    "min_members": min_members,
                },
            }
        },
    }


@pytest.fixture
def fake_openai():
    with FakeOpenAI() as fake:
        yield fake


@pytest.fixture
def setup(tmp_path, fake_judge, fake_openai):
    config = local_config_dir(tmp_path, base_url=fake_openai.api_base)
    env = embedded_env(
        ASSAY_CONFIG_DIR=str(config),
        ANTHROPIC_API_KEY="test-key",
        ANTHROPIC_BASE_URL=fake_judge.base_url,
        OPENAI_API_KEY="test-key",
        OPENAI_BASE_URL=fake_openai.api_base,
    )
    items = tmp_path / "items.jsonl"
    items.write_text("".join(json.dumps(item) + "\n" for item in ITEMS))
    fake_judge.configure(model_answers={"claude-haiku-5-5": {"passed": True}})
    return env, items


def run(tmp_path, env, items, suite: dict) -> str:
    path = tmp_path / "jury_demo.yaml"
    path.write_text(yaml.safe_dump(suite, sort_keys=False))
    done = subprocess.run(
        [sys.executable, "-m", "assay.cli", "run", str(items), "--suite", str(path), "--db", str(tmp_path / "e.db"), "--no-live"],
        env=env, capture_output=True, text=True, timeout=240,
    )
    assert done.returncode == 0, done.stderr + done.stdout
    return str(tmp_path / "e.db")


def rows(db: str) -> dict[str, list[tuple]]:
    with sqlite3.connect(db) as con:
        found: dict[str, list[tuple]] = {}
        for component, status, score, details, reason, cost in con.execute(
            "SELECT component, status, score, details, reason, cost_usd FROM score_components ORDER BY score_id"
        ):
            found.setdefault(component, []).append((status, score, json.loads(details) if details else None, reason, cost))
        return found


def test_a_jury_with_a_contrarian_gives_the_majority_and_the_librarys_alpha(tmp_path, setup, fake_judge, fake_openai):
    env, items = setup
    fake_openai.configure(model_answers={"gpt-5-mini": {"passed": True}, "contrarian": {"passed": False}})
    db = run(tmp_path, env, items, jury_suite())

    found = rows(db)
    # Every member judged every item once, each through its own provider.
    assert fake_judge.calls()["total"] == len(ITEMS)
    assert sorted(c["model"] for c in fake_openai.calls()["calls"]) == sorted(["gpt-5-mini", "contrarian"] * len(ITEMS))
    for status, score, details, _, _ in found["correctness"]:
        assert status == "ok" and score == 1.0 and details["passed"] is True
        assert details["jury"]["votes"] == {"true": 2.0, "false": 1.0}
        members = details["jury"]["members"]
        assert members["contrarian"]["verdict"] is False and members["contrarian"]["reasoning"]
        assert members["gpt-5-mini"]["verdict"] is True and members["claude-haiku-5-5"]["cost_usd"] > 0
    # Each member's own row keeps its verdict, reasoning and cost (the local judge is priced zero).
    for member in MEMBERS:
        member_rows = found[f"correctness@{member}"]
        assert len(member_rows) == len(ITEMS) and all(r[0] == "ok" and r[2]["reasoning"] for r in member_rows)
    assert all(r[4] > 0 for r in found["correctness@claude-haiku-5-5"])
    assert all(r[4] == 0 for r in found["correctness@contrarian"])

    done = subprocess.run(
        [sys.executable, "-m", "assay.cli", "jury", "agreement", "--suite", "jury_demo", "--db", db, "--json"],
        env=env, capture_output=True, text=True, timeout=120,
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)["hashes"][0]["components"]["correctness"]
    assert report["level"] == "nominal" and report["items"] == len(ITEMS)
    # The same matrix handed to the library: members x items, pass = 1, fail = 0.
    matrix = [[1] * len(ITEMS), [1] * len(ITEMS), [0] * len(ITEMS)]
    expected = krippendorff.alpha(reliability_data=matrix, level_of_measurement="nominal", value_domain=[0, 1])
    assert report["alpha"] == pytest.approx(expected) and report["alpha"] < 0
    pairs = {(p["a"], p["b"]): p for p in report["pairs"]}
    assert pairs[("claude-haiku-5-5", "gpt-5-mini")]["equal"] == 1.0
    assert pairs[("claude-haiku-5-5", "contrarian")]["equal"] == 0.0

    text = subprocess.run(
        [sys.executable, "-m", "assay.cli", "jury", "agreement", "--suite", "jury_demo", "--db", db],
        env=env, capture_output=True, text=True, timeout=120,
    )
    assert text.returncode == 0 and "Krippendorff's alpha (nominal)" in text.stdout
    assert "pair claude-haiku-5-5 / contrarian: 4 item(s), equal 0.000" in text.stdout

    # The Excel export names the jury's judges: its members' models (a jury makes no call of its own).
    batch = json.loads((tmp_path / "items.jsonl.results.jsonl").read_text().splitlines()[0])["batch_id"]
    exported = subprocess.run(
        [sys.executable, "-m", "assay.cli", "results", batch, "--format", "xlsx", "-o", str(tmp_path / "r.xlsx"), "--db", db],
        env=env, capture_output=True, text=True, timeout=120,
    )
    assert exported.returncode == 0, exported.stderr
    summary = {r[0]: r for r in load_workbook(tmp_path / "r.xlsx")["Summary"].iter_rows(values_only=True) if r and r[0]}
    assert summary["correctness"][7] == "anthropic/claude-haiku-5-5, openai/gpt-5-mini, local/contrarian"


@pytest.mark.parametrize(("quorum", "landed"), [(2, True), (3, False)])
def test_a_failing_member_leaves_the_jury_landed_only_while_the_quorum_holds(tmp_path, setup, fake_openai, quorum, landed):
    env, items = setup
    # The local judge answers nothing usable: its rows fail after one repair; the two others pass.
    fake_openai.configure(model_answers={"gpt-5-mini": {"passed": True}}, model_kinds={"contrarian": "malformed"})
    db = run(tmp_path, env, items, jury_suite(min_members=quorum))

    found = rows(db)
    assert all(r[0] == "failed" and "unusable answer" in r[3] for r in found["correctness@contrarian"])
    with sqlite3.connect(db) as con:
        scores = con.execute("SELECT status, total, passed, error_message FROM scores").fetchall()
    if landed:
        assert all(r[0] == "ok" and r[1] == 1.0 and r[2]["jury"]["answered"] == 2 for r in found["correctness"])
        assert all(s[0] == "completed" and s[1] == 1.0 and s[2] for s in scores)
    else:
        for status, score, details, reason, _ in found["correctness"]:
            assert status == "skipped" and score is None
            assert reason.startswith("jury: 2 of 3 members answered, fewer than min_members 3 (contrarian: failed")
        # Its only component skipped: nothing was scored, and the score says why (never a made-up number).
        assert all(s[0] == "failed" and s[1] is None and "jury: 2 of 3 members answered" in s[3] for s in scores)
