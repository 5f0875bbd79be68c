"""``assay.scoring.suites.validation``: every problem of a suite at once, in plain words."""

from __future__ import annotations

from pathlib import Path

import yaml

from assay.scoring.suites.validation import validate_suite_file
from tests.conftest import REPO

CONFIG = REPO / "config"


def validate(tmp_path: Path, suite: dict) -> dict[str, str]:
    path = tmp_path / "suite.yaml"
    path.write_text(yaml.safe_dump(suite, sort_keys=False))
    report = validate_suite_file(path, CONFIG, env={})
    return {p.where: p.message for p in report.problems}


def metric(weight: float) -> dict:
    return {"weight": weight, "metric": "length_words", "version": 1, "args": {"min": 1}}


def test_weights_short_of_1_say_which_to_raise(tmp_path):
    problems = validate(tmp_path, {"name": "s", "kind": "generic", "threshold": 0.5, "components": {"a": metric(0.5), "b": metric(0.3)}})
    assert problems == {"components": "the weights add up to 0.8, not 1 (a 0.5 + b 0.3): raise them by 0.2 in all, e.g. b 0.3 → 0.5"}


def test_judge_true_problems_are_named_beside_the_others(tmp_path):
    suite = {
        "name": "s",
        "kind": "generic",
        "threshold": 2,
        "components": {"a": {"weight": 0.5, "judge": True}, "b": {"weight": 0.5, "judge": True}},
    }
    problems = validate(tmp_path, suite)
    assert problems["threshold"] == "should be between 0 and 1 (a total's range), not 2"
    assert problems["components"] == "a, b all say judge: true; at most one may (give the others their own rubric)"
    assert problems["components.a.judge"] == "judge: true needs the suite's judge section, which is missing"


def test_a_clean_suite_resolves_as_a_run_would(tmp_path):
    path = tmp_path / "suite.yaml"
    path.write_text(yaml.safe_dump({"name": "s", "kind": "generic", "threshold": 0.5, "components": {"a": metric(1.0)}}))
    report = validate_suite_file(path, CONFIG, env={})
    assert report.valid and report.problems == [] and report.suite is not None and report.suite.name == "s"


def test_metadata_placeholders_are_open_without_a_mapping_of_metadata_keys(tmp_path):
    rubric = {"rubric": "Good?", "prompt": "{{metadata.anything}} {{input}} {{outptu}}", "verdict": {"type": "score"}}
    problems = validate(
        tmp_path, {"name": "s", "kind": "generic", "threshold": 0.5, "components": {"j": {"weight": 1.0, "judge": rubric}}}
    )
    # Metadata keys are the items' own without a mapping naming them: only the field typo is a problem.
    assert list(problems) == ["components.j.judge"]
    assert problems["components.j.judge"].startswith("{{outptu}} is not a field of this suite's items (did you mean {{output}}?)")


def jury_suite(prompt: str) -> dict:
    judges = [{"provider": "anthropic", "model": "claude-sonnet-5-5"}, {"provider": "anthropic", "model": "claude-haiku-5-5"}]
    panel = {"rubric": "Good?", "prompt": prompt, "verdict": {"type": "score"}, "aggregate": "mean", "judges": judges}
    fields = {"input": "q", "output": "a", "metadata.product": "p"}
    return {"name": "s", "kind": "generic", "threshold": 0.5, "fields": fields, "components": {"panel": {"weight": 1.0, "judge": panel}}}


def test_a_jurys_prompt_placeholders_are_checked_and_sample_items_go_through_it(tmp_path):
    """A jury's members share one prompt: its typos are problems, and a sample item's missing field is
    the jury's finding (a jury makes no judge call of its own to ask a template of)."""
    problems = validate(tmp_path, jury_suite("{{input}} {{output}} {{metadata.prodct}}"))
    assert list(problems) == ["components.panel.judge"]
    assert problems["components.panel.judge"].startswith("{{metadata.prodct}} is not a field of this suite's items")

    path = tmp_path / "jury.yaml"
    path.write_text(yaml.safe_dump(jury_suite("{{input}} {{output}} {{metadata.product}}"), sort_keys=False))
    items = tmp_path / "sample.jsonl"
    items.write_text('{"q": "q1", "a": "a1", "p": "x"}\n{"q": "q2", "a": "a2"}\n')
    report = validate_suite_file(path, CONFIG, items=items, env={})
    assert report.problems == [] and report.items_checked == 2
    assert [(f.line, f.outcome, f.component) for f in report.findings] == [(2, "fail", "panel")]
