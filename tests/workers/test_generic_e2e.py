"""A generic suite end to end: API → Redis → a live Celery worker → Postgres, judged by the loopback
fake. One suite holds every library metric family and every rubric verdict type (one worker start):
each component's status, score and details, a pass blocker (min_score), a missing per-item value (a
metric skipped, a judge failed, both with the reason, and the score failed), and an out-of-range judge answer repaired once."""

from __future__ import annotations

import json

import pytest

from assay.scoring.store.db import transaction
from assay.scoring.suites.criteria import register_suite
from assay.scoring.suites.loader import parse_suite
from assay.settings import get_settings
from tests.workers.test_end_to_end import all_results, submit, wait_finished

SUITE = r"""
name: generic_e2e_every_family
kind: generic
threshold: 0.5
fields:
  id: key
  input: prompt
  output: response
  expected: reference
  context: passages
  metadata: meta
components:
  exact:            {weight: 0.04, metric: exact_match, version: 1}
  mentions_paris:   {weight: 0.04, metric: contains, version: 1, args: {value: Paris}}
  cites:
    weight: 0.04
    metric: regex_match
    version: 1
    args: {pattern: '\[\d+\]'}
    min_score: 1.0
  words:            {weight: 0.04, metric: length_words, version: 1, args: {min: 3, max: 60}}
  valid_json:       {weight: 0.04, metric: is_json, version: 1}
  shape:
    weight: 0.04
    metric: json_schema
    version: 1
    args: {schema: {type: object, required: [answer, tools, total]}}
  answer_at_path:   {weight: 0.04, metric: json_path_equals, version: 1, args: {path: answer, value: "Paris [1]"}}
  total_close:      {weight: 0.04, metric: numeric_close, version: 1, args: {value: {from: metadata.total}, abs_tol: 1}}
  tools_f1:         {weight: 0.04, metric: list_f1, version: 1, args: {path: tools, expected: {from: metadata.tools}}}
  levenshtein:      {weight: 0.04, metric: levenshtein_ratio, version: 1}
  bleu:             {weight: 0.04, metric: bleu, version: 1}
  chrf:             {weight: 0.04, metric: chrf, version: 1}
  rouge:            {weight: 0.04, metric: rouge_l, version: 1}
  graded_score:
    weight: 0.08
    judge:
      rubric: Grade how well the output answers the input, from 0 to 1.
      verdict: {type: score}
  graded_scale:
    weight: 0.08
    judge:
      rubric: Grade the output against the reference answer on a 1-5 scale.
      prompt: "### Input\n{{input}}\n\n### Reference\n{{expected}}\n\n### Output\n{{output}}\n"
      verdict: {type: scale, min: 1, max: 5}
  graded_pass_fail:
    weight: 0.08
    judge:
      rubric: Does the output follow the instructions in the input?
      verdict: {type: pass_fail}
  graded_labels:
    weight: 0.08
    judge:
      rubric: Is the output relevant to the input?
      verdict: {type: labels, labels: {relevant: 1.0, partial: 0.5, off_topic: 0.0}}
  graded_criteria:
    weight: 0.16
    judge:
      rubric: Check the output against the retrieved passages.
      prompt: "### Passages\n{{context}}\n\n### Output\n{{output}}\n"
      verdict:
        type: criteria
        criteria:
          - {name: grounded, weight: 0.75, steps: [List each claim, Find the passage for each claim]}
          - {name: cited, weight: 0.25, steps: [Check each citation]}
"""
RUBRIC_JUDGES = ("graded_score", "graded_scale", "graded_pass_fail", "graded_labels", "graded_criteria")
METRICS_EXPECTED_GOOD = {
    "exact", "mentions_paris", "cites", "words", "valid_json", "shape", "answer_at_path", "total_close", "tools_f1",
    "levenshtein", "bleu", "chrf", "rouge",
}

GOOD_OUTPUT = '{"answer": "Paris [1]", "tools": ["search", "lookup"], "total": 42}'
LINES = [
    {  # every metric scores 1
        "key": "good",
        "prompt": "What is the capital of France? Reply in JSON with the tools you used and the total.",
        "response": GOOD_OUTPUT,
        "reference": GOOD_OUTPUT,
        "passages": ["Paris is the capital of France.", "France is in Europe."],
        "meta": {"total": 42, "tools": ["search", "lookup"]},
        "ignored": "not stored",
    },
    {  # no citation: the pass blocker; half the tools; a total two off
        "key": "blocked",
        "prompt": "What is the capital of France? Reply in JSON with the tools you used and the total.",
        "response": '{"answer": "Lyon", "tools": ["search"], "total": 40}',
        "reference": GOOD_OUTPUT,
        "passages": ["Paris is the capital of France."],
        "meta": {"total": 42, "tools": ["search", "lookup"]},
    },
    {  # no reference and no metadata: what needs them is skipped (metrics) or failed (a judge template)
        "key": "no-reference",
        "prompt": "Name a city in France and cite your source.",
        "response": '{"answer": "Paris [1]", "tools": [], "total": 1}',
        "passages": ["Paris is in France."],
    },
]


