"""A sandbox client with tight limits, shared by the module's tests (the executor is started once)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from assay.scoring.intake.datasets import Table
from assay.scoring.sandbox import DatasetRef, SandboxClient, SandboxLimits

TIGHT = SandboxLimits(
    wall_seconds=3.0,
    cpu_seconds=2,
    memory_mb=256,
    file_size_mb=4,
    open_files=64,
    threads=8,
    output_bytes=2 * 1024 * 1024,
    max_rows=50_000,
    stdout_bytes=32 * 1024,
)

EMPLOYEES_CSV = b"name,dept,salary\nann,eng,100\nbob,eng,80\ncid,ops,60\n"


@pytest.fixture(scope="module")
def sandbox() -> Iterator[SandboxClient]:
    client = SandboxClient(limits=TIGHT)
    try:
        client.hello()
        yield client
    finally:
        client.close()


@pytest.fixture
def employees() -> DatasetRef:
    return DatasetRef("test:employees", [Table("employees", "csv", EMPLOYEES_CSV)])


def still_serving(client: SandboxClient, pid: int | None = None) -> None:
    """The executor answers the next run (and is the same process, when ``pid`` is given)."""
    outcome = client.run("result = 41 + 1")
    assert outcome.ok and outcome.result is not None and outcome.result["rows"] == [[42]], outcome
    if pid is not None:
        assert client.pid == pid, "the executor was restarted"
