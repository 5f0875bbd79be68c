"""The dashboard's pages without a browser: sign-in, the cookie, what each page shows (real scores,
scored in this process against the loopback judge fake)."""

from __future__ import annotations

import json
import re
import uuid

import pytest
from fastapi.testclient import TestClient

from assay.api.dashboard import queries
from assay.api import signin_sessions as cookie
from assay.settings import unnamed_key_name
from tests.conftest import API_KEY, REPO
from tests.dashboard.support import judge_runtime, make_app, post_sign_in, score_in_process, score_refs
from tests.fakes.anthropic_server import FakeAnthropic

EXAMPLES = REPO / "examples" / "kql_items.jsonl"


@pytest.fixture
def app(clean_db, monkeypatch):
    monkeypatch.setattr("assay.api.routes.batches.start_planner", lambda batch_id: None)
    return make_app()


@pytest.fixture
def browser(app):
    """A client with no credentials, over https (the session cookie is Secure)."""
    with TestClient(app, base_url="https://testserver", follow_redirects=False) as client:
        yield client


@pytest.fixture
def signed_in(browser):
    r = post_sign_in(browser)
    assert r.status_code == 303, r.text
    return browser


@pytest.fixture
def fake_judge():
    with FakeAnthropic() as fake:
        yield fake


@pytest.fixture
def scored_batch(signed_in, fake_judge):
    r = signed_in.post(
        "/api/v1/batches?suite=kql",
        content=EXAMPLES.read_bytes(),
        headers={"Authorization": f"Bearer {API_KEY}", "Content-Type": "application/x-ndjson"},
    )
    assert r.status_code == 202, r.text
    batch_id = r.json()["batch_id"]
    score_in_process(batch_id, judge_runtime(fake_judge.base_url))
    return batch_id


PAGES = ["/dashboard/", "/dashboard/sessions", "/dashboard/missing-tools", "/dashboard/criteria", "/dashboard/judge", "/dashboard/agreement"]


# Fixed ids, not uuid4(): test ids must be the same in every pytest-xdist worker's collection.
NOBODYS = "5c9e2f4a-0d1b-4e7a-9c3f-8a6b2d1e0f47"


@pytest.mark.parametrize("path", PAGES + [f"/dashboard/batches/{NOBODYS}", f"/dashboard/items/{NOBODYS}"])
def test_no_page_without_sign_in(browser, path):
    r = browser.get(path)
    assert r.status_code == 303
    assert r.headers["location"].startswith("/dashboard/sign-in?next=")
    assert browser.get("/dashboard/api/batches?ids=").status_code == 401


def test_sign_in_sets_a_secure_http_only_samesite_cookie(browser):
    page = browser.get("/dashboard/sign-in?next=/dashboard/criteria")
    assert page.status_code == 200 and 'name="api_key"' in page.text
    bad = post_sign_in(browser, "wrong")
    assert bad.status_code == 401 and cookie.COOKIE_NAME not in bad.headers.get("set-cookie", "")
    r = post_sign_in(browser, API_KEY, "/dashboard/criteria")
    assert r.status_code == 303 and r.headers["location"] == "/dashboard/criteria"
    set_cookie = r.headers["set-cookie"]
    assert set_cookie.startswith(f"{cookie.COOKIE_NAME}=")
    flags = {part.strip().lower() for part in set_cookie.split(";")}
    assert {"secure", "httponly", "samesite=lax", "path=/"} <= flags
    assert API_KEY not in set_cookie  # only a fingerprint of the key travels
    assert browser.get("/dashboard/criteria").status_code == 200
    out = browser.post("/dashboard/sign-out", headers={"Origin": "https://testserver"})  # a same-origin form
    assert out.status_code == 303
    assert browser.get("/dashboard/criteria").status_code == 303


def test_sign_in_never_redirects_off_site(browser):
    for target in ["//evil.example/x", "https://evil.example/", "/\\evil.example"]:
        r = browser.post(
            "/dashboard/sign-in", data={"api_key": API_KEY, "next": target}, headers={"Origin": "https://testserver"}
        )
        assert r.headers["location"] == "/dashboard/"


