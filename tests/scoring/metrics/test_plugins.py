"""Plug-in metrics: discovered through the ``assay.metrics`` entry points of installed packages.

The example plug-in (examples/plugin, ``assay-example-metrics``) is installed by the README's test
command; the broken and conflicting plug-ins here are distributions written to a temporary folder
on ``sys.path``, found by ``importlib.metadata`` exactly as an installed one is."""

from __future__ import annotations

import importlib
import json
import logging
import sys
import textwrap
import uuid
from datetime import UTC, datetime
from importlib.metadata import version as installed_version
from pathlib import Path

import pytest
from pydantic import BaseModel, ConfigDict
from sqlalchemy import select

from assay.scoring.errors import CriteriaError
from assay.scoring.kinds import get_kind
from assay.scoring.kinds.generic import GenericItem
from assay.scoring.metrics import plugins, registry
from assay.scoring.metrics.catalog import build_metric, registered_metrics
from assay.scoring.metrics.plugins import ComponentResult, PluginArgs, PluginMetric
from assay.scoring.metrics.registry import MetricContext, PluginRef
from assay.scoring.pipeline.components import ComponentRef
from assay.scoring.pipeline.scorer import WorkUnit, compute
from assay.scoring.store.db import transaction
from assay.scoring.store.models import CriteriaDefinition, ScoreComponent
from assay.scoring.suites.criteria import register_suite
from assay.scoring.suites.loader import Criteria, Suite, parse_suite
from tests.conftest import REPO, wait_for

CONFIG = REPO / "config"
DIST = "assay-example-metrics"
EXAMPLE = PluginRef(distribution=DIST, version=installed_version(DIST))
CTX = MetricContext(now=datetime(2026, 1, 1, tzinfo=UTC))

SUITE = """
name: plugin_suite
kind: generic
threshold: 0.5
components:
  overlap:
    weight: 0.6
    metric: example.word_overlap
    version: 1
    args: {case_sensitive: true}
  exact:
    weight: 0.4
    metric: exact_match
    version: 1
"""


def suite(text: str = SUITE) -> Suite:
    return parse_suite(text, config_dir=CONFIG, env={}, source="plugin_suite.yaml")


def item(output: object = "The cat sat on the mat.", expected: str | None = "the cat sat") -> GenericItem:
    return GenericItem(input="Where is the cat?", output=output, expected=expected)


@pytest.fixture
def fresh_loader(monkeypatch):
    """A registry with Assay's own metrics only and a loader that has not run: what a new process sees."""
    registered_metrics()  # Assay's own metric modules imported (they register once per process)
    own = {name: reg for name, reg in registry._REGISTRY.items() if reg.info.plugin is None}
    monkeypatch.setattr(registry, "_REGISTRY", own)
    monkeypatch.setattr(plugins, "_state", plugins._LoaderState())


def write_distribution(root: Path, dist: str, version: str, module: str, source: str, entry: str | None = None) -> None:
    """An installed distribution as pip leaves it: a dist-info folder with its entry points, and its module."""
    info = root / f"{dist.replace('-', '_')}-{version}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n")
    (info / "entry_points.txt").write_text(f"[assay.metrics]\nmine = {entry or module + ':METRICS'}\n")
    (root / f"{module}.py").write_text(textwrap.dedent(source))


@pytest.fixture
def site(tmp_path, monkeypatch):
    """A folder on sys.path standing for site-packages; modules imported from it are forgotten after."""
    monkeypatch.syspath_prepend(str(tmp_path))
    importlib.invalidate_caches()
    before = set(sys.modules)
    yield tmp_path
    for name in set(sys.modules) - before:
        if getattr(sys.modules[name], "__file__", "") and str(tmp_path) in sys.modules[name].__file__:
            del sys.modules[name]


# --- discovery and suites ------------------------------------------------------------------------


def test_the_installed_example_plugin_is_discovered_with_its_distribution_and_version():
    metrics = registered_metrics()
    for name in ("example.word_overlap", "example.polite_tone"):
        assert metrics[name].plugin == EXAMPLE
        assert metrics[name].version == 1 and metrics[name].kinds == frozenset({"generic"})
    assert EXAMPLE.distribution == "assay-example-metrics" and EXAMPLE.version == "0.1.0"
    assert metrics["exact_match"].plugin is None  # Assay's own metrics name no plug-in


