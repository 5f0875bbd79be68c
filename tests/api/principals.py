"""Several principals against one app: the API keys ``alice``, ``bob`` and ``ops`` (an operator of
``ASSAY_OPERATOR_KEYS``) beside the run's own key, and users arriving through the trusted proxy."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient
from pydantic import SecretStr

from assay.settings import get_settings

KEYS = {"alice": "alice-key-" + "a" * 32, "bob": "bob-key-" + "b" * 32, "ops": "ops-key-" + "o" * 32}
OPERATORS = ["ops"]
TRUSTED_PROXY = ("10.255.255.254", 40000)  # ASSAY_TRUSTED_PROXIES of tests/conftest.py


class Principals:
    def __init__(self, app: Any) -> None:
        self.app = app

    def key(self, name: str) -> TestClient:
        """A client that signs in with the API key named ``name``."""
        return TestClient(self.app, headers={"Authorization": f"Bearer {KEYS[name]}"})

    def proxy(self, user: str) -> TestClient:
        """A client that is ``user`` as the trusted proxy forwards it (same-origin, as a page)."""
        return TestClient(
            self.app, client=TRUSTED_PROXY, headers={"X-Forwarded-User": user, "Origin": "http://testserver"}
        )


@pytest.fixture
def principals(api_client, monkeypatch) -> Principals:
    settings = get_settings()
    extra = [SecretStr(f"{name}:{key}") for name, key in KEYS.items()]
    monkeypatch.setattr(settings, "api_keys", [*settings.api_keys, *extra])
    monkeypatch.setattr(settings, "operator_keys", OPERATORS)
    return Principals(api_client.app)
