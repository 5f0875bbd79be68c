"""The app the dashboard, report and metrics tests serve. Imports nothing from ``tests.conftest``
(which sets a new test database name when imported), so ``uvicorn tests.dashboard.app_factory:make_app
--factory`` in a subprocess serves the test run's database."""

from __future__ import annotations

from typing import Any


def make_app() -> Any:
    from assay.api.app import create_app

    return create_app()
