"""A distributed worker's sandbox work folder (the executor's copies of the datasets): nobody else may
enter it while the worker runs, and it is gone when the worker stops — warm shutdown, or killed."""

from __future__ import annotations

import stat

import pytest

from tests.conftest import REPO, wait_for
from tests.workers.test_end_to_end import submit, wait_finished

INLINE = REPO / "examples" / "pandas_items.jsonl"


@pytest.mark.parametrize("stop", ["sigterm", "sigkill"])
def test_worker_sandbox_folder_is_private_and_removed_when_the_worker_stops(api_client, live_worker_factory, tmp_path, stop):
    workdirs = tmp_path / "sandbox"
    workdirs.mkdir()
    worker = live_worker_factory({"ASSAY_SANDBOX_WORKDIR": str(workdirs)}, concurrency=2)
    batch_id = submit(api_client, INLINE.read_bytes(), suite="pandas_codegen")
    assert wait_finished(api_client, batch_id, timeout=180)["status"] == "completed"
    (folder,) = workdirs.iterdir()
    mode = stat.S_IMODE(folder.stat().st_mode)
    assert mode & 0o007 == 0 and mode in (0o700, 0o710), oct(mode)
    if stop == "sigterm":
        worker.stop()
    else:
        worker.kill()  # the executor outlives nothing: its parent-death signal makes it clean up
    try:
        wait_for(lambda: not folder.exists(), timeout=30, message="the sandbox work folder to be removed")
    except AssertionError:
        raise AssertionError(f"left behind: {sorted(str(p) for p in folder.rglob('*'))}") from None
