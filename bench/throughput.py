"""N items through the distributed pipeline (API → Redis → workers → Postgres) with the fake judge.

Prints items/s, the CPU per item of every process (API, planner, metrics and judge workers, the Redis
server, the PostgreSQL backends of the run's database and the whole PostgreSQL cluster), peak RSS of the API and the workers, the peak Redis memory of
this run's keys, the Postgres database size (with and without the empty migrated database), and what
those come to per item (and for 1M items). ``--relations`` adds, after the run, each table's heap
(with its dead and free bytes), index and TOAST sizes and its live, dead and HOT-updated row versions.
Uses the local PostgreSQL and Redis (a scratch database and a private key namespace, removed
afterwards).

    .venv/bin/python -m bench.throughput --items 2000 --latency 0
    .venv/bin/python -m bench.throughput --items 100000 --latency 0
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from bench import harness


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--items", type=int, default=2000)
    parser.add_argument("--latency", type=float, default=0.0, help="fake judge latency in seconds")
    parser.add_argument("--judge-concurrency", type=int, default=16, help="judge calls in flight per judge worker")
    parser.add_argument(
        "--judge-workers", type=int, default=1,
        help="judge worker processes (the README's advice for a fast judge: one per core)",
    )
    parser.add_argument("--metrics-concurrency", type=int, default=2)
    parser.add_argument(
        "--profile-metrics", metavar="OUT.prof",
        help="run the metrics worker under cProfile (solo pool, one process) and write its stats here; "
        "its CPU figures are then inflated by the profiler (read the profile for shares)",
    )
    parser.add_argument(
        "--relations", action="store_true",
        help="after the run, print each table's sizes and its live, dead and HOT-updated row versions",
    )
    args = parser.parse_args()

    with harness.scratch_environment() as env, tempfile.TemporaryDirectory() as tmp:
        # Lift the configured and the reported rate limits: this measures the pipeline, not the governor's cap.
        fake, fake_url = harness.start_fake(args.latency, 1_000_000)
        config = harness.config_with_rate_limit(Path(tmp) / "config", 1_000_000)
        env = env | {"ANTHROPIC_API_KEY": "bench", "ANTHROPIC_BASE_URL": fake_url, "ASSAY_CONFIG_DIR": str(config)}
        api, url = harness.start_api(env)
        metrics = (
            harness.start_worker(env, "metrics", "prefork", args.metrics_concurrency, "metrics")
            if not args.profile_metrics
            else harness.start_worker(env, "metrics", "solo", 1, "metrics", profile=str(Path(args.profile_metrics).resolve()))
        )
        judges = [harness.start_judge_worker(env, args.judge_concurrency, f"judge{n}") for n in range(args.judge_workers)]
        # The planner (and reconciler) apart, so that its CPU is its own.
        control = harness.start_worker(env, "control", "solo", 1, "control")
        workers = [metrics, *judges, control]
        try:
            time.sleep(3)  # let the workers finish importing before the clock starts
            empty_mb = harness.database_size_mb(env)
            items = harness.write_items(Path(tmp) / "items.jsonl", args.items)
            cpu_before = {w.pid: harness.cpu_seconds(w.pid) for w in workers}
            system = harness.SystemCpu(
                env,
                {
                    "API": api.pid,
                    "planner (control worker)": control.pid,
                    "metrics worker": metrics.pid,
                    **{f"judge worker {n + 1}" if len(judges) > 1 else "judge worker": judge.pid for n, judge in enumerate(judges)},
                    "fake judge (not Assay)": fake.pid,
                },
            ).start()
            prefix = env["ASSAY_BROKER_KEY_PREFIX"]
            with harness.PeakSampler(lambda: harness.redis_prefix_memory_mb(prefix), interval=2.0) as redis_peak:
                batch_id, upload_s = harness.upload(url, items)
                view, run_s = harness.wait_batch(url, batch_id)
            cpu = {w.pid: harness.cpu_seconds(w.pid) - cpu_before[w.pid] for w in workers}
            system.stop()
            db_mb = harness.database_size_mb(env)
            total_s = upload_s + run_s
            p = view["progress"]
            print(f"items                 {args.items}")
            print(f"fake judge latency    {args.latency * 1000:.0f} ms, judge workers {args.judge_workers} x "
                  f"{args.judge_concurrency} calls in flight")
            print(f"upload                {upload_s:.2f} s")
            print(f"upload → all scored   {total_s:.2f} s  ({args.items / total_s:.1f} items/s)")
            print(f"completed / errored   {p['completed']} / {p['errored']}")
            judge_cpu = sum(cpu[judge.pid] for judge in judges)
            print(f"CPU metrics worker    {cpu[metrics.pid]:.1f} s ({1000 * cpu[metrics.pid] / args.items:.2f} ms/item)")
            print(f"CPU judge worker(s)   {judge_cpu:.1f} s ({1000 * judge_cpu / args.items:.2f} ms/item)")
            print(system.table(args.items, total_s))
            print(f"peak RSS api/metrics/judge  {harness.peak_rss_mb(api.pid):.0f} / "
                  f"{harness.peak_rss_mb(metrics.pid):.0f} / {max(harness.peak_rss_mb(j.pid) for j in judges):.0f} MiB")
            print(f"peak Redis (run keys) {redis_peak.peak:.1f} MiB")
            print(f"Postgres database     {db_mb:.1f} MiB ({1024 * db_mb / args.items:.2f} KiB/item); without the empty "
                  f"migrated database ({empty_mb:.1f} MiB) {db_mb - empty_mb:.1f} MiB ({1024 * (db_mb - empty_mb) / args.items:.2f} KiB/item)")
            per_item_cpu = sum(cpu.values()) / args.items
            print(f"extrapolated to 1M    {1e6 / (args.items / total_s) / 3600:.1f} h at this rate, "
                  f"{per_item_cpu * 1e6 / 3600:.1f} worker CPU-hours, {db_mb * 1e6 / args.items / 1024:.1f} GiB of Postgres")
        finally:
            for proc in [*workers, api, fake]:
                proc.stop()
        if args.relations:
            print(harness.relation_report(env))


if __name__ == "__main__":
    main()
