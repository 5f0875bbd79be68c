"""Judge throughput: N judgments at fake latency L and concurrency C through the pipeline, next to the
bound C/L and a plain asyncio loop over the Anthropic SDK on the same fake, in the same run (once
before the pipeline and once after; the ratio takes their mean).

Steady-state rates are taken from the fake's own call log between 10% and 90% of the calls, so
start-up and the tail do not count. The models' configured rate limits are lifted for the run (a
copy of config/ with --rpm requests/minute), so the pipeline is measured, not the governor's cap.

With ``--judge-only`` the items are scored by a copy of the KQL suite whose only component is the
judge, so the metrics' CPU (a parse and an offline execution per item) does not compete with the
judge path on a small machine. ``--concurrency`` is the judge calls in flight per judge worker (its
call threads, fed group by group by concurrency / group size + 1 task threads).
``--judge-workers 2`` starts two judge worker processes (as two hosts would run them): total
concurrency doubles.

    .venv/bin/python -m bench.judge_throughput --latency 2 --concurrency 64 --items 1280
    .venv/bin/python -m bench.judge_throughput --latency 0.05 --concurrency 64 --items 2000 --judge-only
    .venv/bin/python -m bench.judge_throughput --latency 2 --concurrency 32 --items 1280 --judge-workers 2
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from pathlib import Path

import anthropic
import httpx

from assay.settings import get_settings, judge_task_threads
from bench import harness


def steady_rate(calls: list[dict]) -> float:
    times = sorted(c["at"] for c in calls if c["status"] == 200)
    if len(times) < 10:
        return float("nan")
    lo, hi = times[len(times) // 10], times[(9 * len(times)) // 10]
    return ((9 * len(times)) // 10 - len(times) // 10) / (hi - lo) if hi > lo else float("nan")


async def plain_loop(base_url: str, n: int, concurrency: int) -> float:
    client = anthropic.AsyncAnthropic(api_key="bench", base_url=base_url, max_retries=0)
    limit = asyncio.Semaphore(concurrency)

    async def one(i: int) -> None:
        async with limit:
            await client.messages.create(
                model="claude-haiku-5-5",
                max_tokens=256,
                messages=[{"role": "user", "content": f"plain loop judgment {i}"}],
                output_config={"format": {"type": "json_schema", "schema": {
                    "type": "object", "properties": {"score": {"type": "number", "minimum": 0, "maximum": 1}},
                    "required": ["score"], "additionalProperties": False}}},
            )

    started = time.perf_counter()
    await asyncio.gather(*(one(i) for i in range(n)))
    elapsed = time.perf_counter() - started
    await client.close()
    return n / elapsed


def start_judge_worker(env: dict[str, str], calls_in_flight: int, name: str, profile: str | None) -> harness.Proc:
    if profile is None:
        return harness.start_judge_worker(env, calls_in_flight, name)
    threads = judge_task_threads(calls_in_flight, get_settings().judge_group_size)
    return harness.Proc(
        [
            sys.executable, "-m", "bench.profiled_worker", str(Path(profile).resolve()), "-A", "assay.workers.app",
            "worker", "-Q", "judge", "-P", "threads", "-c", str(threads), "-l", "WARNING", "--without-mingle",
            "--without-gossip", "-n", f"{name}@%h",
        ],
        env | {"ASSAY_JUDGE_CONCURRENCY": str(calls_in_flight)},
        name,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--items", type=int, default=1280)
    parser.add_argument("--latency", type=float, default=2.0)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--rpm", type=int, default=1_000_000, help="requests/minute the governor allows per model")
    parser.add_argument("--judge-workers", type=int, default=1, help="judge worker processes, each with --concurrency calls in flight")
    parser.add_argument("--judge-only", action="store_true", help="score with a suite whose only component is the judge")
    parser.add_argument("--profile", metavar="OUT.prof", help="run the (first) judge worker under cProfile, every thread, "
                        "and write the merged profile here (shares only: the profiler inflates the CPU figures)")
    args = parser.parse_args()
    total_concurrency = args.concurrency * args.judge_workers
    threads = judge_task_threads(args.concurrency, get_settings().judge_group_size)

    fake, fake_url = harness.start_fake(args.latency, args.rpm)
    control = httpx.Client(base_url=fake_url)
    try:
        # The loop runs before and after the pipeline and the ratio takes their mean: this shared
        # machine's speed drifts over a run, and one loop measured at another moment skews the ratio.
        loop_before = asyncio.run(plain_loop(fake_url, args.items, total_concurrency))
        control.post("/_fake/reset")
        with harness.scratch_environment() as env, tempfile.TemporaryDirectory() as tmp:
            config = harness.config_with_rate_limit(Path(tmp) / "config", args.rpm)
            suite = "kql"
            if args.judge_only:
                suite = harness.judge_only_suite(config, "kql")
            env = env | {"ANTHROPIC_API_KEY": "bench", "ANTHROPIC_BASE_URL": fake_url, "ASSAY_CONFIG_DIR": str(config)}
            api, url = harness.start_api(env)
            workers = [harness.start_worker(env, "metrics,control", "prefork", 2, "metrics")]
            judges = [
                start_judge_worker(env, args.concurrency, f"judge{n}", args.profile if n == 0 else None)
                for n in range(args.judge_workers)
            ]
            try:
                time.sleep(3)
                items = harness.write_items(Path(tmp) / "items.jsonl", args.items)
                cpu_before = [harness.cpu_seconds(j.pid) for j in judges]
                trips_before = harness.round_trips(env)
                upload_began = time.time()
                batch_id, upload_s = harness.upload(url, items, suite=suite)
                view, run_s = harness.wait_batch(url, batch_id)
                seen_done = time.time()
                judge_cpu = [harness.cpu_seconds(j.pid) - before for j, before in zip(judges, cpu_before)]
                calls = control.get("/_fake/calls").json()["calls"]
                pipeline_rate = steady_rate(calls)
                arrivals = [c["at"] for c in calls if c["status"] == 200]
            finally:
                for proc in [*judges, *workers, api]:
                    proc.stop()
            # Read once the processes are gone: an exiting backend reports its last statistics.
            redis_commands, pg_transactions = (after - before for after, before in zip(harness.round_trips(env), trips_before))
        control.post("/_fake/reset")
        loop_after = asyncio.run(plain_loop(fake_url, args.items, total_concurrency))
    finally:
        control.close()
        fake.stop()

    bound = total_concurrency / args.latency if args.latency else float("inf")
    print(
        f"judgments {args.items}, latency {args.latency * 1000:.0f} ms, {args.judge_workers} judge worker(s) x "
        f"{args.concurrency} calls ({threads} task threads) = concurrency {total_concurrency}, suite {suite}"
    )
    print(f"pipeline (steady state)   {pipeline_rate:8.1f} judgments/s   ({view['progress']['completed']} completed, "
          f"{view['progress']['errored']} errored; upload → done {upload_s + run_s:.1f} s)")
    print(f"bound C/L                 {bound:8.1f} judgments/s   pipeline = {100 * pipeline_rate / bound:.0f}% of it")
    whole = upload_s + run_s
    print(f"upload → done             {args.items / whole:8.1f} judgments/s   = {100 * args.items / whole / bound:.0f}% of C/L   "
          f"(first call {min(arrivals) - upload_began:.1f} s after the upload began, last answer "
          f"{seen_done - max(arrivals) - args.latency:.1f} s before the batch was seen done, polled every 0.5 s)")
    loop_rate = (loop_before + loop_after) / 2
    print(f"plain asyncio SDK loop    {loop_rate:8.1f} judgments/s   pipeline = {100 * pipeline_rate / loop_rate:.0f}% of it"
          f"   (before / after the pipeline: {loop_before:.1f} / {loop_after:.1f})")
    per_worker = ", ".join(f"{c:.1f} s" for c in judge_cpu)
    print(f"judge worker CPU          {1000 * sum(judge_cpu) / args.items:8.2f} ms per judgment   (per worker: {per_worker})")
    print(f"round trips per judgment  {redis_commands / args.items:8.2f} Redis commands, {pg_transactions / args.items:.2f} "
          "PostgreSQL transactions   (the whole pipeline: upload, planning, metrics, judge)")


if __name__ == "__main__":
    main()