@pytest.mark.parametrize(
    "origin", ["https://evil.example", "http://testserver", "https://testserver:8443", "null", None],
    ids=["other-site", "other-scheme", "other-port", "null", "none"],
)
def test_a_sign_in_from_another_site_is_refused_and_signs_nobody_in(browser, origin):
    """Login CSRF: another site's page posting the sign-in form with the attacker's (valid) key must
    not sign the visitor's browser in. The form is refused before the key is looked at."""
    from sqlalchemy import func, select

    from assay.scoring.store.db import transaction
    from assay.scoring.store.models import SignedInSession

    def sessions_stored() -> int:
        with transaction() as session:
            return session.scalar(select(func.count()).select_from(SignedInSession))

    before = sessions_stored()
    headers = {"Origin": origin} if origin is not None else {}
    r = browser.post("/dashboard/sign-in", data={"api_key": API_KEY, "next": "/dashboard/"}, headers=headers)
    assert r.status_code == 403, r.text
    assert r.json()["error"] == "csrf_check_failed" and "Origin" in r.json()["message"]
    assert cookie.COOKIE_NAME not in r.headers.get("set-cookie", "") and not browser.cookies
    assert browser.get("/dashboard/").status_code == 303  # still signed out
    assert sessions_stored() == before
    # The same key through this site's own form works.
    assert post_sign_in(browser).status_code == 303 and browser.get("/dashboard/").status_code == 200


def test_forged_expired_and_revoked_cookies_are_refused():
    from pydantic import SecretStr

    class S:
        api_keys = [SecretStr("ann:k1"), SecretStr("k2")]
        session_secret = None

    value, data = cookie.issue(S, "ann", "k1", now=1000)
    assert cookie.verify(S, value, now=1001) == data
    body, sig = value.split(".")
    assert cookie.verify(S, body + "." + sig[:-2] + "AA", now=1001) is None
    assert cookie.verify(S, value, now=1000 + cookie.DEFAULT_MAX_AGE_SECONDS + 1) is None

    class Rotated(S):
        api_keys = [SecretStr("k2")]

    assert cookie.verify(Rotated, value, now=1001) is None  # the key it was opened with is gone

    class Renamed(S):
        api_keys = [SecretStr("bob:k1"), SecretStr("k2")]

    assert cookie.verify(Renamed, value, now=1001) is None  # its key now names someone else

    class Configured(Rotated):
        session_secret = SecretStr("a-fixed-secret")

    value2, _ = cookie.issue(Configured, unnamed_key_name("k2"), "k2", now=1000)
    assert cookie.verify(Configured, value2, now=1001) is not None
    assert cookie.verify(Rotated, value2, now=1001) is None  # another secret


def test_proxy_user_needs_no_sign_in(app):
    with TestClient(app, base_url="https://testserver", follow_redirects=False, client=("10.255.255.254", 4000)) as proxied:
        r = proxied.get("/dashboard/", headers={"X-Forwarded-User": "alice@example.com"})
        assert r.status_code == 200 and "alice@example.com" in r.text
    with TestClient(app, base_url="https://testserver", follow_redirects=False, client=("10.0.0.9", 4000)) as stranger:
        r = stranger.get("/dashboard/", headers={"X-Forwarded-User": "alice@example.com"})
        assert r.status_code == 303  # not a trusted proxy: the header means nothing


def test_json_api_takes_the_cookie_and_wants_the_csrf_token_to_change_things(signed_in):
    assert signed_in.get("/api/v1/batches").status_code == 200
    page = signed_in.get("/dashboard/").text
    token = re.search(r'name="csrf-token" content="([^"]+)"', page).group(1)
    body = EXAMPLES.read_bytes()
    refused = signed_in.post("/api/v1/batches?suite=kql", content=body)
    assert refused.status_code == 403 and "X-CSRF-Token" in refused.json()["message"]
    taken = signed_in.post("/api/v1/batches?suite=kql", content=body, headers={"X-CSRF-Token": token})
    assert taken.status_code == 202, taken.text
    assert taken.json()["accepted"] == 4


