"""Suites without a redeploy: POST /api/v1/suites and its neighbours, against the real store.

An API suite here is of kind ``kql`` with the shipped suite's deterministic components, so batches
under it need no judge; the planner is not started (no worker): scores are made complete by hand
where a test needs finished ones."""

from __future__ import annotations

import json
import shutil
import uuid
from typing import Any

import pytest
import yaml
from sqlalchemy import func, select, update

from assay.scoring.store.db import transaction
from assay.scoring.store.models import (
    CriteriaDefinition,
    Score,
    SuiteRecord,
    SuiteVersion,
)
from tests.conftest import REPO

YAML = {"Content-Type": "application/yaml"}
JSON = {"Content-Type": "application/json"}
ITEMS = [json.loads(line) for line in (REPO / "examples" / "kql_items.jsonl").read_text().splitlines()[:2]]


def suite_dict(name: str, **changes: Any) -> dict[str, Any]:
    """The shipped kql suite's schema and similarity metrics (versions as the code has them), no judge."""
    shipped = yaml.safe_load((REPO / "config" / "suites" / "kql.yaml").read_text())["components"]
    suite = {
        "name": name,
        "kind": "kql",
        "description": "registered through the API",
        "threshold": 0.5,
        "components": {
            "schema_match": {**shipped["schema_match"], "weight": 0.5},
            "semantic_similarity": {**shipped["semantic_similarity"], "weight": 0.5},
        },
    }
    return {**suite, **changes}


def with_similarity_args(suite: dict[str, Any], **args: Any) -> dict[str, Any]:
    similarity = suite["components"]["semantic_similarity"]
    similarity["args"] = {**similarity.get("args", {}), **args}
    return suite


def as_yaml(suite: dict[str, Any]) -> str:
    return yaml.safe_dump(suite, sort_keys=False)


def unique(prefix: str = "api") -> str:
    return f"{prefix}_{uuid.uuid4().hex[:8]}"


@pytest.fixture
def no_planner(monkeypatch):
    monkeypatch.setattr("assay.api.routes.batches.start_planner", lambda batch_id: None)


def post(client, suite: dict[str, Any] | str, headers=YAML):  # type: ignore[no-untyped-def]
    body = suite if isinstance(suite, str) else as_yaml(suite)
    return client.post("/api/v1/suites", content=body.encode(), headers=headers)


def upload(client, suite: str):  # type: ignore[no-untyped-def]
    body = "".join(json.dumps(i) + "\n" for i in ITEMS)
    return client.post(f"/api/v1/batches?suite={suite}", content=body, headers={"Content-Type": "application/x-ndjson"})


def complete_batch(batch_id: str) -> None:
    with transaction() as session:
        session.execute(
            update(Score).where(Score.batch_id == uuid.UUID(batch_id)).values(status="completed", total=0.8, passed=True)
        )


# --- registering and versions --------------------------------------------------------------------------


def test_a_new_suite_is_version_1_with_its_creator_and_takes_batches(api_client, no_planner):
    name = unique()
    r = post(api_client, suite_dict(name))
    assert r.status_code == 201, r.text
    out = r.json()
    assert r.headers["location"] == f"/api/v1/suites/{name}"
    assert out["created"] is True
    assert out["suite"] | {"updated_at": None} == {
        "name": name, "kind": "kql", "origin": "api", "state": "active",
        "current_criteria_hash": out["version"]["criteria_hash"], "description": "registered through the API",
        "created_by": "key:ci-tester", "owner": "key:ci-tester", "updated_at": None, "versions": 1, "shadowed_api_suite": False,
        "problem": None, "note": None,
    }
    assert out["version"]["version"] == 1 and out["version"]["created_by"] == "key:ci-tester" and out["version"]["current"]
    accepted = upload(api_client, name)
    assert accepted.status_code == 202, accepted.text
    assert accepted.json()["criteria_hash"] == out["version"]["criteria_hash"]


