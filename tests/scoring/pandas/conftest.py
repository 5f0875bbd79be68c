"""pandas_codegen tests: the kind registered (until ``_KIND_MODULES`` names it), one sandbox
client for the session, caches cleared between tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from assay.scoring.sandbox import SandboxClient, SandboxLimits, set_sandbox_client

KIND_MODULE = "assay.scoring.kinds.pandas_codegen"


def register_kind() -> None:
    from assay.scoring import kinds

    kinds._KIND_MODULES.setdefault("pandas_codegen", KIND_MODULE)


register_kind()


@pytest.fixture(scope="session", autouse=True)
def pandas_sandbox() -> Iterator[SandboxClient]:
    client = SandboxClient(limits=SandboxLimits(wall_seconds=5.0, cpu_seconds=5, memory_mb=512))
    set_sandbox_client(client)
    try:
        yield client
    finally:
        set_sandbox_client(None)
        client.close()


@pytest.fixture(autouse=True)
def _fresh_caches() -> Iterator[None]:
    from assay.scoring.pandas.execution import clear_caches

    clear_caches()
    yield