def test_batches_list_and_live_progress(signed_in, scored_batch):
    page = signed_in.get("/dashboard/")
    assert page.status_code == 200
    assert f'data-batch-id="{scored_batch}"' in page.text and "completed" in page.text
    live = signed_in.get(f"/dashboard/api/batches?ids={scored_batch},not-a-uuid").json()["batches"]
    assert len(live) == 1
    row = live[0]
    assert row["status"] == "completed" and row["done"] == 4 and row["percent"] == 100.0
    assert row["passed"] + row["failed"] + row["errored"] == 4
    assert row["cost_usd"] > 0 and row["active"] is False


def test_batch_detail_has_design_000_sections(signed_in, scored_batch):
    page = signed_in.get(f"/dashboard/batches/{scored_batch}")
    assert page.status_code == 200
    text = page.text
    success = text[text.index('id="success"') : text.index('id="errors"')]
    errors = text[text.index('id="errors"') :]
    n_pass = success.count('class="result-card pass"')
    n_fail = errors.count('class="result-card fail"')
    assert n_pass + n_fail == 4 and n_fail >= 1  # examples: one did not execute, one is design scenario 3
    assert "Score: " in success and "PASS ≥90%" in success
    assert "Judge&#39;s reasoning" in errors or "Judge's reasoning" in errors
    for fmt in ("xlsx", "csv", "json"):
        assert f"/api/v1/batches/{scored_batch}/report.{fmt}" in text
    assert text.count('class="hbin') == 10
    for name in ("schema_match", "semantic_similarity", "results_match", "llm_grading"):
        assert name in text


def test_item_detail_shows_every_score_with_its_criteria(signed_in, scored_batch):
    results = signed_in.get(f"/api/v1/batches/{scored_batch}/results").json()["results"]
    item_id = results[0]["item_id"]
    page = signed_in.get(f"/dashboard/items/{item_id}")
    assert page.status_code == 200
    assert results[0]["criteria_hash"] in page.text and "current criteria" in page.text
    assert "Reasoning" in page.text and "Tokens" in page.text
    assert signed_in.get(f"/dashboard/items/{uuid.uuid4()}").status_code == 404


def test_pages_load_only_their_own_assets_and_cannot_be_framed(signed_in):
    r = signed_in.get("/dashboard/")
    csp = r.headers["content-security-policy"]
    assert "script-src 'self'" in csp and "frame-ancestors 'none'" in csp
    assert r.headers["x-frame-options"] == "DENY" and r.headers["cache-control"] == "no-store"
    assert "<script>" not in r.text and "onchange=" not in r.text and "//cdn" not in r.text
    for asset in ("/dashboard/static/dashboard.js", "/dashboard/static/dashboard.css"):
        assert signed_in.get(asset).status_code == 200


def test_criteria_and_judge_pages(signed_in, scored_batch):
    page = signed_in.get("/dashboard/criteria").text
    assert "kql" in page and "current" in page
    judge = signed_in.get("/dashboard/judge")
    assert judge.status_code == 200 and "closed" in judge.text and "metrics" in judge.text


def test_score_bands_are_design_001s():
    assert [queries.band(v)[0] for v in (0, 44, 45, 59, 60, 74, 75, 89, 90, 100)] == [
        "band-red", "band-red", "band-orange", "band-orange", "band-yellow", "band-yellow",
        "band-lightgreen", "band-lightgreen", "band-darkgreen", "band-darkgreen",
    ]
    assert queries.band(None) == ("band-none", "not scored")
    assert queries.score100(0.445) == 44 and queries.score100(0.9) == 90


def test_missing_tools_are_folded():
    assert queries.normalise_tool("List_Files") == queries.normalise_tool("list files") == "list-files"