def test_the_same_suite_again_adds_no_version_and_a_changed_one_is_the_next(api_client):
    name = unique()
    first = post(api_client, suite_dict(name)).json()
    # Another layout and a comment: the same criteria and settings, so nothing new (200).
    again = post(api_client, "# resent\n" + json.dumps(suite_dict(name)))
    assert again.status_code == 200, again.text
    assert again.json()["created"] is False and again.json()["version"]["version"] == 1
    # A new description is a new version under the same criteria hash (settings are not hashed).
    described = post(api_client, suite_dict(name, description="clearer"))
    assert described.status_code == 201
    assert described.json()["version"]["version"] == 2
    assert described.json()["version"]["criteria_hash"] == first["version"]["criteria_hash"]
    # A new threshold is new criteria.
    stricter = post(api_client, suite_dict(name, threshold=0.9)).json()
    assert stricter["version"]["version"] == 3
    assert stricter["version"]["criteria_hash"] != first["version"]["criteria_hash"]
    assert stricter["suite"]["current_criteria_hash"] == stricter["version"]["criteria_hash"]

    shown = api_client.get(f"/api/v1/suites/{name}").json()
    assert [(v["version"], v["current"], v["created_by"]) for v in shown["version_list"]] == [
        (3, True, "key:ci-tester"), (2, False, "key:ci-tester"), (1, False, "key:ci-tester")
    ]
    assert shown["versions"] == 3
    one = api_client.get(f"/api/v1/suites/{name}/versions/2").json()
    assert yaml.safe_load(one["body"])["description"] == "clearer" and one["body_format"] == "yaml"
    assert api_client.get(f"/api/v1/suites/{name}/versions/4").status_code == 404


def test_json_and_yaml_bodies_resolve_to_the_same_criteria(api_client):
    name = unique()
    as_json = post(api_client, json.dumps(suite_dict(name)), headers=JSON)
    assert as_json.status_code == 201, as_json.text
    assert as_json.json()["version"]["body_format"] == "json"
    assert post(api_client, suite_dict(name)).json()["created"] is False  # the YAML of the same suite
    with transaction() as session:
        stored = session.get(CriteriaDefinition, as_json.json()["version"]["criteria_hash"])
        assert stored is not None and stored.criteria_content["threshold"] == 0.5


def test_a_version_may_not_change_the_kind(api_client):
    name = unique()
    post(api_client, suite_dict(name))
    pandas = yaml.safe_load((REPO / "config" / "suites" / "pandas_codegen.yaml").read_text())
    deterministic = {k: v for k, v in pandas["components"].items() if not v.get("judge")}
    share = 1 / len(deterministic)
    body = {
        "name": name, "kind": "pandas_codegen", "threshold": 0.5,
        "components": {k: {**v, "weight": share} for k, v in deterministic.items()},
    }
    r = post(api_client, body)
    assert r.status_code == 409, r.text
    assert "kind" in r.json()["message"]
    assert api_client.get(f"/api/v1/suites/{name}").json()["versions"] == 1


# --- files win ------------------------------------------------------------------------------------------


def test_a_file_suite_s_name_is_409_and_nothing_changes(api_client):
    before = api_client.get("/api/v1/suites/kql").json()
    r = post(api_client, suite_dict("kql"))
    assert r.status_code == 409, r.text
    assert "config/suites/kql.yaml" in r.json()["message"] and "files win" in r.json()["message"]
    assert api_client.get("/api/v1/suites/kql").json() == before
    for action in ("disable", "enable"):
        refused = api_client.post(f"/api/v1/suites/kql/{action}")
        assert refused.status_code == 409 and "in config/suites/kql.yaml" in refused.json()["message"]
    assert api_client.delete("/api/v1/suites/kql").status_code == 409


