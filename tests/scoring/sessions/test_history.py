"""The history-service client against the loopback fake: sessions fetched, errors mapped."""

from __future__ import annotations

import socket

import pytest

from assay.scoring.errors import NotFound
from assay.scoring.sessions.history import (
    HistoryClient,
    HistoryServiceError,
    HistoryServiceTimeout,
)
from tests.fakes.history_server import FakeHistory
from tests.scoring.sessions.helpers import make_session


@pytest.fixture(scope="module")
def fake():
    with FakeHistory() as server:
        yield server


@pytest.fixture
def client(fake):
    fake.failures.clear()
    return HistoryClient(fake.base_url, timeout=1.0)


def test_fetches_a_session_ignoring_unknown_keys(fake, client):
    fake.put(make_session("h/1 with space"))
    item = client.fetch("h/1 with space")
    assert item.session_id == "h/1 with space" and item.completed
    assert fake.calls[-1] == "h/1 with space"


def test_unknown_session_is_not_found(client):
    with pytest.raises(NotFound, match="history service .* does not know it"):
        client.fetch("missing")


@pytest.mark.parametrize(
    ("failure", "error", "message"),
    [
        ("error", HistoryServiceError, "answered 500"),
        ("not_json", HistoryServiceError, "not JSON"),
        ("invalid", HistoryServiceError, "invalid session: alert_data: Field required"),
        ("slow", HistoryServiceTimeout, "did not answer within 1s"),
    ],
)
def test_failures_map_to_clear_errors(fake, client, failure, error, message):
    fake.put(make_session("h2"))
    fake.fail(failure, delay=3.0)
    with pytest.raises(error, match=message) as caught:
        client.fetch("h2")
    assert caught.value.status_code == (504 if failure == "slow" else 502)


def test_unreachable_service_is_a_502():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(HistoryServiceError, match="cannot reach"):
        HistoryClient(f"http://127.0.0.1:{port}", timeout=1.0).fetch("x")


def test_a_service_answering_another_session_is_refused(fake, client):
    fake.put({**make_session("other"), "session_id": "other"})
    fake.sessions["asked"] = make_session("other")
    with pytest.raises(HistoryServiceError, match="returned session 'other' when asked for 'asked'"):
        client.fetch("asked")