def test_a_suite_using_a_plugin_metric_stores_the_plugin_in_its_canonical_json():
    resolved = suite()
    assert resolved.criteria.components["overlap"].plugin == EXAMPLE
    assert resolved.criteria.components["exact"].plugin is None
    dumped = json.loads(resolved.criteria.canonical_json())
    assert dumped["components"]["overlap"]["plugin"] == {"distribution": DIST, "version": "0.1.0"}
    assert dumped["components"]["overlap"]["version"] == 1
    assert "plugin" not in dumped["components"]["exact"]  # an Assay metric's dump is unchanged


def with_plugin(criteria: Criteria, component: str, plugin: PluginRef | None, **changes: object) -> Criteria:
    spec = criteria.components[component].model_copy(update={"plugin": plugin, **changes})
    return criteria.model_copy(update={"components": {**criteria.components, component: spec}})


def test_the_plugin_version_and_the_metric_version_are_in_the_criteria_hash():
    criteria = suite().criteria
    other_release = with_plugin(criteria, "overlap", PluginRef(distribution=DIST, version="0.2.0"))
    other_dist = with_plugin(criteria, "overlap", PluginRef(distribution="someone-elses-metrics", version="0.1.0"))
    other_metric_version = with_plugin(criteria, "overlap", EXAMPLE, version=2)
    hashes = {c.criteria_hash for c in (criteria, other_release, other_dist, other_metric_version)}
    assert len(hashes) == 4
    assert with_plugin(criteria, "overlap", EXAMPLE).criteria_hash == criteria.criteria_hash


def test_a_suite_naming_an_unknown_plugin_metric_is_refused_with_the_reason():
    with pytest.raises(CriteriaError) as caught:
        suite(SUITE.replace("example.word_overlap", "example.word_overlapp"))
    assert "component 'overlap'" in caught.value.message
    assert "unknown metric 'example.word_overlapp'" in caught.value.message
    assert "example.word_overlap," in caught.value.message  # the known ones are listed


def test_a_plugin_metric_argument_is_validated_by_its_args_model():
    with pytest.raises(CriteriaError) as caught:
        suite(SUITE.replace("{case_sensitive: true}", "{case_sensitive: true, colour: blue}"))
    assert "component 'overlap'" in caught.value.message and "args.colour" in caught.value.message
    with pytest.raises(CriteriaError) as caught:
        suite(SUITE.replace("{case_sensitive: true}", "{min_word_length: 0}"))
    assert "args.min_word_length" in caught.value.message


def test_a_plugin_metric_version_the_plugin_does_not_provide_is_refused():
    with pytest.raises(CriteriaError) as caught:
        suite(SUITE.replace("version: 1\n    args: {case", "version: 2\n    args: {case"))
    assert "version 1 in this code but the criteria ask for version 2" in caught.value.message


def test_the_api_registers_a_suite_using_a_plugin_metric_and_refuses_an_unknown_one(api_client):
    yaml_body = {"Content-Type": "application/yaml"}
    r = api_client.post("/api/v1/suites", content=SUITE.replace("plugin_suite", "api_plugin_suite"), headers=yaml_body)
    assert r.status_code == 201, r.text
    criteria_hash = r.json()["version"]["criteria_hash"]
    with transaction() as session:
        stored = session.get(CriteriaDefinition, criteria_hash).criteria_content
    assert stored["components"]["overlap"]["plugin"] == {"distribution": DIST, "version": "0.1.0"}
    r = api_client.post(
        "/api/v1/suites", content=SUITE.replace("example.word_overlap", "example.nothing_like_it"), headers=yaml_body
    )
    assert r.status_code == 422, r.text
    assert "unknown metric 'example.nothing_like_it'" in r.text


# --- a process without the plug-in, or with another version ---------------------------------------


def test_a_process_without_the_plugin_cannot_build_its_metric_and_says_why():
    missing = PluginRef(distribution="assay-missing-metrics", version="1.0")
    with pytest.raises(CriteriaError) as caught:
        build_metric("missing.metric", 1, {}, "generic", missing)
    assert "unknown metric 'missing.metric'" in caught.value.message
    assert "plug-in assay-missing-metrics==1.0, which is not installed here" in caught.value.message


def test_a_process_with_another_version_of_the_plugin_cannot_build_its_metric_and_says_why():
    with pytest.raises(CriteriaError) as caught:
        build_metric("example.word_overlap", 1, {}, "generic", PluginRef(distribution=DIST, version="0.2.0"))
    assert caught.value.message == (
        "metric 'example.word_overlap' comes from plug-in assay-example-metrics==0.2.0 in the criteria "
        "but from plug-in assay-example-metrics==0.1.0 here"
    )
    with pytest.raises(CriteriaError, match="from Assay itself in the criteria"):
        build_metric("example.word_overlap", 1, {}, "generic", None)