def test_a_suite_file_that_appears_later_takes_the_name_and_the_api_suite_is_shadowed(api_client, tmp_path, caplog):
    from assay.scoring.suites.criteria import register_all_suites

    name = unique()
    post(api_client, suite_dict(name))
    config = tmp_path / "config"
    (config / "suites").mkdir(parents=True)
    shutil.copy(REPO / "config" / "models.yaml", config / "models.yaml")
    (config / "suites" / f"{name}.yaml").write_text(as_yaml(suite_dict(name, threshold=0.7, description="the file")))
    with transaction() as session:
        hashes = register_all_suites(session, config)
    assert f"suite file {name}.yaml takes the name of the suite registered through the API" in caplog.text

    shown = api_client.get(f"/api/v1/suites/{name}").json()
    assert shown["origin"] == "file" and shown["current_criteria_hash"] == hashes[name]
    assert shown["description"] == "the file" and shown["shadowed_api_suite"] is True
    assert "files win" in shown["note"] and [v["current"] for v in shown["version_list"]] == [False]
    # The loader owns the name now: the API may not add versions to it.
    assert post(api_client, suite_dict(name, threshold=0.1)).status_code == 409


def test_the_loader_never_touches_an_api_suite(api_client):
    from assay.scoring.suites.criteria import register_all_suites
    from assay.settings import get_settings

    name = unique()
    out = post(api_client, suite_dict(name)).json()
    api_client.post(f"/api/v1/suites/{name}/disable")
    with transaction() as session:
        register_all_suites(session, get_settings().config_dir)
    shown = api_client.get(f"/api/v1/suites/{name}").json()
    assert (shown["origin"], shown["state"], shown["current_criteria_hash"]) == (
        "api", "disabled", out["version"]["criteria_hash"]
    )


# --- refused bodies -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "body, reason",
    [
        (lambda n: as_yaml(suite_dict(n, threshold="${ASSAY_THRESHOLD:-0.5}")), "${"),
        (lambda n: as_yaml(suite_dict(n, enabled=False)), "/disable"),
        (lambda n: as_yaml(suite_dict("bad name!")), "a suite name is"),
        (lambda n: as_yaml(suite_dict(n, threshold=2)), "threshold"),
        (lambda n: as_yaml(suite_dict(n, components={})), "at least one component"),
        (lambda n: "name: &a " + n + "\nkind: *a\n", "aliases"),
        (lambda n: "x: " + "[" * 40 + "]" * 40 + "\n", "nested deeper than 32"),
        (lambda n: "name: [unclosed\n", "not valid YAML"),
        (lambda n: "- a list\n", "mapping"),
        (lambda n: as_yaml(suite_dict(n, description="nul \0 here")), "NUL"),
        (lambda n: as_yaml(with_similarity_args(suite_dict(n), tables=float("nan"))), "NaN or infinity"),
        (lambda n: as_yaml(with_similarity_args(suite_dict(n), tables=10**400)), "a number of 401 characters"),
        # Issue 29: past 4,300 digits Python's int() raised a ValueError, answered 500.
        (lambda n: as_yaml(suite_dict(n)) + "extra: " + "7" * 5_000 + "\n", "a number of 5,000 characters is longer than the 100"),
        # A YAML 1.1 base-60 integer costs quadratic time to read.
        (lambda n: as_yaml(suite_dict(n)) + "extra: 1" + ":0" * 20_000 + "\n", "a number of 40,001 characters"),
        (lambda n: as_yaml(suite_dict(n)) + "extra: [" + "1," * 20_001 + "]\n", "more than 20,000 values"),
        (lambda n: as_yaml(suite_dict(n, description="d" * 200_001)), "a value of 200,001 characters is longer than the 200,000"),
    ],
    ids=[
        "env", "enabled-false", "bad-name", "threshold", "no-components", "alias", "deep", "broken", "list", "nul",
        "nan-arg", "huge-arg", "int-digits", "base-60", "nodes", "scalar",
    ],
)
def test_refused_bodies_are_a_422_naming_the_reason_and_store_nothing(api_client, body, reason):
    name = unique()
    r = post(api_client, body(name))
    assert r.status_code == 422, r.text
    assert r.json()["error"] == "invalid_criteria" and reason in r.json()["message"], r.text
    with transaction() as session:
        assert session.scalar(select(func.count()).select_from(SuiteVersion)) == 0
        assert session.scalar(select(func.count()).where(SuiteRecord.origin == "api")) == 0


