"""``assay migrate`` says what it did: created the schema, upgraded it, or found nothing to do."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.conftest import REPO


def migrate(db: Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ASSAY_")}
    env |= {"PYTHONPATH": str(REPO), "ASSAY_DATABASE_URL": f"sqlite:///{db}"}
    return subprocess.run([sys.executable, "-m", "assay.cli", "migrate"], env=env, capture_output=True, text=True, timeout=120)


def latest() -> str:
    return max(p.name.split("_")[0] for p in (REPO / "migrations" / "versions").glob("0*.py"))


def test_migrate_says_it_created_then_that_nothing_was_left(tmp_path):
    db = tmp_path / "store.db"
    first = migrate(db)
    assert first.returncode == 0, first.stderr
    assert f"created the schema at revision {latest()} (from empty)" in first.stderr
    second = migrate(db)
    assert second.returncode == 0, second.stderr
    assert f"already at the latest revision {latest()}" in second.stderr
    assert "created" not in second.stderr


def test_migrate_names_both_revisions_of_an_upgrade(tmp_path):
    from assay.scoring.store.db import migrate as upgrade

    db = tmp_path / "old.db"
    assert upgrade(f"sqlite:///{db}", "0013") == (None, "0013")
    result = migrate(db)
    assert result.returncode == 0, result.stderr
    assert f"upgraded the schema from revision 0013 to {latest()}" in result.stderr