def test_a_worker_without_the_plugin_or_with_another_version_fails_those_components_once(
    api_client, live_worker_factory
):
    """Through a live worker: the components whose plug-in this process cannot honour fail with the
    reason at their first attempt (never retried), the others are scored, and the batch completes."""
    resolved = suite()
    criteria = with_plugin(resolved.criteria, "overlap", PluginRef(distribution=DIST, version="0.0.9"))
    gone = resolved.criteria.components["overlap"].model_copy(
        update={"metric": "gone.metric", "plugin": PluginRef(distribution="assay-gone-metrics", version="2.0"), "args": {}}
    )
    criteria = criteria.model_copy(update={"components": {**criteria.components, "gone": gone}})
    criteria = criteria.model_copy(
        update={"components": {name: spec.model_copy(update={"weight": 1 / 3}) for name, spec in criteria.components.items()}}
    )
    with transaction() as session:
        register_suite(session, resolved.model_copy(update={"criteria": criteria}), origin="path")
    live_worker_factory()
    line = {"id": "a", "input": "q", "output": "the cat sat", "expected": "the cat sat"}
    r = api_client.post("/api/v1/batches", params={"suite": "plugin_suite"}, content=json.dumps(line).encode())
    assert r.status_code == 202, r.text
    batch_id = r.json()["batch_id"]

    def finished():
        view = api_client.get(f"/api/v1/batches/{batch_id}").json()
        return view if view["status"] not in ("planning", "running") else None

    wait_for(finished, timeout=60, message="the batch to finish")
    (result,) = api_client.get(f"/api/v1/batches/{batch_id}/results").json()["results"]
    comps = result["components"]
    assert result["status"] == "failed" and result["passed"] is not True
    assert comps["exact"]["status"] == "ok" and comps["exact"]["score"] == 1.0
    assert comps["overlap"]["status"] == "failed"
    assert comps["overlap"]["reason"] == (
        "metric 'example.word_overlap' comes from plug-in assay-example-metrics==0.0.9 in the criteria "
        "but from plug-in assay-example-metrics==0.1.0 here"
    )
    assert comps["gone"]["status"] == "failed"
    assert "plug-in assay-gone-metrics==2.0, which is not installed here" in comps["gone"]["reason"]
    with transaction() as session:
        attempts = dict(session.execute(select(ScoreComponent.component, ScoreComponent.attempts)).all())
    assert attempts == {"exact": 1, "overlap": 1, "gone": 1}  # each computed once: terminal, no retry


# --- what a plug-in metric returns ---------------------------------------------------------------


def test_the_example_metrics_score_items_through_the_registry():
    overlap = build_metric("example.word_overlap", 1, {}, "generic", EXAMPLE)
    result = overlap(item(), CTX)
    assert result.status == "ok" and result.score == 1.0 and result.details["missing"] == []
    result = overlap(item(output="A cat."), CTX)
    assert result.score == pytest.approx(1 / 3) and result.details["missing"] == ["sat", "the"]
    # The item lacks the value the args name: skipped with the reason, never a made-up number.
    assert overlap(item(expected=None), CTX) == ComponentResult.skipped("the item has no expected")
    polite = build_metric("example.polite_tone", 1, {"required": 2}, "generic", EXAMPLE)
    assert polite(item(output="Thank  you, happy to help!"), CTX).score == 1.0
    assert polite(item(output="Thanks."), CTX).score == 0.5
    assert polite(item(output="No."), CTX).score == 0.0


@pytest.fixture
def own_metric(fresh_loader):
    """Registers a plug-in metric computing what the test sets, as the loader would."""

    def register(function, args_model=None) -> object:
        metric = PluginMetric(name="test.own", version=1, args_model=args_model, function=function)
        registry.register_metric(
            metric.name, version=1, kinds=metric.kinds, factory=plugins._Factory(metric),
            args_model=args_model or plugins._NoArgs, plugin=PluginRef(distribution="test-own", version="1"),
        )
        return build_metric("test.own", 1, {}, "generic", PluginRef(distribution="test-own", version="1"))

    return register


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        (1.5, "plug-in metric 'test.own' returned 1.5, outside [0, 1]"),
        (-0.1, "plug-in metric 'test.own' returned -0.1, outside [0, 1]"),
        (float("nan"), "plug-in metric 'test.own' returned nan, outside [0, 1]"),
        (True, "plug-in metric 'test.own' returned bool, not a score in [0, 1] or a ComponentResult"),
        ("0.5", "plug-in metric 'test.own' returned str, not a score in [0, 1] or a ComponentResult"),
        (None, "plug-in metric 'test.own' returned NoneType, not a score in [0, 1] or a ComponentResult"),
    ],
)
def test_a_value_that_is_not_a_score_fails_the_component_never_clamped(own_metric, value, reason):
    assert own_metric(lambda item, args, ctx: value)(item(), CTX) == ComponentResult.failed(reason)