def session_body(session_id: str, tools: list[str]) -> dict:
    return {
        "session_id": session_id,
        "status": "completed",
        "alert_type": "PodCrashLoop",
        "alert_data": {"namespace": "prod", "pod": session_id},
        "conversation": [
            {"type": "message", "role": "user", "content": f"Alert: {session_id} is crash-looping."},
            {"type": "tool_call", "tool_name": tools[0], "arguments": {"pod": session_id}, "result": "CrashLoopBackOff"},
            {"type": "message", "role": "assistant", "content": "Out of memory; raise the limit."},
        ],
        "final_analysis": "OOMKilled: raise the memory limit.",
        "available_tools": tools,
    }


def test_sessions_list_badges_filters_and_missing_tools(app, signed_in, fake_judge, monkeypatch):
    published = []
    monkeypatch.setattr("assay.api.routes.sessions.publish_components", published.extend)
    # Every verdict names at least one missing tool (the fake's arrays have 0–2 items otherwise, and
    # one run in nine neither score named any), so the chart below always has something to draw.
    fake_judge.configure(min_array_items=1)
    auth = {"Authorization": f"Bearer {API_KEY}"}
    ids = [f"s-{i}-{uuid.uuid4().hex[:6]}" for i in range(3)]
    for n, sid in enumerate(ids):
        r = signed_in.post("/api/v1/sessions", json=session_body(sid, ["pods_get", "logs", "read-file"][n:] + ["pods_get"]), headers=auth)
        assert r.status_code == 201, r.text
    for sid in ids[:2]:
        assert signed_in.post(f"/api/v1/scoring/sessions/{sid}/score", json={}, headers=auth).status_code == 202
    score_refs(published, judge_runtime(fake_judge.base_url))
    scores = {sid: signed_in.get(f"/api/v1/scoring/sessions/{sid}/score", headers=auth).json() for sid in ids[:2]}
    assert all(s["status"] == "completed" for s in scores.values())

    page = signed_in.get("/dashboard/sessions").text
    for sid, score in scores.items():
        value = score["total_score"]
        css = queries.band(value)[0]
        assert re.search(rf'class="badge {css}"\s+data-session-badge="{sid}"[^>]*>{value}<', page), (sid, value)
    assert re.search(rf'class="badge band-none"\s+data-session-badge="{ids[2]}"[^>]*>Not scored<', page)
    assert page.count('class="primary score-session"') == 3
    only_unscored = signed_in.get("/dashboard/sessions?state=not_scored").text
    assert ids[2] in only_unscored and ids[0] not in only_unscored and ids[1] not in only_unscored
    low = min(s["total_score"] for s in scores.values())
    at_least = signed_in.get(f"/dashboard/sessions?min_score={low + 1}").text
    assert sum(sid in at_least for sid in ids) == sum(s["total_score"] >= low + 1 for s in scores.values())

    detail = signed_in.get(f"/dashboard/sessions/{ids[0]}").text
    first = scores[ids[0]]
    assert first["criteria_hash"] in detail and "current criteria" in detail
    for tool in first["missing_tools"]:
        assert tool["tool_name"] in detail or tool["tool_name"].replace("&", "&amp;") in detail
    for approach in first["alternative_approaches"]:
        assert approach["name"] in detail
    for name in first["score_breakdown"]:
        assert name.replace("_", " ") in detail

    # The chart counts what the analytics endpoint counts.
    chart = signed_in.get("/dashboard/missing-tools").text
    api = signed_in.get("/api/v1/scoring/missing-tools", headers=auth).json()
    tools = api["tools"]
    assert tools and f"({api['scores_considered']} scores)" in chart
    for tool in tools:
        name = tool.get("tool_name") or tool.get("normalized_name")
        assert re.search(rf"<code>{re.escape(name)}</code></span>\s*<div class=\"htrack\">.*?<span class=\"hvalue\">{tool['count']}</span>", chart, re.S), name


