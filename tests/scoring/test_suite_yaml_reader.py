"""Reading a suite's YAML once within limits (issue 29): the same values as yaml.safe_load, and each
limit refused with its name before anything larger is built."""

from __future__ import annotations

import pytest
import yaml

from assay.scoring.errors import CriteriaError
from assay.scoring.suites.yaml_reader import MAX_NODES, SuiteTooLarge, load_suite_yaml
from tests.conftest import REPO

SUITE_FILES = sorted([*(REPO / "config" / "suites").glob("*.yaml"), *(REPO / "examples").rglob("*.yaml")])


@pytest.mark.parametrize("path", SUITE_FILES, ids=lambda p: str(p.relative_to(REPO)))
def test_shipped_yaml_reads_as_safe_load_reads_it(path) -> None:  # type: ignore[no-untyped-def]
    text = path.read_text()
    assert load_suite_yaml(text, source=path.name) == yaml.safe_load(text)


def test_a_file_suite_may_use_aliases_and_each_counts_as_the_values_it_repeats() -> None:
    assert load_suite_yaml("a: &x [1, 2]\nb: *x\n", source="s") == {"a": [1, 2], "b": [1, 2]}
    # 100 values repeated by 300 aliases: 30,000 values once expanded, over the limit.
    text = "base: &x [" + ", ".join(["1"] * 99) + "]\n" + "".join(f"k{n}: *x\n" for n in range(300))
    with pytest.raises(SuiteTooLarge, match=f"more than {MAX_NODES:,} values"):
        load_suite_yaml(text, source="s")


def test_an_alias_inside_its_own_anchor_is_refused() -> None:
    with pytest.raises(SuiteTooLarge, match="alias \\*x refers to a value that contains it"):
        load_suite_yaml("a: &x [1, *x]\n", source="s")


def test_an_api_suite_may_not_use_aliases() -> None:
    with pytest.raises(SuiteTooLarge, match="aliases \\(\\*x\\) are not accepted"):
        load_suite_yaml("a: &x 1\nb: *x\n", source="s", allow_aliases=False)


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("n: " + "9" * 4_301 + "\n", "a number of 4,301 characters is longer than the 100"),
        ("n: !!int '" + "9" * 101 + "'\n", "a number of 101 characters"),
        ("n: 1" + ":0" * 60 + "\n", "a number of 121 characters"),
        ("n: " + "1" * 99 + ".5\n", "a number of 101 characters"),
    ],
    ids=["digits", "tagged", "base-60", "float"],
)
def test_long_numbers_are_refused_before_python_reads_them(text: str, reason: str) -> None:
    with pytest.raises(SuiteTooLarge, match=reason):
        load_suite_yaml(text, source="s")


def test_a_long_string_of_digits_is_a_string_not_a_number() -> None:
    assert load_suite_yaml("s: '" + "9" * 5_000 + "'\n", source="s") == {"s": "9" * 5_000}


def test_bad_yaml_and_values_yaml_cannot_build_are_criteria_errors() -> None:
    with pytest.raises(CriteriaError, match="s: not valid YAML"):
        load_suite_yaml("a: [unclosed\n", source="s")
    with pytest.raises(CriteriaError, match="s: not valid YAML: month must be in 1..12"):
        load_suite_yaml("a: 2024-13-01\n", source="s")
