"""The example plug-in's own tests: its metrics as Assay runs them (found through the installed
entry point, arguments checked by their args models) and a suite file that uses them.

Run from Assay's checkout (`.venv/bin/pytest` runs them too) or from this folder: `pytest tests`."""

from __future__ import annotations

from datetime import UTC, datetime
from importlib.metadata import version
from pathlib import Path

import assay_example_metrics
import pytest

from assay.scoring.errors import CriteriaError
from assay.scoring.kinds.generic import GenericItem
from assay.scoring.metrics.catalog import build_metric, registered_metrics
from assay.scoring.metrics.registry import MetricContext, PluginRef
from assay.scoring.suites.loader import parse_suite
from assay.settings import get_settings

HERE = Path(__file__).resolve().parent.parent
PLUGIN = PluginRef(distribution="assay-example-metrics", version=version("assay-example-metrics"))
CTX = MetricContext(now=datetime(2026, 1, 1, tzinfo=UTC))


def run(name: str, args: dict, **item: object):
    fields = {"input": "q", "output": "", **item}
    return build_metric(name, 1, args, "generic", PLUGIN)(GenericItem(**fields), CTX)


def test_the_entry_point_registers_both_metrics_with_this_distribution():
    metrics = registered_metrics()
    assert {n for n, info in metrics.items() if info.plugin == PLUGIN} == {"example.word_overlap", "example.polite_tone"}
    assert [m.name for m in assay_example_metrics.METRICS] == ["example.word_overlap", "example.polite_tone"]


@pytest.mark.parametrize(
    ("args", "output", "expected", "score", "missing"),
    [
        ({}, "Paris is the capital of France.", "The capital is Paris", 1.0, []),
        ({}, "It is Lyon.", "The capital is Paris", 0.25, ["capital", "paris", "the"]),
        ({"case_sensitive": True}, "the capital is paris", "The capital is Paris", 0.5, ["Paris", "The"]),
        ({"min_word_length": 4}, "capital", "The capital is Paris", 0.5, ["paris"]),
        ({"reference": "blue sky"}, "The sky is blue", None, 1.0, []),  # a constant reference
        ({}, {"city": "Paris"}, "Paris city", 1.0, []),  # a JSON output is matched as its JSON text
    ],
)
def test_word_overlap_is_the_share_of_reference_words_found(args, output, expected, score, missing):
    result = run("example.word_overlap", args, output=output, expected=expected)
    assert result.status == "ok" and result.score == pytest.approx(score)
    assert result.details["missing"] == missing


def test_word_overlap_skips_an_item_it_cannot_score():
    assert run("example.word_overlap", {}, output="x").reason == "the item has no expected"
    assert run("example.word_overlap", {}, output="x", expected="?!").reason == "the reference has no words to look for"
    reference = {"reference": {"from": "metadata.gold"}}
    assert run("example.word_overlap", reference, output="a b", metadata={"gold": "a c"}).score == 0.5


@pytest.mark.parametrize(
    ("args", "output", "score"),
    [
        ({}, "Thanks for asking!", 1.0),
        ({}, "Go away.", 0.0),
        ({}, "Thanksgiving is in November.", 0.0),  # whole words only
        ({"required": 2}, "Sorry for the wait. Thank\nyou!", 1.0),  # any whitespace inside a phrase
        ({"required": 2}, "PLEASE hold.", 0.5),
        ({"phrases": ["cheers"], "required": 1}, "Cheers, mate", 1.0),
    ],
)
def test_polite_tone_counts_different_polite_phrases(args, output, score):
    assert run("example.polite_tone", args, output=output).score == score


@pytest.mark.parametrize(
    ("name", "args", "field"),
    [
        ("example.word_overlap", {"min_word_length": 0}, "args.min_word_length"),
        ("example.word_overlap", {"reference": {"from": "gold"}}, "args.reference"),
        ("example.polite_tone", {"phrases": []}, "args.phrases"),
        ("example.polite_tone", {"phrases": ["  "]}, "args.phrases"),
        ("example.polite_tone", {"required": 0}, "args.required"),
        ("example.polite_tone", {"tone": "warm"}, "args.tone"),
    ],
)
def test_bad_arguments_are_refused_naming_the_field(name, args, field):
    with pytest.raises(CriteriaError, match=field):
        build_metric(name, 1, args, "generic", PLUGIN)


def test_the_example_suite_resolves_with_the_plugin_recorded():
    suite_file = HERE / "polite_answers.yaml"
    suite = parse_suite(suite_file.read_text(), config_dir=get_settings().config_dir, env={}, source=str(suite_file), origin="path")
    components = suite.criteria.components
    assert components["overlap"].plugin == PLUGIN and components["polite"].plugin == PLUGIN
    assert components["polite"].min_score == 0.5
