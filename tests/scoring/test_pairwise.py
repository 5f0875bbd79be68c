"""The pairwise rubric and the planning of pairs (``suites.pairwise``, ``trust.pairwise``), without workers."""

from __future__ import annotations

import itertools

import pytest
import yaml

from assay.scoring.errors import CriteriaError
from assay.scoring.judge.prompt import template_placeholders
from assay.scoring.kinds.pairwise import A_FIRST, B_FIRST
from assay.scoring.store.models import SuiteRecord
from assay.scoring.suites.loader import load_model_catalog, parse_suite
from assay.scoring.trust.pairwise import ALL_PAIRS_MAX_SYSTEMS, pairwise_criteria, run_suite_name, system_pairs
from assay.settings import get_settings

CONFIG = get_settings().config_dir
BASE = {
    "name": "pw",
    "kind": "generic",
    "threshold": 0.5,
    "components": {"exact": {"weight": 1.0, "metric": "exact_match", "version": 1}},
}


def parse(**extra):  # type: ignore[no-untyped-def]
    return parse_suite(yaml.safe_dump({**BASE, **extra}), config_dir=CONFIG, env={}, origin="api")


def criteria_of(section: dict):  # type: ignore[no-untyped-def]
    suite = parse(pairwise=section)
    record = SuiteRecord(name=suite.name, kind="generic", options=suite.options.model_dump(mode="json"))
    return pairwise_criteria(record, load_model_catalog(CONFIG))


def test_the_pairwise_section_is_outside_the_suites_criteria_hash():
    plain = parse()
    with_rubric = parse(pairwise={"rubric": "Which is better?"})
    edited = parse(pairwise={"rubric": "Which is more correct?"})
    assert plain.criteria_hash == with_rubric.criteria_hash == edited.criteria_hash
    # A suite without the section dumps its options as it always did.
    assert "pairwise" not in plain.options.model_dump(mode="json")


def test_the_pairwise_rubric_has_its_own_hash_and_the_second_order_swaps_the_outputs():
    one = criteria_of({"rubric": "Which is better?"})
    other = criteria_of({"rubric": "Which is more correct?"})
    assert one.criteria_hash != other.criteria_hash
    assert one.kind == "pairwise" and set(one.components) == {A_FIRST, B_FIRST}
    first, second = one.judge_for(A_FIRST), one.judge_for(B_FIRST)
    assert first.template.index("{{output_a}}") < first.template.index("{{output_b}}")
    assert second.template.index("{{output_b}}") < second.template.index("{{output_a}}")
    assert first.verdict.model.model_json_schema() == second.verdict.model.model_json_schema()
    # Each order scores B's share: "a" is A's win when A is shown first, B's win when B is.
    assert first.verdict.score(first.verdict.model(reasoning="r", label="a"))[0] == 0.0
    assert second.verdict.score(second.verdict.model(reasoning="r", label="a"))[0] == 1.0
    assert {first.verdict.score(first.verdict.model(reasoning="r", label="tie"))[0]} == {0.5}


@pytest.mark.parametrize(
    ("section", "message"),
    [
        ({"rubric": "x", "prompt": "{{input}} {{output_a}}"}, "lacks {{output_b}}"),
        ({"rubric": "Compare {{output_a}}"}, "pairwise.rubric: is fixed text"),
        ({"rubric": "x", "verdict": "scale"}, "pairwise.verdict: Extra inputs are not permitted"),
        ({"prompt": "{{output_a}} {{output_b}}"}, "pairwise.rubric: Field required"),
        ({"rubric": "x", "model": "no-such-model"}, "pairwise:"),
    ],
)
def test_a_bad_pairwise_section_makes_the_suite_invalid_naming_the_field(section, message):
    with pytest.raises(CriteriaError, match=None) as caught:
        parse(pairwise=section)
    assert message in caught.value.message


def test_no_suite_may_name_the_builtin_pairwise_kind():
    with pytest.raises(CriteriaError, match="built by Assay itself"):
        parse_suite(yaml.safe_dump({**BASE, "kind": "pairwise"}), config_dir=CONFIG, env={}, origin="api")


def test_a_run_s_suite_name_is_never_a_suite_s():
    assert run_suite_name("s") == "s:pairwise"
    assert len(run_suite_name("x" * 100)) == 100


def test_a_few_systems_are_compared_in_every_pair():
    systems = list(range(ALL_PAIRS_MAX_SYSTEMS))
    assert system_pairs(systems, "q1") == list(itertools.combinations(systems, 2))
    assert system_pairs([1, 3], "q1") == [(1, 3)]


def test_many_systems_get_a_cycle_per_item_that_connects_them_all():
    systems = list(range(12))
    seen = set()
    for n in range(200):
        pairs = system_pairs(systems, f"item{n}")
        assert len(pairs) == len(systems) and all(a < b for a, b in pairs)
        reached = {0}
        while True:  # every system reachable from system 0 through this item's pairs alone
            more = {y for a, b in pairs for x, y in ((a, b), (b, a)) if x in reached} - reached
            if not more:
                break
            reached |= more
        assert reached == set(systems)
        seen.update(pairs)
        assert system_pairs(systems, f"item{n}") == pairs  # drawn from the item's key: the same every time
    assert len(seen) == len(list(itertools.combinations(systems, 2)))  # over many items every pair meets


def test_the_prompt_names_both_outputs_by_default():
    criteria = criteria_of({"rubric": "Which is better?"})
    assert {"input", "output_a", "output_b"} <= set(template_placeholders(criteria.judge_for(A_FIRST).template))
