"""The same data in both stores prints the same: `status`, `compare`, `diff` and `noise` run as subprocesses through a live API (Postgres) and on an embedded store
(SQLite, --db) seeded with the same rows (the known cases of tests/scoring/test_compare.py and
test_diff.py), and their tables, --json documents and CSV files are compared once the ids and
times that differ between two stores are masked."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.cli.test_cli import assay
from tests.cli.test_gate_cli import embedded_env
from tests.conftest import API_KEY, REPO, worker_env
from tests.dashboard.support import api_process

UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
TIME = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)?")
# A running batch's pace is measured against the clock: it differs between any two reads.
PACE = re.compile(r'"(rate_per_second|eta_seconds)": [^,\n]+')

SEED = """
import sys
from pathlib import Path
from assay.workers import embedded
embedded.configure_environment(Path(sys.argv[1]))
from assay.scoring.store.db import migrate, transaction
from assay.scoring.suites.criteria import register_all_suites
from assay.settings import get_settings
migrate()
with transaction() as session:
    register_all_suites(session, get_settings().config_dir)
with transaction() as session:
    {call}
print(result)
"""


def seed_embedded(db: Path, call: str) -> str:
    """Run ``call`` (``result = seed(session)``) on a fresh embedded store at ``db``; its printed result."""
    done = subprocess.run(
        [sys.executable, "-c", SEED.format(call=call), str(db)], env=embedded_env(), cwd=REPO,
        capture_output=True, text=True, timeout=120,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout.strip()


def masked(text: str) -> str:
    return PACE.sub(r'"\1": <pace>', TIME.sub("<time>", UUID.sub("<id>", text)))


def in_id_order(document: str) -> dict:
    """A diff's JSON, masked, its item lists by external id: items with the same |delta| are listed by
    item id, which the two stores drew at random."""
    parsed = json.loads(masked(document))
    for key in ("items", "flips"):
        parsed[key] = sorted(parsed[key], key=lambda row: row["external_id"])
    return parsed


@pytest.fixture
def api_server(clean_db):
    with api_process() as url:
        yield url


def both(api_url: str, db: Path, tmp_path: Path, *args: str) -> tuple[subprocess.CompletedProcess, subprocess.CompletedProcess]:
    """The command through the API, then on the embedded store (from a folder without a default store,
    so --db is what is read)."""
    api_env = worker_env({"ASSAY_API_URL": api_url, "ASSAY_API_KEY": API_KEY, "COLUMNS": "250"})
    through_api = assay(*args, env=api_env)
    embedded = assay(*args, "--db", str(db), env=embedded_env() | {"COLUMNS": "250"}, cwd=tmp_path)
    return through_api, embedded


def test_compare_status_and_noise_print_the_same_in_both_stores(api_server, tmp_path):
    from assay.scoring.store.db import transaction
    from tests.scoring.test_compare import seed

    with transaction() as session:
        a, b = seed(session)
    db = tmp_path / "e.db"
    a_db, b_db = seed_embedded(db, "from tests.scoring.test_compare import seed; result = ' '.join(map(str, seed(session)))").split()
    cases = [
        (("compare", str(a), str(b), "--limit", "3"), ("compare", a_db, b_db, "--limit", "3")),
        (("compare", str(a), str(b), "--json"), ("compare", a_db, b_db, "--json")),
        (("status", str(b)), ("status", b_db)),
        (("status", str(a), "--json"), ("status", a_db, "--json")),
        (("noise", "--suite", "s1"), ("noise", "--suite", "s1")),
    ]
    api_env = worker_env({"ASSAY_API_URL": api_server, "ASSAY_API_KEY": API_KEY, "COLUMNS": "250"})
    for api_args, db_args in cases:
        through_api = assay(*api_args, env=api_env)
        embedded = assay(*db_args, "--db", str(db), env=embedded_env() | {"COLUMNS": "250"}, cwd=tmp_path)
        assert through_api.returncode == 0, (api_args, through_api.stderr)
        assert embedded.returncode == 0, (db_args, embedded.stderr)
        assert embedded.stdout.strip(), db_args  # something to compare, on stdout
        assert masked(embedded.stdout) == masked(through_api.stdout), db_args
    # Both CSV exports of every pair hold the same rows.
    api_csv, db_csv = tmp_path / "api.csv", tmp_path / "db.csv"
    assert assay("compare", str(a), str(b), "--csv", str(api_csv), env=api_env).returncode == 0
    done = assay("compare", a_db, b_db, "--csv", str(db_csv), "--db", str(db), env=embedded_env(), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    # Rows of a repeated external id follow their random item ids: compared as sets of lines.
    assert sorted(masked(db_csv.read_text()).splitlines()) == sorted(masked(api_csv.read_text()).splitlines())
    assert len(db_csv.read_text().splitlines()) == 13  # the header and 12 rows


def test_diff_prints_the_same_in_both_stores(api_server, tmp_path):
    from assay.scoring.store.db import transaction
    from tests.scoring.test_diff import NEW, OLD, seed_known_case

    with transaction() as session:
        seed_known_case(session)
    db = tmp_path / "e.db"
    seed_embedded(db, "from tests.scoring.test_diff import seed_known_case; seed_known_case(session); result = 'ok'")
    table_api, table_db = both(api_server, db, tmp_path, "diff", "--suite", "s1", "--from", OLD[:8], "--to", NEW, "--limit", "1")
    assert table_api.returncode == 0 and table_db.returncode == 0, (table_api.stderr, table_db.stderr)
    assert "items compared" in table_db.stdout and masked(table_db.stdout) == masked(table_api.stdout)
    json_api, json_db = both(api_server, db, tmp_path, "diff", "--suite", "s1", "--from", OLD, "--to", NEW, "--json")
    assert json_api.returncode == 0 and json_db.returncode == 0, (json_api.stderr, json_db.stderr)
    assert in_id_order(json_db.stdout)["summary"]["items_compared"] == 4
    assert in_id_order(json_db.stdout) == in_id_order(json_api.stdout)
    unknown_api, unknown_db = both(api_server, db, tmp_path, "diff", "--suite", "s1", "--from", OLD, "--to", "deadbeef")
    assert unknown_api.returncode == unknown_db.returncode == 2
    assert "no criteria with hash deadbeef" in unknown_db.stderr and "deadbeef" in unknown_api.stderr
    target = tmp_path / "diff.csv"
    done = assay("diff", "--suite", "s1", "--from", OLD, "--to", NEW, "--csv", str(target), "--db", str(db), env=embedded_env(), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    rows = target.read_text().splitlines()
    assert rows[0] == "item_id,external_id,old_total,new_total,delta,old_passed,new_passed,flip,beyond_noise" and len(rows) == 5