# --- a generic suite with several judge components ----------------------------------------------------------

GENERIC_SUITE = """
name: dash_support
kind: generic
threshold: 0.5
components:
  exact:
    weight: 0.1
    metric: exact_match
    version: 1
    args: {case_sensitive: false}
    min_score: 0.0
  correctness:
    weight: 0.3
    judge:
      rubric: Grade the answer against the reference answer.
      prompt: "Q: {{input}}\\nReference: {{expected}}\\nAnswer: {{output}}"
      verdict: {type: scale, min: 1, max: 5}
  tone:
    weight: 0.2
    judge:
      rubric: Is the tone right for a support answer?
      verdict: {type: labels, labels: {friendly: 1.0, curt: 0.0}}
  faithfulness:
    weight: 0.4
    judge:
      rubric: Is every claim grounded in the context?
      prompt: "Context: {{context}}\\nAnswer: {{output}}"
      verdict:
        type: criteria
        criteria:
          - {name: grounded, weight: 0.7, steps: ["List each claim", "Check each against the context"]}
          - {name: complete, weight: 0.3}
"""
GENERIC_ITEMS = [
    {"id": "g1", "input": "How long is the warranty?", "output": "Two years [1].", "expected": "Two years.",
     "context": ["The warranty lasts two years."]},
    {"id": "g2", "input": "Is the jug dishwasher safe?", "output": "Yes.", "expected": "No.",
     "context": ["Do not put the jug in the dishwasher."]},
]


@pytest.fixture
def generic_batch(signed_in, fake_judge):
    import json

    auth = {"Authorization": f"Bearer {API_KEY}"}
    r = signed_in.post("/api/v1/suites", content=GENERIC_SUITE.encode(), headers={**auth, "Content-Type": "application/yaml"})
    assert r.status_code in (200, 201), r.text
    body = "\n".join(json.dumps(i) for i in GENERIC_ITEMS).encode()
    r = signed_in.post("/api/v1/batches?suite=dash_support", content=body, headers={**auth, "Content-Type": "application/x-ndjson"})
    assert r.status_code == 202, r.text
    batch_id = r.json()["batch_id"]
    # The first judge call answers unusable text twice (first answer and its repair): that component
    # fails with its raw output kept; the next one needs a repair and then succeeds.
    fake_judge.script({"kind": "malformed", "times": 2}, {"kind": "malformed"}, {"kind": "ok"})
    score_in_process(batch_id, judge_runtime(fake_judge.base_url))
    results = signed_in.get(f"/api/v1/batches/{batch_id}/results", headers=auth).json()["results"]
    return batch_id, results


def judge_blocks(html: str) -> dict[str, str]:
    """Each judge panel's HTML by component name (one panel per judge component)."""
    blocks = re.findall(r'<div class="judge" data-judge="([^"]+)">(.*?)\n</div>', html, re.DOTALL)
    return {name: block for name, block in blocks}


def test_batch_page_shows_each_judge_component_with_its_reasoning(signed_in, generic_batch):
    batch_id, results = generic_batch
    page = signed_in.get(f"/dashboard/batches/{batch_id}")
    assert page.status_code == 200
    for name in ("exact", "correctness", "tone", "faithfulness"):
        assert name in page.text
    assert "pass blocker &lt; 0%" in page.text  # exact's min_score
    cards = re.findall(r'<article class="result-card.*?</article>', page.text, re.DOTALL)
    assert len(cards) == 2
    for card in cards:
        assert sorted(judge_blocks(card)) == ["correctness", "faithfulness", "tone"]
    failed = [r for r in results if any(c["status"] == "failed" for c in r["components"].values())]
    assert len(failed) == 1  # the component whose answer and repair were both unusable
    name = next(n for n, c in failed[0]["components"].items() if c["status"] == "failed")
    card = next(c for c in cards if f"#{failed[0]['position']} " in c)
    block = judge_blocks(card)[name]
    assert "Raw judge output" in block and "I would rate this" in block and "repair needed" in block


