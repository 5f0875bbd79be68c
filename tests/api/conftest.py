"""Fixtures shared by the API tests."""

from tests.api.principals import principals  # noqa: F401  (the fixture: several keys and proxy users)