def test_a_score_or_a_component_result_is_taken_as_it_is(own_metric):
    blocked = ComponentResult.ok(0.2, {"why": "x"}, pass_blocker="too rude")
    answers = [1, 0.25, blocked]
    metric = own_metric(lambda item, args, ctx: answers.pop(0))
    assert metric(item(), CTX) == ComponentResult.ok(1.0)
    assert metric(item(), CTX) == ComponentResult.ok(0.25)
    assert metric(item(), CTX) is blocked


def test_a_plugin_metric_that_raises_fails_that_component_in_the_scorer(own_metric):
    def broken(item, args, ctx):
        raise ZeroDivisionError("division by zero")

    own_metric(broken)
    own = {"weight": 1.0, "metric": "test.own", "version": 1, "plugin": {"distribution": "test-own", "version": "1"}}
    criteria = Criteria.model_validate({"kind": "generic", "threshold": 0.5, "components": {"own": own}})
    work = WorkUnit(
        ref=ComponentRef(score_id=uuid.uuid4(), component="own", queue="metrics"),
        criteria_hash=criteria.criteria_hash,
        criteria=criteria,
        kind=get_kind("generic"),
        item=item(),
        context=CTX,
        judge_timeout=60.0,
    )
    assert compute(work, None) == ComponentResult.failed("metric test.own raised ZeroDivisionError: division by zero")


# --- loading -------------------------------------------------------------------------------------


def test_plugins_load_once_per_process(fresh_loader, monkeypatch):
    calls = []
    real = plugins.entry_points
    monkeypatch.setattr(plugins, "entry_points", lambda **kw: calls.append(kw) or real(**kw))
    registered_metrics()
    registered_metrics()
    build_metric("example.word_overlap", 1, {}, "generic", EXAMPLE)
    assert calls == [{"group": "assay.metrics"}]
    assert registered_metrics()["example.word_overlap"].plugin == EXAMPLE


def test_a_plugin_that_fails_to_import_is_logged_and_named_when_its_metric_is_asked_for(fresh_loader, site, caplog):
    write_distribution(site, "broken-metrics", "1.0", "broken_metrics_mod", "import a_dependency_that_is_not_installed\n")
    with caplog.at_level(logging.ERROR, logger="assay.scoring.metrics.plugins"):
        metrics = registered_metrics()  # no crash: the API and workers keep running
    assert "example.word_overlap" in metrics and not any(n.startswith("broken") for n in metrics)
    assert "broken-metrics==1.0" in caplog.text and "a_dependency_that_is_not_installed" in caplog.text
    with pytest.raises(CriteriaError) as caught:
        suite(SUITE.replace("example.word_overlap", "broken.metric"))
    message = caught.value.message
    assert "unknown metric 'broken.metric'" in message
    assert (
        "not loaded: plug-in broken-metrics==1.0 (entry point 'mine' = 'broken_metrics_mod:METRICS'): "
        "ModuleNotFoundError: No module named 'a_dependency_that_is_not_installed'"
    ) in message


def test_an_entry_point_naming_something_else_than_plugin_metrics_is_refused(fresh_loader, site):
    write_distribution(site, "odd-metrics", "3.1", "odd_metrics_mod", "METRICS = {'not': 'a metric'}\n")
    registered_metrics()
    assert plugins.load_failures() == [
        (
            "plug-in odd-metrics==3.1 (entry point 'mine' = 'odd_metrics_mod:METRICS'): "
            "it names dict, not a PluginMetric or a list of them"
        )
    ]