def test_item_page_shows_every_judge_answer_repair_and_carry_over(signed_in, generic_batch):
    from sqlalchemy import select

    from assay.scoring.store.db import transaction
    from assay.scoring.store.models import ScoreComponent

    _, results = generic_batch
    ok = next(r for r in results if all(c["status"] == "ok" for c in r["components"].values()))
    with transaction() as session:
        tone = session.scalars(
            select(ScoreComponent).where(ScoreComponent.score_id == uuid.UUID(ok["score_id"]), ScoreComponent.component == "tone")
        ).one()
        tone.carried_over_from = uuid.UUID(int=7)
    page = signed_in.get(f"/dashboard/items/{ok['item_id']}").text
    blocks = judge_blocks(page)
    assert sorted(blocks) == ["correctness", "faithfulness", "tone"]
    comps = ok["components"]
    assert f'data-field="answer">{comps["correctness"]["details"]["scale"]} on 1–5<' in blocks["correctness"]
    assert f'data-field="answer">{comps["tone"]["details"]["label"]}<' in blocks["tone"]
    for criterion in ("grounded", "complete"):
        assert f"<td>{criterion}</td>" in blocks["faithfulness"]
    for name in blocks:
        assert html_text(comps[name]["details"]["reasoning"]) in blocks[name]
    assert "carried over" in blocks["tone"] and "carried over" not in blocks["correctness"]
    repaired = [n for n in blocks if comps[n]["details"].get("repaired")]
    assert all("repair needed" in blocks[n] for n in repaired)
    assert all("repair needed" not in blocks[n] for n in blocks if n not in repaired)


def html_text(text: str) -> str:
    from markupsafe import escape

    return str(escape(text))


def test_criteria_page_shows_a_generic_suites_components(signed_in, generic_batch):
    page = signed_in.get("/dashboard/criteria").text
    table = page[page.index('data-suite="dash_support"') :]
    table = table[: table.index("</table>")]
    assert "metric <code>exact_match</code> v1" in table and "case_sensitive" in table
    assert "Grade the answer against the reference answer." in table  # the rubric text
    types = re.findall(r'data-field="verdict-type">(\w+)<', table)
    assert sorted(types) == ["criteria", "labels", "scale"]  # stored criteria (JSONB) keep no key order
    assert "<code>friendly</code> = 1.0" in table and "Check each against the context" in table


def test_generic_batch_csv_export_and_reports_have_the_suites_columns(signed_in, generic_batch):
    import csv
    import io

    batch_id, results = generic_batch
    auth = {"Authorization": f"Bearer {API_KEY}"}
    export = signed_in.get(f"/api/v1/batches/{batch_id}/results?format=csv", headers=auth)
    report = signed_in.get(f"/api/v1/batches/{batch_id}/report.csv", headers=auth)
    assert export.status_code == report.status_code == 200
    exported = list(csv.DictReader(io.StringIO(export.text)))
    reported = list(csv.DictReader(io.StringIO(report.text)))
    assert list(exported[0]) == list(reported[0])
    for column in ("correctness_verdict", "tone_verdict", "faithfulness.grounded", "faithfulness_reasoning", "exact_reason"):
        assert column in reported[0]
    by_id = {r["score_id"]: r for r in reported}
    for result in results:
        row, comps = by_id[result["score_id"]], result["components"]
        if comps["tone"]["status"] == "ok":
            assert row["tone_verdict"] == comps["tone"]["details"]["label"]
        if comps["correctness"]["status"] == "ok":
            assert row["correctness_verdict"] == str(comps["correctness"]["details"]["scale"])


