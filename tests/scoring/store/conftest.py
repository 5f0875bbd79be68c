"""Fixtures shared by the store's tests."""

from __future__ import annotations

import uuid

import pytest

from tests.conftest import _admin_exec


@pytest.fixture
def scratch_pg_url():
    name = f"assay_mig_{uuid.uuid4().hex[:8]}"
    _admin_exec(f'CREATE DATABASE "{name}"')
    yield f"postgresql+psycopg://postgres@127.0.0.1:5432/{name}"
    _admin_exec(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