def test_a_judge_prompt_file_is_refused_but_an_inline_prompt_is_taken(api_client):
    kql = yaml.safe_load((REPO / "config" / "suites" / "kql.yaml").read_text())
    judge = {"provider": "anthropic", "model": "claude-haiku-5-5", "max_tokens": 512, "verdict": "kql_grade"}
    components = {**suite_dict("x")["components"]}
    components = {k: {**v, "weight": 0.25} for k, v in components.items()} | {
        "results_match": {**kql["components"]["results_match"], "weight": 0.25},
        "llm_grading": {"weight": 0.25, "judge": True},
    }
    name = unique()
    from_file = post(api_client, suite_dict(name, components=components, judge={**judge, "prompt_file": "prompts/kql_grading.md"}))
    assert from_file.status_code == 422, from_file.text
    assert "prompt_file" in from_file.json()["message"]
    prompt = (REPO / "config" / "prompts" / "kql_grading.md").read_text()
    inline = post(api_client, suite_dict(name, components=components, judge={**judge, "prompt": prompt}))
    assert inline.status_code == 201, inline.text


def test_bodies_that_are_not_a_json_object_or_not_utf8_are_422(api_client):
    for body, headers, reason in [
        (b"[1, 2]", JSON, "JSON object"),
        (b'{"name": NaN}', JSON, "NaN"),
        (b"name: caf\xe9\n", YAML, "not UTF-8"),
    ]:
        r = api_client.post("/api/v1/suites", content=body, headers=headers)
        assert r.status_code == 422 and reason in r.json()["message"], (body, r.text)


def test_other_content_types_are_415_and_a_body_over_the_limit_is_413(api_client, monkeypatch):
    from assay.settings import get_settings

    r = api_client.post("/api/v1/suites", content=as_yaml(suite_dict(unique())), headers={"Content-Type": "text/plain"})
    assert r.status_code == 415, r.text
    monkeypatch.setattr(get_settings(), "max_suite_bytes", 200)
    big = as_yaml(suite_dict(unique(), description="d" * 300))
    for path in ("/api/v1/suites", "/api/v1/suites/validate"):
        r = api_client.post(path, content=big, headers=YAML)
        assert r.status_code == 413, r.text
        assert r.json()["details"] == {"limit_bytes": 200, "setting": "ASSAY_MAX_SUITE_BYTES"}


# --- listing, disabling, deleting ----------------------------------------------------------------------


def test_the_list_holds_file_and_api_suites_with_origin_hash_and_state(api_client):
    name = unique()
    out = post(api_client, suite_dict(name)).json()
    listed = {s["name"]: s for s in api_client.get("/api/v1/suites").json()["suites"]}
    assert {"kql", "kql_strict", "alert_session", "pandas_codegen", name} <= set(listed)
    assert listed["kql"]["origin"] == "file" and listed["kql"]["state"] == "active" and listed["kql"]["versions"] == 0
    assert (listed[name]["origin"], listed[name]["current_criteria_hash"]) == ("api", out["version"]["criteria_hash"])


def test_disable_and_enable_gate_new_work(api_client, no_planner):
    name = unique()
    post(api_client, suite_dict(name))
    disabled = api_client.post(f"/api/v1/suites/{name}/disable")
    assert disabled.status_code == 200 and disabled.json()["state"] == "disabled"
    assert api_client.post(f"/api/v1/suites/{name}/disable").json()["state"] == "disabled"  # idempotent
    refused = upload(api_client, name)
    assert refused.status_code == 409 and f"/api/v1/suites/{name}/enable" in refused.json()["message"]
    rescore = api_client.post("/api/v1/rescore", json={"suite": name, "dry_run": True})
    assert rescore.status_code == 409
    assert api_client.post(f"/api/v1/suites/{name}/enable").json()["state"] == "active"
    assert upload(api_client, name).status_code == 202


