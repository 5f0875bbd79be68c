"""Pacing at a provider's real limit: judge-only items through two judge worker processes against a
loopback fake that enforces its limit as providers do (a token bucket refilled continuously with about
a second of burst, rate-limit headers on every answer, 429 with retry-after: ``assay/dev/ratelimit.py``),
once with ``models.yaml`` stating the limit and once stating one far too high, for each fake API.

Printed per run: successful calls as a share of the limit from the first call to the last, the share
of requests answered 429, the same for the first 10 s alone and for the rest, and the governor's waits.
``--limit-on input-tokens`` makes a token limit the binding one instead of the request limit (requests
are then left unlimited): the figures are tokens of successful calls as a share of it. The goal (issue
31): at least 97 % of the limit and at most 1 % of requests answered 429.

    .venv/bin/python -m bench.pacing                                  # both fakes, stated and too high
    .venv/bin/python -m bench.pacing --fake openai --stated high --items 4000
    .venv/bin/python -m bench.pacing --limit-on input-tokens --fake anthropic
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import httpx
import yaml

from bench import harness

MODELS = {"anthropic": "claude-haiku-5-5", "openai": "gpt-5-mini"}
FAKE_MODULES = {"anthropic": "tests.fakes.anthropic_server", "openai": "tests.fakes.openai_server"}
UNLIMITED = 1_000_000_000  # a limit nothing in the run comes near
TOO_HIGH = 100  # "far too high": models.yaml states this many times the fake's limit
FIRST_SECONDS = 10.0


@dataclass(frozen=True)
class Run:
    fake: str  # anthropic | openai
    stated: str  # limit | high
    limit_on: str  # requests | input-tokens


def start_fake(run: Run, latency: float, limit: int) -> tuple[harness.Proc, str]:
    """The fake in its own process, enforcing ``limit`` on the binding dimension, the rest unlimited."""
    port = harness.free_port()
    token_option = "--input-tokens-limit" if run.fake == "anthropic" else "--tokens-limit"
    limits = {"--requests-limit": UNLIMITED, token_option: UNLIMITED}
    if run.fake == "anthropic":
        limits["--output-tokens-limit"] = UNLIMITED
    limits["--requests-limit" if run.limit_on == "requests" else token_option] = limit
    args = [sys.executable, "-m", FAKE_MODULES[run.fake], "--port", str(port), "--latency", str(latency)]
    args += ["--enforce-limits", "--burst-seconds", "1"]
    for option, value in limits.items():
        args += [option, str(value)]
    proc = harness.Proc(args, dict(os.environ, PYTHONPATH=str(harness.REPO)), f"fake-{run.fake}")
    url = f"http://127.0.0.1:{port}"
    harness.wait_http(f"{url}/_fake/calls")
    return proc, url


def write_config(target: Path, run: Run, limit: int) -> tuple[Path, str]:
    """A copy of config/ stating ``limit`` (or TOO_HIGH times it) for the binding dimension, and a
    judge-only suite judging with the run's provider."""
    harness.config_with_rate_limit(target, UNLIMITED)
    models = yaml.safe_load((target / "models.yaml").read_text())
    stated = limit * (TOO_HIGH if run.stated == "high" else 1)
    for model in models["models"].values():
        if run.limit_on == "requests":
            model["requests_per_minute"] = stated
        else:
            model["input_tokens_per_minute"] = stated
    (target / "models.yaml").write_text(yaml.safe_dump(models))
    suite = harness.judge_only_suite(target, "kql")
    path = target / "suites" / f"{suite}.yaml"
    spec = yaml.safe_load(path.read_text())
    spec["judge"]["provider"], spec["judge"]["model"] = run.fake, MODELS[run.fake]
    path.write_text(yaml.safe_dump(spec))
    return target, suite


def _share(calls: list[dict], limit: int, weight: str, start: float, end: float) -> tuple[float, float, int]:
    """(successful calls, or their tokens, as a share of the limit over [start, end]; share of the
    requests in it answered 429; requests in it)."""
    inside = [c for c in calls if start <= c["at"] <= end]
    ok = [c for c in inside if c["status"] == 200]
    amount = sum(c.get(weight, 1) if weight != "requests" else 1 for c in ok)
    seconds = end - start
    share = amount / (limit * seconds / 60) if seconds > 0 else float("nan")
    refused = sum(1 for c in inside if c["status"] == 429) / len(inside) if inside else float("nan")
    return share, refused, len(inside)


