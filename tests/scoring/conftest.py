"""Fixtures shared by the scoring tests."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.fakes.configs import local_config_dir


@pytest.fixture
def local_config(tmp_path: Path) -> Path:
    """The shipped config with the commented local (vLLM) provider switched on."""
    return local_config_dir(tmp_path)
