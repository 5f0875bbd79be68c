"""The shipped suites' criteria hashes are pinned: generalising the criteria model (issue 20) must not
make a single stored score stale. A failure here means old scores would be re-scored nightly."""

import json
from pathlib import Path

import pytest

from assay.scoring.suites.loader import load_suite

REPO_CONFIG = Path(__file__).resolve().parents[2] / "config"

PINNED = {
    "kql": "9ca804870e478f9342b96f017713e63fb0dbe30536bf0433447128defa152c61",
    "kql_strict": "c13356125044ffac029e5b4732cd685e5beb7dbcc9c90fb527b8f365903f01dc",
    "alert_session": "2021743a54edc9bda0f9c3cac83286aac569f5d68fb8864178207ec61fb47897",
    "pandas_codegen": "4cdb6d71383943d8b6f50b2a17e38bdad33c297ec38dad5b229c2dcb8bfee9a9",
}

# Criteria fields added after the pins; each must be left out of the canonical JSON when unset.
NEW_CRITERIA_KEYS = {"fields"}
NEW_COMPONENT_KEYS = {"plugin", "min_score"}


@pytest.mark.parametrize("name", sorted(PINNED))
def test_the_shipped_suites_keep_their_criteria_hash(name):
    assert load_suite(REPO_CONFIG, name, env={}).criteria_hash == PINNED[name]


@pytest.mark.parametrize("name", sorted(PINNED))
def test_new_optional_fields_are_absent_from_the_canonical_json(name):
    dumped = json.loads(load_suite(REPO_CONFIG, name, env={}).criteria.canonical_json())
    assert not NEW_CRITERIA_KEYS & set(dumped)
    for component in dumped["components"].values():
        assert not NEW_COMPONENT_KEYS & set(component)
        # A legacy judge component stays the boolean it always was.
        assert isinstance(component["judge"], bool)