def test_a_deleted_suite_takes_no_work_its_scores_stay_readable_and_its_name_can_come_back(api_client, no_planner):
    name = unique()
    first = post(api_client, suite_dict(name)).json()
    batch = upload(api_client, name).json()
    complete_batch(batch["batch_id"])
    deleted = api_client.delete(f"/api/v1/suites/{name}")
    assert deleted.status_code == 200 and deleted.json()["state"] == "deleted"
    assert api_client.delete(f"/api/v1/suites/{name}").status_code == 404
    assert api_client.post(f"/api/v1/suites/{name}/enable").status_code == 404

    refused = upload(api_client, name)
    assert refused.status_code == 404 and "was deleted" in refused.json()["message"]
    assert name not in {s["name"] for s in api_client.get("/api/v1/suites").json()["suites"]}
    listed = {s["name"]: s for s in api_client.get("/api/v1/suites?deleted=true").json()["suites"]}
    assert listed[name]["state"] == "deleted"
    # Its scores, batch and history stay readable.
    results = api_client.get(f"/api/v1/batches/{batch['batch_id']}/results").json()["results"]
    assert len(results) == len(ITEMS) and {r["total_score"] for r in results} == {0.8}
    item = api_client.get(f"/api/v1/items/{results[0]['item_id']}").json()
    assert [s["criteria_hash"] for s in item["scores"]] == [first["version"]["criteria_hash"]]
    assert api_client.get(f"/api/v1/suites/{name}").json()["version_list"][0]["version"] == 1

    back = post(api_client, suite_dict(name))
    assert back.status_code == 201 and back.json()["version"]["version"] == 2
    assert back.json()["suite"]["state"] == "active"


def test_unknown_suites_are_404(api_client):
    for response in (
        api_client.get("/api/v1/suites/nope_nope"),
        api_client.post("/api/v1/suites/nope_nope/disable"),
        api_client.delete("/api/v1/suites/nope_nope"),
        api_client.get("/api/v1/suites/nope_nope/versions/1"),
    ):
        assert response.status_code == 404, response.text
    assert api_client.get("/api/v1/suites/bad%20name").status_code == 422


# --- re-scoring -----------------------------------------------------------------------------------------


def test_a_new_version_makes_old_scores_stale_for_the_nightly_run(api_client, no_planner):
    from assay.scoring.rescoring import rescore

    name = unique()
    post(api_client, suite_dict(name))
    complete_batch(upload(api_client, name).json()["batch_id"])

    def stale() -> int:
        r = api_client.post("/api/v1/rescore", json={"suite": name, "dry_run": True, "stale_only": True})
        assert r.status_code == 200, r.text
        return r.json()["estimate"]["items"]

    assert stale() == 0
    with transaction() as session:
        assert name in {r.name for r in rescore.suites_to_rescore(session)}
    post(api_client, suite_dict(name, threshold=0.75))
    assert stale() == len(ITEMS)
    # Disabled or deleted API suites are left out of the nightly run.
    api_client.post(f"/api/v1/suites/{name}/disable")
    with transaction() as session:
        assert name not in {r.name for r in rescore.suites_to_rescore(session)}


# --- validating -----------------------------------------------------------------------------------------


def test_validate_answers_the_resolved_criteria_and_hash_and_stores_nothing(api_client):
    name = unique()
    r = api_client.post("/api/v1/suites/validate", content=as_yaml(suite_dict(name)), headers=YAML)
    assert r.status_code == 200, r.text
    out = r.json()
    assert out["valid"] is True and out["problems"] == [] and out["name"] == name
    assert out["criteria"]["threshold"] == 0.5 and set(out["criteria"]["components"]) == {"schema_match", "semantic_similarity"}
    assert out["options"]["description"] == "registered through the API"
    assert api_client.get(f"/api/v1/suites/{name}").status_code == 404
    with transaction() as session:
        assert session.get(CriteriaDefinition, out["criteria_hash"]) is None
    assert post(api_client, suite_dict(name)).json()["version"]["criteria_hash"] == out["criteria_hash"]


