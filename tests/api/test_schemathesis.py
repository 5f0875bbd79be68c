"""Property-based requests generated from the OpenAPI schema: whatever comes in, no 5xx goes out.

A short run in the default tests (a few examples per operation); raise ASSAY_SCHEMATHESIS_EXAMPLES
for a long one.
"""

import os

import pytest
import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis.checks import not_a_server_error

from tests.conftest import API_KEY

EXAMPLES = int(os.environ.get("ASSAY_SCHEMATHESIS_EXAMPLES", "8"))


@pytest.fixture
def api_schema(clean_db, monkeypatch):
    from assay.api.app import create_app

    # The planner hand-off is not under test here; generated uploads must not reach a worker.
    monkeypatch.setattr("assay.api.routes.batches.start_planner", lambda batch_id: None)
    monkeypatch.setattr("assay.api.routes.score_query.publish_components", lambda refs: None)
    monkeypatch.setattr("assay.api.routes.score_query.MAX_WAIT_SECONDS", 0.0)
    monkeypatch.setattr("assay.api.routes.sessions.publish_components", lambda refs: None)
    monkeypatch.setattr("assay.api.routes.sessions.start_planner", lambda batch_id: None)
    monkeypatch.setattr("assay.api.routes.calibration.start_planner", lambda batch_id: None)
    return schemathesis.openapi.from_asgi("/openapi.json", create_app())


schema = schemathesis.pytest.from_fixture("api_schema")


@schema.parametrize()
@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
def test_no_server_errors(case):
    case.call_and_validate(headers={"Authorization": f"Bearer {API_KEY}"}, checks=[not_a_server_error])