@pytest.fixture
def generic_suite(api_client):
    with transaction() as session:
        register_suite(session, parse_suite(SUITE, config_dir=get_settings().config_dir, env={}, source="e2e"))
    return "generic_e2e_every_family"


def _check_verdict(name: str, comp: dict) -> None:
    details = comp["details"]
    assert comp["status"] == "ok", (name, comp)
    assert isinstance(details["reasoning"], str) and details["reasoning"]
    score = comp["score"]
    if name == "graded_score":
        assert score == pytest.approx(details["score"]) and 0 <= score <= 1
    elif name == "graded_scale":
        assert 1 <= details["scale"] <= 5 and (details["min"], details["max"]) == (1, 5)
        assert score == pytest.approx((details["scale"] - 1) / 4)
    elif name == "graded_pass_fail":
        assert score == (1.0 if details["passed"] else 0.0)
    elif name == "graded_labels":
        assert score == {"relevant": 1.0, "partial": 0.5, "off_topic": 0.0}[details["label"]]
    else:
        criteria = details["criteria"]
        assert set(criteria) == {"grounded", "cited"}
        for c in criteria.values():
            assert 1 <= c["score"] <= 5 and c["normalised"] == pytest.approx((c["score"] - 1) / 4) and c["reasoning"]
        assert score == pytest.approx(0.75 * criteria["grounded"]["normalised"] + 0.25 * criteria["cited"]["normalised"])


def test_every_metric_family_and_verdict_type_through_a_worker(api_client, generic_suite, live_worker_factory, fake_judge):
    # The first judge call is answered out of range (whichever component it is): repaired once.
    fake_judge.script({"kind": "out_of_range", "times": 1})
    live_worker_factory(
        {"ANTHROPIC_API_KEY": "test-key", "ANTHROPIC_BASE_URL": fake_judge.base_url, "ASSAY_JUDGE_BACKOFF_BASE_SECONDS": "0.01"}
    )
    batch_id = submit(api_client, "".join(json.dumps(line) + "\n" for line in LINES).encode(), suite=generic_suite)
    view = wait_finished(api_client, batch_id, timeout=120)
    assert view["status"] == "completed"
    results = {r["external_id"]: r for r in all_results(api_client, batch_id)}
    assert set(results) == {"good", "blocked", "no-reference"}

    good = results["good"]["components"]
    for name in METRICS_EXPECTED_GOOD:
        assert (good[name]["status"], good[name]["score"]) == ("ok", 1.0), (name, good[name])
    assert good["bleu"]["details"] and good["rouge"]["details"]  # the raw library values are kept
    for name in RUBRIC_JUDGES:
        _check_verdict(name, good[name])
    assert results["good"]["status"] == "completed" and results["good"]["partial"] is False
    assert results["good"]["error_message"] is None

    blocked = results["blocked"]
    comps = blocked["components"]
    assert (comps["cites"]["status"], comps["cites"]["score"]) == ("ok", 0.0)
    assert comps["exact"]["score"] == 0.0 and comps["mentions_paris"]["score"] == 0.0
    assert comps["answer_at_path"]["score"] == 0.0 and comps["total_close"]["score"] == 0.0
    assert comps["tools_f1"]["score"] == pytest.approx(2 / 3)  # precision 1, recall 1/2
    assert 0 < comps["levenshtein"]["score"] < 1
    assert comps["valid_json"]["score"] == 1.0 and comps["shape"]["score"] == 1.0
    for name in RUBRIC_JUDGES:
        _check_verdict(name, comps[name])
    assert blocked["passed"] is False
    assert blocked["error_message"] == "cites: score 0.00 is below its min_score 1.00"

    missing = results["no-reference"]["components"]
    assert missing["total_close"]["status"] == "skipped" and "metadata.total" in missing["total_close"]["reason"]
    assert missing["tools_f1"]["status"] == "skipped" and "metadata.tools" in missing["tools_f1"]["reason"]
    assert missing["exact"]["status"] == "skipped" and "expected" in missing["exact"]["reason"]
    assert missing["graded_scale"]["status"] == "failed" and "{{expected}}" in missing["graded_scale"]["reason"]
    _check_verdict("graded_criteria", missing["graded_criteria"])
    # A failed component fails the score (never a made-up total), with the reason.
    assert results["no-reference"]["status"] == "failed" and results["no-reference"]["total_score"] is None
    assert results["no-reference"]["error_message"].startswith("graded_scale: ")

    # Each judge component is its own call: 5 per item, less the one that could not be rendered, plus
    # the one repair; the repaired component says so and counts two calls.
    calls = fake_judge.calls()
    assert calls["total"] == 5 + 5 + 4 + 1
    judged = [c for r in results.values() for n, c in r["components"].items() if n in RUBRIC_JUDGES and c["status"] == "ok"]
    repaired = [c for c in judged if c["details"].get("repaired")]
    assert len(repaired) == 1 and repaired[0]["details"]["calls"] == 2
    assert all(c["details"]["calls"] == 1 for c in judged if c is not repaired[0])
