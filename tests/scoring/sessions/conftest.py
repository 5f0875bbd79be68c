"""Fixtures of the alert-session tests. Their modules skip (saying what is missing) until the core
lines they need are applied: see ``helpers.skip_unless_core_ready``."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.scoring.sessions.helpers import StubJudge


@pytest.fixture
def stub_judge(monkeypatch: pytest.MonkeyPatch) -> Iterator[StubJudge]:
    stub = StubJudge()
    monkeypatch.setattr("assay.scoring.judge.service.run_judge", stub)
    yield stub