def test_a_plugin_cannot_take_a_name_another_plugin_registered(fresh_loader, site):
    # Loaded after assay-example-metrics (by distribution name), so the example keeps its metric.
    write_distribution(
        site, "copycat-metrics", "1.0", "copycat_mod",
        """
        from assay.scoring.metrics.plugins import PluginMetric
        METRICS = [
            PluginMetric(name="example.word_overlap", version=1, function=lambda item, args, ctx: 1.0),
            PluginMetric(name="copycat.fine", version=1, function=lambda item, args, ctx: 1.0),
        ]
        """,
    )
    metrics = registered_metrics()
    assert metrics["example.word_overlap"].plugin == EXAMPLE
    assert metrics["copycat.fine"].plugin == PluginRef(distribution="copycat-metrics", version="1.0")
    (failure,) = plugins.load_failures()
    assert failure.startswith("plug-in copycat-metrics==1.0 (entry point 'mine' = 'copycat_mod:METRICS'): ")
    assert "metric 'example.word_overlap' not registered" in failure and "already registered by plug-in assay-example-metrics" in failure


def test_the_distribution_name_is_recorded_as_pip_normalises_it(fresh_loader, site):
    write_distribution(
        site, "Fancy_Name.Metrics", "1.0", "fancy_mod",
        """
        from assay.scoring.metrics.plugins import PluginMetric
        METRICS = PluginMetric(name="fancy.one", version=3, function=lambda item, args, ctx: 0.5)
        """,
    )
    info = registered_metrics()["fancy.one"]
    assert info.plugin == PluginRef(distribution="fancy-name-metrics", version="1.0") and info.version == 3
    # Without an args model the metric takes no arguments.
    with pytest.raises(CriteriaError, match="args.x: Extra inputs are not permitted"):
        build_metric("fancy.one", 3, {"x": 1}, "generic", info.plugin)


# --- the PluginMetric API ------------------------------------------------------------------------


def score(item, args, ctx):  # a valid plug-in function for the checks below
    return 1.0


class LaxArgs(BaseModel):
    x: int = 1


@pytest.mark.parametrize(
    ("changes", "error"),
    [
        ({"name": "no_namespace"}, "use a namespace and a name"),
        ({"name": "bad name.x"}, "use a namespace and a name"),
        ({"name": "ns."}, "use a namespace and a name"),
        ({"version": 0}, "version is an integer >= 1, got 0"),
        ({"version": "1"}, "version is an integer >= 1, got '1'"),
        ({"version": True}, "version is an integer >= 1, got True"),
        ({"function": "score"}, "function must be callable"),
        ({"args_model": dict}, "args_model must be a pydantic model class"),
        ({"args_model": LaxArgs}, "args_model must refuse unknown arguments"),
        ({"kinds": "generic"}, "kinds is a non-empty tuple of kind names"),
        ({"kinds": ()}, "kinds is a non-empty tuple of kind names"),
    ],
)
def test_a_plugin_metric_declaration_is_checked_when_the_plugin_is_imported(changes, error):
    declared = {"name": "ns.metric", "version": 1, "function": score, **changes}
    with pytest.raises((TypeError, ValueError), match=error):
        PluginMetric(**declared)


def test_a_valid_declaration_keeps_what_it_was_given():
    class StrictArgs(BaseModel):
        model_config = ConfigDict(extra="forbid")

    class Args(PluginArgs):
        y: int = 2

    for args_model in (StrictArgs, Args, None):
        metric = PluginMetric(name="ns.sub.metric-1", version=2, function=score, args_model=args_model, kinds=("generic", "kql"))
        assert (metric.name, metric.version, metric.args_model, metric.kinds) == ("ns.sub.metric-1", 2, args_model, ("generic", "kql"))


def test_a_plugin_metric_declares_a_work_bound_checked_before_it_runs(fresh_loader, site):
    write_distribution(
        site, "bounded-metrics", "1.0", "bounded_mod",
        """
        from assay.scoring.metrics.plugins import PluginMetric, Work, WorkBound

        CALLS = []

        def words(args, item):
            count = len(item.output.split())
            return Work(count, f"{count} output words")

        def score(item, args, ctx):
            CALLS.append(item.output)
            return 1.0

        METRICS = [PluginMetric(name="bounded.words", version=1, function=score, bounds=(WorkBound("words", 3, words),))]
        """,
    )
    plugin = PluginRef(distribution="bounded-metrics", version="1.0")
    metric = build_metric("bounded.words", 1, {}, "generic", plugin)
    assert metric(item(output="one two three"), CTX) == ComponentResult.ok(1.0)
    over = metric(item(output="one two three four"), CTX)
    assert over.status == "failed"
    assert over.reason == "too much work for one item: 4 output words = 4 words, over the bound of 3 words per item"
    assert over.details["work_bound"] == {"unit": "words", "amount": 4, "limit": 3, "sizes": "4 output words"}
    assert sys.modules["bounded_mod"].CALLS == ["one two three"]  # never called over the bound
