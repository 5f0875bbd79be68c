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
