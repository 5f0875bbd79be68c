"""Streaming ingest: upload 100k- and 1M-line JSONL files to the API and time them.

Prints seconds, items/s, the API's peak RSS, Redis memory and the database size. No worker runs, so
only ingest is measured (the planner message waits in Redis).

    .venv/bin/python -m bench.ingest --sizes 100000 1000000
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from bench import harness


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=int, nargs="+", default=[100_000, 1_000_000])
    args = parser.parse_args()

    for size in args.sizes:
        with harness.scratch_environment() as env, tempfile.TemporaryDirectory() as tmp:
            items = harness.write_items(Path(tmp) / "items.jsonl", size)
            api, url = harness.start_api(env)
            try:
                redis_before = harness.redis_memory_mb()
                _, seconds = harness.upload(url, items)
                print(
                    f"{size:>9} items  {items.stat().st_size / 1024**2:7.1f} MiB  {seconds:7.2f} s  "
                    f"{size / seconds:9.0f} items/s  API peak RSS {harness.peak_rss_mb(api.pid):6.0f} MiB  "
                    f"Redis +{harness.redis_memory_mb() - redis_before:5.2f} MiB  "
                    f"database {harness.database_size_mb(env):7.0f} MiB"
                )
            finally:
                api.stop()


if __name__ == "__main__":
    main()