def test_validate_lists_the_problems(api_client):
    bad = api_client.post("/api/v1/suites/validate", content=as_yaml(suite_dict(unique(), threshold=3)), headers=YAML)
    assert bad.status_code == 200
    assert bad.json()["valid"] is False and "threshold" in bad.json()["problems"][0] and bad.json()["criteria_hash"] is None
    taken = api_client.post("/api/v1/suites/validate", content=json.dumps(suite_dict("kql")), headers=JSON).json()
    assert taken["valid"] is False and taken["criteria_hash"] is not None
    assert "409" in taken["problems"][0] and "files win" in taken["problems"][0]


def test_validate_reports_every_problem_of_a_body_at_once_with_its_component_and_field(api_client):
    """As ``assay suite validate`` does for a file, through the same domain function: not only the first."""
    suite = {
        "name": unique(),
        "kind": "generic",
        "threshold": 0.7,
        "fields": {"input": "question", "output": "answer", "metadata.product": "meta.product"},
        "components": {
            "correctness": {
                "weight": 0.6,
                "judge": {
                    "rubric": "Is the answer correct for the product?",
                    "prompt": "Product {{metadata.prodct}}\nQ: {{input}}\nA: {{output}}",
                    "verdict": {"type": "score"},
                },
            },
            "tone": {
                "weight": 0.5,
                "judge": {"rubric": "Is the answer polite?", "model": "no-such-model", "verdict": {"type": "score"}},
            },
        },
    }
    for body, headers in ((as_yaml(suite), YAML), (json.dumps(suite), JSON)):
        r = api_client.post("/api/v1/suites/validate", content=body, headers=headers)
        assert r.status_code == 200, r.text
        out = r.json()
        assert out["valid"] is False and out["criteria_hash"] is None and out["name"] is None
        problems = dict(p.split(": ", 1) for p in out["problems"])
        assert set(problems) == {"components.correctness.judge", "components.tone.judge", "components"}, out["problems"]
        assert "{{metadata.prodct}} is not a field of this suite's items (did you mean {{metadata.product}}?)" in problems[
            "components.correctness.judge"
        ]
        assert "no-such-model" in problems["components.tone.judge"]
        assert problems["components"].startswith("the weights add up to 1.1, not 1 (correctness 0.6 + tone 0.5)")


def test_an_example_generic_suite_registered_through_the_api_takes_its_example_file(api_client, no_planner):
    """The shipped example, sent as it is: its fields mapping applies at ingest, the judge rubric is inline."""
    suite = (REPO / "examples" / "generic" / "correctness.yaml").read_text()
    registered = post(api_client, suite)
    assert registered.status_code == 201, registered.text
    assert registered.json()["suite"]["kind"] == "generic"
    items = (REPO / "examples" / "generic" / "correctness.jsonl").read_bytes()
    r = api_client.post(
        "/api/v1/batches?suite=example_correctness", content=items, headers={"Content-Type": "application/x-ndjson"}
    )
    assert r.status_code == 202, r.text
    assert r.json()["accepted"] == len(items.splitlines()) and r.json()["criteria_hash"] == registered.json()["version"]["criteria_hash"]


def test_a_suite_at_the_value_limit_registers(api_client):
    # A long prompt or description is a normal suite: a value of exactly 200,000 characters is taken.
    name = unique()
    r = post(api_client, suite_dict(name, description="d" * 200_000))
    assert r.status_code == 201, r.text
    assert api_client.get(f"/api/v1/suites/{name}").json()["description"] == "d" * 200_000
