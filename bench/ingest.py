"""Streaming ingest: upload JSONL files (or the same items as one JSON array) to the API and time them.

Prints seconds, items/s, the API's peak RSS, Redis memory and the database size. No worker runs, so
only ingest is measured (the planner message waits in Redis). ``--format array`` sends the items as
one JSON array (``Content-Type: application/json``): its peak RSS against the JSONL figure shows
whether the array is streamed too or held whole.

    .venv/bin/python -m bench.ingest --sizes 100000 1000000
    .venv/bin/python -m bench.ingest --format array --sizes 170000   # about 80 MiB
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import httpx

from bench import harness

CONTENT_TYPES = {"jsonl": "application/x-ndjson", "array": "application/json"}


def write_array(jsonl: Path, path: Path) -> Path:
    """The JSONL file's items as one JSON array, one element per line."""
    with jsonl.open("rb") as lines, path.open("wb") as out:
        out.write(b"[\n")
        for index, line in enumerate(lines):
            out.write((b",\n" if index else b"") + line.rstrip(b"\n"))
        out.write(b"\n]\n")
    return path


def upload(url: str, path: Path, content_type: str) -> float:
    started = time.perf_counter()
    with path.open("rb") as handle:
        response = httpx.post(
            f"{url}/api/v1/batches",
            params={"suite": "kql"},
            content=handle,
            headers={"Authorization": f"Bearer {harness.API_KEY}", "Content-Type": content_type},
            timeout=httpx.Timeout(30, read=1800),
        )
    response.raise_for_status()
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=int, nargs="+", default=[100_000, 1_000_000])
    parser.add_argument("--format", choices=sorted(CONTENT_TYPES), default="jsonl", help="JSONL lines or one JSON array")
    args = parser.parse_args()

    for size in args.sizes:
        with harness.scratch_environment() as env, tempfile.TemporaryDirectory() as tmp:
            items = harness.write_items(Path(tmp) / "items.jsonl", size)
            if args.format == "array":
                items = write_array(items, Path(tmp) / "items.json")
            api, url = harness.start_api(env)
            try:
                idle_rss = harness.peak_rss_mb(api.pid)
                redis_before = harness.redis_memory_mb()
                seconds = upload(url, items, CONTENT_TYPES[args.format])
                print(
                    f"{args.format:>5} {size:>9} items  {items.stat().st_size / 1024**2:7.1f} MiB  {seconds:7.2f} s  "
                    f"{size / seconds:9.0f} items/s  API peak RSS {idle_rss:4.0f} -> {harness.peak_rss_mb(api.pid):4.0f} MiB  "
                    f"Redis +{harness.redis_memory_mb() - redis_before:5.2f} MiB  "
                    f"database {harness.database_size_mb(env):7.0f} MiB"
                )
            finally:
                api.stop()


if __name__ == "__main__":
    main()