def test_agreement_page_shows_each_hashs_numbers_and_links_the_disagreeing_items(signed_in, scored_batch):
    ids = [json.loads(line)["id"] for line in EXAMPLES.read_text().splitlines() if line.strip()]
    # Every item labelled "pass" by two people, but the last one's second label fails it: a tie.
    rows = [{"batch_id": scored_batch, "external_id": i, "passed": True, "annotator": "ann"} for i in ids]
    rows += [{"batch_id": scored_batch, "external_id": i, "passed": i != ids[-1], "annotator": "ben"} for i in ids]
    r = signed_in.post(
        "/api/v1/suites/kql/labels",
        content="\n".join(json.dumps(row) for row in rows),
        headers={"Authorization": f"Bearer {API_KEY}", "Content-Type": "application/x-ndjson"},
    )
    assert r.status_code == 200 and r.json()["imported"] == 2 * len(ids), r.text  # ann and ben: imports
    [h] = signed_in.get("/api/v1/suites/kql/agreement", headers={"Authorization": f"Bearer {API_KEY}"}).json()["hashes"]
    assert h["compared_items"] == len(ids) - 1 and h["ties"]["count"] == 1

    page = signed_in.get("/dashboard/agreement")
    assert page.status_code == 200 and 'href="/dashboard/agreement"' in page.text
    section = page.text.split(f'data-criteria-hash="{h["criteria_hash"]}"', 1)[1]
    assert re.search(r'data-field="compared">%d<' % h["compared_items"], section)
    assert f'data-field="accuracy">{100 * h["accuracy"]:.1f}%<' in section
    assert f'data-field="pp">{h["confusion"]["machine_pass_human_pass"]}<' in section
    assert f'data-field="fp">{h["confusion"]["machine_fail_human_pass"]}<' in section
    # Every machine failure is a disagreement here (people passed every item but the tie).
    failed = h["confusion"]["machine_fail_human_pass"]
    assert h["disagreeing"]["count"] == failed and failed >= 1
    for entry in h["disagreeing"]["items"]:
        assert f'href="/dashboard/items/{entry["item_id"]}">{entry["external_id"]}<' in section
    assert f'>{ids[-1]}<' in section.split('data-field="tie-items"', 1)[1]
    assert signed_in.get("/dashboard/agreement?suite=nope").status_code == 404
    assert signed_in.get("/dashboard/agreement?suite=kql&criteria=" + "0" * 64).status_code == 404


def test_agreement_suite_list_counts_each_suites_labelled_items_and_labels(signed_in):
    """The suite picker reads "kql (N items, M labels)" with the real counts (it once printed the dict's
    ``items`` method: "<built-in method items of dict object at 0x…> items")."""
    r = signed_in.post(
        "/api/v1/batches?suite=kql",
        content=EXAMPLES.read_bytes(),
        headers={"Authorization": f"Bearer {API_KEY}", "Content-Type": "application/x-ndjson"},
    )
    assert r.status_code == 202, r.text
    batch_id = r.json()["batch_id"]
    ids = [json.loads(line)["id"] for line in EXAMPLES.read_text().splitlines() if line.strip()]
    # Three items labelled by one person, two of them by a second: 3 distinct items, 5 labels.
    rows = [{"batch_id": batch_id, "external_id": i, "passed": True, "annotator": "ann"} for i in ids[:3]]
    rows += [{"batch_id": batch_id, "external_id": i, "passed": False, "annotator": "ben"} for i in ids[:2]]
    r = signed_in.post(
        "/api/v1/suites/kql/labels",
        content="\n".join(json.dumps(row) for row in rows),
        headers={"Authorization": f"Bearer {API_KEY}", "Content-Type": "application/x-ndjson"},
    )
    # Rows naming other annotators are imports, recorded as the uploading key's.
    assert r.status_code == 200 and r.json()["imported"] == 5, r.text

    page = signed_in.get("/dashboard/agreement")
    assert page.status_code == 200
    assert "built-in method" not in page.text
    assert re.search(r'<option value="kql"\s+selected>kql \(3 items, 5 labels\)</option>', page.text), page.text
    # Scored nothing yet: the page says so for the chosen suite.
    assert 'id="no-hashes">3 labelled items in kql' in page.text