def report(run: Run, calls: list[dict], limit: int) -> dict:
    calls = sorted((c for c in calls if c.get("lane", "realtime") == "realtime"), key=lambda c: c["at"])
    first, last = calls[0]["at"], calls[-1]["at"]
    weight = "requests" if run.limit_on == "requests" else "limit_tokens"
    whole = _share(calls, limit, weight, first, last)
    opening = _share(calls, limit, weight, first, min(last, first + FIRST_SECONDS))
    rest = _share(calls, limit, weight, first + FIRST_SECONDS, last)
    return {
        "fake": run.fake, "stated": run.stated, "limit_on": run.limit_on, "limit_per_minute": limit,
        "seconds": round(last - first, 1), "calls": len(calls),
        "ok_calls": sum(1 for c in calls if c["status"] == 200),
        "share_of_limit": round(whole[0], 4), "answered_429": round(whole[1], 4),
        "first_10s_share": round(opening[0], 4), "first_10s_429": round(opening[1], 4), "first_10s_calls": opening[2],
        "after_10s_share": round(rest[0], 4), "after_10s_429": round(rest[1], 4),
    }


def measure(run: Run, args: argparse.Namespace) -> dict:
    fake, fake_url = start_fake(run, args.latency, args.limit)
    try:
        with harness.scratch_environment() as env, tempfile.TemporaryDirectory() as tmp:
            config, suite = write_config(Path(tmp) / "config", run, args.limit)
            env = env | {
                "ASSAY_CONFIG_DIR": str(config),
                "ANTHROPIC_API_KEY": "bench", "ANTHROPIC_BASE_URL": fake_url,
                "OPENAI_API_KEY": "bench", "OPENAI_BASE_URL": f"{fake_url}/v1",
            }
            api, url = harness.start_api(env)
            workers = [harness.start_worker(env, "metrics,control", "prefork", 1, "metrics")]
            judges = [harness.start_judge_worker(env, args.concurrency, f"judge{n}") for n in range(args.judge_workers)]
            try:
                time.sleep(3)
                items = harness.write_items(Path(tmp) / "items.jsonl", args.items)
                batch_id, _ = harness.upload(url, items, suite=suite)
                view, _ = harness.wait_batch(url, batch_id)
                calls = httpx.get(f"{fake_url}/_fake/calls", timeout=120).json()["calls"]
            finally:
                for proc in [*judges, *workers, api]:
                    proc.stop()
    finally:
        fake.stop()
    figures = report(run, calls, args.limit)
    figures["completed"] = view["progress"]["completed"]
    figures["load_average"] = round(os.getloadavg()[0], 1)  # a starved pipeline cannot fill the limit
    if args.calls_dir:
        target = Path(args.calls_dir) / f"{run.fake}-{run.stated}-{run.limit_on}.json"
        target.write_text(json.dumps([{k: c[k] for k in ("at", "status", "limit_tokens") if k in c} for c in calls]))
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--items", type=int, default=4000)
    parser.add_argument("--latency", type=float, default=0.2)
    parser.add_argument("--concurrency", type=int, default=64, help="judge calls in flight per judge worker")
    parser.add_argument("--judge-workers", type=int, default=2)
    parser.add_argument("--limit", type=int, default=3000, help="the fake's limit a minute (requests or tokens)")
    parser.add_argument("--limit-on", choices=["requests", "input-tokens"], default="requests")
    parser.add_argument("--fake", choices=["anthropic", "openai", "both"], default="both")
    parser.add_argument("--stated", choices=["limit", "high", "both"], default="both")
    parser.add_argument("--json", metavar="FILE", help="append each run's figures to FILE as a JSON line")
    parser.add_argument("--calls-dir", metavar="DIR", help="write each run's calls (arrival, status) there")
    args = parser.parse_args()
    fakes = ["anthropic", "openai"] if args.fake == "both" else [args.fake]
    stated = ["limit", "high"] if args.stated == "both" else [args.stated]
    print(f"{args.items} judge-only items, {args.judge_workers} judge workers x {args.concurrency} calls in flight, "
          f"latency {args.latency * 1000:.0f} ms, limit {args.limit:,} {args.limit_on} a minute (1 s of burst)")
    print(f"{'fake':10} {'models.yaml':12} {'share of limit':>14} {'429':>7} {'first 10 s':>11} {'429':>7} "
          f"{'after 10 s':>11} {'429':>7} {'calls':>6} {'seconds':>8} {'load':>5}")
    for fake in fakes:
        for how in stated:
            figures = measure(Run(fake, how, args.limit_on), args)
            label = "the limit" if how == "limit" else f"{TOO_HIGH}x it"
            print(f"{fake:10} {label:12} {figures['share_of_limit']:14.1%} {figures['answered_429']:7.1%} "
                  f"{figures['first_10s_share']:11.1%} {figures['first_10s_429']:7.1%} "
                  f"{figures['after_10s_share']:11.1%} {figures['after_10s_429']:7.1%} {figures['calls']:6} "
                  f"{figures['seconds']:8.1f} {figures['load_average']:5.1f}", flush=True)
            if args.json:
                with open(args.json, "a") as handle:
                    handle.write(json.dumps({**figures, "date": time.strftime("%Y-%m-%d %H:%M:%S")}) + "\n")


if __name__ == "__main__":
    main()
