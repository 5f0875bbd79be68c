"""The user-visible surface is what the snapshot says: moving code changes no route, schema name,
command, option, help text or criteria hash (tests/surface/snapshot.py says how to rewrite it on purpose)."""

from __future__ import annotations

import difflib

import pytest

from tests.surface.snapshot import SNAPSHOT_DIR, SURFACES, render


@pytest.mark.parametrize("name", sorted(SURFACES))
def test_the_surface_matches_its_snapshot(name):
    expected = (SNAPSHOT_DIR / name).read_text()
    actual = render(SURFACES[name]())
    if actual != expected:
        diff = "".join(difflib.unified_diff(expected.splitlines(True), actual.splitlines(True), "snapshot", "now", n=2))
        pytest.fail(f"{name} differs from its snapshot (python -m tests.surface.snapshot rewrites it):\n{diff[:6000]}")


def test_the_help_snapshot_covers_every_command_group():
    texts = SURFACES["help.json"]()
    assert {"assay", "assay run", "assay suite", "assay labels"} <= set(texts)
    assert all(text.strip() for text in texts.values())
