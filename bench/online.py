"""Online scoring on this machine (issue 33): OTLP ingest, completion → score latency under batch load,
and the memory of the API and the workers over a run.

1. **Ingest.** Only the API runs (a real ``assay api``, uvicorn), on a scratch database. ``--requests``
   OTLP/HTTP export requests of 512 spans each (protobuf, built beforehand so the client's encoding is
   not timed; 128 traces of 4 spans: a root, a retrieval, a GenAI chat span with its messages, a tool
   call) are posted by ``--senders`` concurrent clients. Prints spans/s and the CPU per span of the API
   process and of the database's backends.
2. **Latency.** A new scratch database with the whole stack as docker-compose.yml runs it: the API, a
   ``metrics,control`` prefork worker, a ``judge`` threads worker, beat (the sampler's clock), and the
   zero-latency fake judge. A KQL batch is kept waiting the whole time (another ``--batch-items`` batch is
   uploaded whenever less than a quarter of one is left), so online work competes with batch work
   throughout. An application sends ``--rate`` traces/s (root + chat span, one export each) for
   ``--minutes``; a suite's online rule (per span, ``quiet_seconds`` ``--quiet``, a metric and a judge
   component) scores each one. Then, from the database: for each online score, completion (the trace's
   last span received + the quiet window) → score landed (``completed_at``), p50/p95/max, split into
   completion → sampler's decision and decision → landed; and the batch items scored meanwhile.
3. **Memory.** The RSS of the API and of each worker (with its pool processes) and beat, sampled every
   5 s during the latency run: start, end and max. ``--minutes 10`` for the memory figure.

Every figure is printed; none is asserted. The run stops itself (each wait has a deadline) and removes
its scratch databases and Redis keys.

    .venv/bin/python -m bench.online                      # ingest, then a 1-minute latency run
    .venv/bin/python -m bench.online --minutes 10         # the memory run
    .venv/bin/python -m bench.online --skip-ingest --minutes 2 --rate 20
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path

import httpx
import psycopg
import yaml
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, ScopeSpans, Span

from bench import harness

PROTOBUF = {"Content-Type": "application/x-protobuf", "Authorization": f"Bearer {harness.API_KEY}"}
SPANS_PER_REQUEST = 512
SPANS_PER_TRACE = 4
SUITE = "bench_online"


# --- traces as an instrumented chat application exports them --------------------------------------------


def _attributes(values: dict[str, object]) -> list[KeyValue]:
    def value(v: object) -> AnyValue:
        return AnyValue(int_value=v) if isinstance(v, int) else AnyValue(string_value=str(v))

    return [KeyValue(key=k, value=value(v)) for k, v in values.items()]


def _span(trace_id: bytes, parent: bytes, name: str, start: int, attributes: dict[str, object]) -> Span:
    return Span(
        trace_id=trace_id, span_id=os.urandom(8), parent_span_id=parent, name=name, kind=Span.SPAN_KIND_INTERNAL,
        start_time_unix_nano=start, end_time_unix_nano=start + 800_000_000, attributes=_attributes(attributes),
    )


def trace_spans(n: int, *, full: bool) -> list[Span]:
    """One request of a chat application: a root span and a GenAI chat span under it (``full``: a
    retrieval and a tool call too, the four spans of the ingest run)."""
    trace_id, now = os.urandom(16), time.time_ns()
    root = _span(trace_id, b"", "POST /chat", now, {"http.request.method": "POST", "http.route": "/chat"})
    question = f"Where is my refund for order {n}? I was told it would arrive last week."
    answer = "Your refund was issued on Monday; it reaches your card in 3-5 business days." if n % 2 else "Please hold."
    chat = _span(
        trace_id, root.span_id, "chat gpt-4o", now + 1000,
        {
            "gen_ai.operation.name": "chat", "gen_ai.request.model": "gpt-4o-mini" if n % 3 else "gpt-4o",
            "gen_ai.usage.input_tokens": 412, "gen_ai.usage.output_tokens": 38,
            "gen_ai.input.messages": json.dumps([{"role": "user", "parts": [{"type": "text", "content": question}]}]),
            "gen_ai.output.messages": json.dumps([{"role": "assistant", "parts": [{"type": "text", "content": answer}]}]),
        },
    )
    if not full:
        return [root, chat]
    retrieval = _span(trace_id, root.span_id, "retrieve orders", now + 500, {"db.system": "postgresql", "db.rows": 3})
    tool = _span(trace_id, root.span_id, "execute_tool refund_status", now + 2000, {"gen_ai.tool.name": "refund_status"})
    return [root, retrieval, chat, tool]


def export(spans: list[Span], service: str = "support-bot") -> bytes:
    resource = {"attributes": _attributes({"service.name": service, "deployment.environment": "bench"})}
    return ExportTraceServiceRequest(
        resource_spans=[ResourceSpans(resource=resource, scope_spans=[ScopeSpans(spans=spans)])]
    ).SerializeToString()


# --- 1. ingest -----------------------------------------------------------------------------------------


def ingest(requests: int, senders: int) -> None:
    bodies = []
    for r in range(requests):
        spans = [s for t in range(SPANS_PER_REQUEST // SPANS_PER_TRACE) for s in trace_spans(r * 1000 + t, full=True)]
        bodies.append(export(spans))
    size = sum(map(len, bodies)) / len(bodies)
    with harness.scratch_environment() as env:
        api, url = harness.start_api(env)
        try:
            with httpx.Client(timeout=60) as client:  # one warm-up request: imports, the day's partition
                client.post(f"{url}/v1/traces", content=export(trace_spans(0, full=True)), headers=PROTOBUF).raise_for_status()
            system = harness.SystemCpu(env, {"API": api.pid}).start()
            started = time.perf_counter()
            statuses: list[int] = []

            def send(chunk: list[bytes]) -> None:
                with httpx.Client(timeout=120) as client:
                    for body in chunk:
                        statuses.append(client.post(f"{url}/v1/traces", content=body, headers=PROTOBUF).status_code)

            with ThreadPoolExecutor(senders) as pool:
                list(pool.map(send, [bodies[i::senders] for i in range(senders)]))
            elapsed = time.perf_counter() - started
            seconds = system.stop()
            rss = harness.peak_rss_mb(api.pid)
            with psycopg.connect(env["ASSAY_DATABASE_URL"].replace("+psycopg", "")) as conn:
                stored = conn.execute("SELECT count(*) FROM spans").fetchone()[0] - SPANS_PER_TRACE
        finally:
            api.stop()
    spans = requests * SPANS_PER_REQUEST
    api_cpu, pg_cpu = seconds["API"], seconds["PostgreSQL backends (this database)"]
    print("== OTLP ingest (protobuf, 512 spans a request, no compression)")
    print(f"requests              {requests} x {SPANS_PER_REQUEST} spans ({size / 1024:.0f} KiB each), {senders} senders; "
          f"answers {sorted(set(statuses))}, {stored} spans stored")
    print(f"ingest rate           {spans / elapsed:,.0f} spans/s ({elapsed:.1f} s)")
    print(f"API CPU               {api_cpu:.1f} s = {1e6 * api_cpu / spans:.0f} µs/span ({api_cpu / elapsed:.2f} cores)")
    print(f"PostgreSQL backends   {pg_cpu:.1f} s = {1e6 * pg_cpu / spans:.0f} µs/span")
    print(f"API peak RSS          {rss:.0f} MiB")
    print(f"load average          {os.getloadavg()[0]:.1f}")


# --- 2 and 3. latency under batch load, memory ---------------------------------------------------------


def online_suite(config: Path, quiet: float) -> None:
    suite = {
        "name": SUITE,
        "kind": "generic",
        "threshold": 0.5,
        "fields": {"input": "input_text", "output": "output_text", "metadata.model": "attributes.gen_ai.request.model"},
        "components": {
            "mentions_refund": {"weight": 0.5, "metric": "contains", "version": 1, "args": {"value": "refund", "case_sensitive": False}},
            "helpful": {"weight": 0.5, "judge": {"rubric": "Is the answer helpful to the customer?", "verdict": {"type": "score"}}},
        },
        "online": {
            "rules": [
                {
                    "name": "chat", "match": {"service": "support-bot", "attributes": {"gen_ai.operation.name": "chat"}},
                    "per": "span", "quiet_seconds": quiet, "slice_by": "gen_ai.request.model",
                }
            ]
        },
    }
    (config / "suites" / f"{SUITE}.yaml").write_text(yaml.safe_dump(suite, sort_keys=False))


class BatchLoad:
    """Keeps KQL batch work waiting: another batch is uploaded whenever less than a quarter of one is left."""

    def __init__(self, url: str, items: Path, size: int) -> None:
        self.url, self.items, self.size = url, items, size
        self.batches: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def remaining(self, client: httpx.Client) -> int:
        left = 0
        for batch_id in self.batches:
            progress = client.get(f"/api/v1/batches/{batch_id}").json()["progress"]
            left += progress["total"] - progress["completed"] - progress["errored"]
        return left

    def scored(self, client: httpx.Client) -> int:
        return sum(client.get(f"/api/v1/batches/{b}").json()["progress"]["completed"] for b in self.batches)

    def _run(self) -> None:
        with httpx.Client(base_url=self.url, headers={"Authorization": f"Bearer {harness.API_KEY}"}, timeout=60) as client:
            while not self._stop.is_set():
                if not self.batches or self.remaining(client) < self.size // 4:
                    self.batches.append(harness.upload(self.url, self.items)[0])
                self._stop.wait(2.0)

    def __enter__(self) -> BatchLoad:
        self.batches.append(harness.upload(self.url, self.items)[0])
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=120)


def rss_mb(pid: int) -> float:
    """Resident set (VmRSS) now, summed over a process and its descendants, in MiB."""
    total = 0
    for p in harness.tree(pid):
        try:
            for line in Path(f"/proc/{p}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1])
        except OSError:
            continue
    return total / 1024


class Memory:
    """RSS of each named process every ``interval`` seconds."""

    def __init__(self, procs: dict[str, int], interval: float = 5.0) -> None:
        self.procs, self.interval = procs, interval
        self.samples: dict[str, list[float]] = {name: [] for name in procs}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while True:
            for name, pid in self.procs.items():
                self.samples[name].append(rss_mb(pid))
            if self._stop.wait(self.interval):
                return

    def __enter__(self) -> Memory:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=30)

    def table(self) -> str:
        """Start, end and max, and the samples at each quarter of the run between them (flat or growing)."""
        lines = [f"{'RSS MiB':24} {'start':>7} {'end':>7} {'max':>7}  samples  at 1/4, 1/2, 3/4"]
        for name, values in self.samples.items():
            if values:
                quarters = ", ".join(f"{values[len(values) * q // 4]:.0f}" for q in (1, 2, 3))
                lines.append(f"  {name:22} {values[0]:7.0f} {values[-1]:7.0f} {max(values):7.0f}  {len(values):7}  {quarters}")
        return "\n".join(lines)


def send_traces(url: str, rate: float, seconds: float) -> tuple[int, list[int]]:
    """``rate`` traces a second for ``seconds``, one export each, on a fixed schedule (a late send does
    not shift the ones after it)."""
    sent, statuses = 0, []
    started = time.monotonic()
    with httpx.Client(timeout=30) as client:
        while (elapsed := time.monotonic() - started) < seconds:
            due = int(elapsed * rate) + 1
            while sent < due:
                statuses.append(client.post(f"{url}/v1/traces", content=export(trace_spans(sent, full=False)), headers=PROTOBUF).status_code)
                sent += 1
            time.sleep(max(0.0, sent / rate - (time.monotonic() - started)))
    return sent, statuses


LATENCY_SQL = """
SELECT EXTRACT(EPOCH FROM d.decided_at - (t.last_received_at + make_interval(secs => %(quiet)s))),
       EXTRACT(EPOCH FROM s.completed_at - d.decided_at),
       EXTRACT(EPOCH FROM s.completed_at - (t.last_received_at + make_interval(secs => %(quiet)s))),
       EXTRACT(EPOCH FROM (SELECT landed_at FROM score_components c WHERE c.score_id = s.id AND c.component = 'mentions_refund') - d.decided_at),
       EXTRACT(EPOCH FROM (SELECT landed_at FROM score_components c WHERE c.score_id = s.id AND c.component = 'helpful') - d.decided_at),
       t.last_received_at
FROM online_scores o
JOIN scores s ON s.id = o.score_id
JOIN online_traces t ON t.trace_id = o.trace_id
JOIN online_decisions d ON d.trace_id = o.trace_id AND d.suite_name = o.suite_name AND d.rule = o.rule
WHERE s.status = 'completed'
"""


def percentiles(values: list[float]) -> str:
    if not values:
        return "none"
    ordered = sorted(values)
    p95 = ordered[min(len(ordered) - 1, int(0.95 * len(ordered)))]
    return f"p50 {statistics.median(ordered):6.2f} s   p95 {p95:6.2f} s   max {ordered[-1]:6.2f} s"


@contextmanager
def stack(env: dict[str, str], tmp: Path) -> Iterator[tuple[str, dict[str, harness.Proc]]]:
    """The processes of docker-compose.yml on loopback: API, metrics+control worker, judge worker, beat."""
    procs: dict[str, harness.Proc] = {}
    try:
        procs["API"], url = harness.start_api(env)
        procs["metrics,control worker"] = harness.start_worker(env, "metrics,control", "prefork", 2, "metrics")
        procs["judge worker"] = harness.start_judge_worker(env, 16, "judge")
        procs["beat"] = harness.Proc(
            [sys.executable, "-m", "assay.cli", "beat", "--loglevel", "WARNING"],
            env | {"ASSAY_BEAT_SCHEDULE_FILE": str(tmp / "celerybeat-schedule")},
            "beat",
        )
        yield url, procs
    finally:
        for proc in reversed(procs.values()):
            proc.stop()


def latency(rate: float, minutes: float, quiet: float, batch_items: int) -> None:
    with harness.scratch_environment() as env, tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        fake, fake_url = harness.start_fake(0.0, 1_000_000)
        config = harness.config_with_rate_limit(tmp / "config", 1_000_000)
        online_suite(config, quiet)
        env = env | {"ANTHROPIC_API_KEY": "bench", "ANTHROPIC_BASE_URL": fake_url, "ASSAY_CONFIG_DIR": str(config)}
        items = harness.write_items(tmp / "items.jsonl", batch_items)
        try:
            with stack(env, tmp) as (url, procs):
                client = httpx.Client(base_url=url, headers={"Authorization": f"Bearer {harness.API_KEY}"}, timeout=60)
                with BatchLoad(url, items, batch_items) as load:
                    # Batch work under way before the clock starts: the online traces arrive behind it.
                    deadline = time.monotonic() + 300
                    while load.scored(client) < 50 and time.monotonic() < deadline:
                        time.sleep(1)
                    batch_before = load.scored(client)
                    system = harness.SystemCpu(env, {**{name: proc.pid for name, proc in procs.items()}, "fake judge (not Assay)": fake.pid})
                    with Memory({name: proc.pid for name, proc in procs.items()}) as memory:
                        system.start()
                        started = time.monotonic()
                        sent, statuses = send_traces(url, rate, minutes * 60)
                        sending = time.monotonic() - started
                        system.stop()
                        batch_scored = load.scored(client) - batch_before
                        batch_left = load.remaining(client)
                        landed = wait_landed(env, sent, deadline=time.monotonic() + 120 + quiet)
                with psycopg.connect(env["ASSAY_DATABASE_URL"].replace("+psycopg", "")) as conn:
                    rows = conn.execute(LATENCY_SQL, {"quiet": quiet}).fetchall()
                    decisions = dict(conn.execute("SELECT decision, count(*) FROM online_decisions GROUP BY 1").fetchall())
                client.close()
        finally:
            fake.stop()
    to_decision, to_landed, total, metric, judge = ([float(r[i]) for r in rows if r[i] is not None] for i in range(5))
    print(f"== Completion → score landed, {rate:g} traces/s for {minutes:g} min, quiet window {quiet:g} s, under batch load")
    print(f"traces sent           {sent} in {sending:.0f} s (answers {sorted(set(statuses))}); decisions {decisions}")
    print(f"online scores landed  {landed} of {sent}")
    print(f"completion → landed   {percentiles(total)}")
    print(f"  → sampler decided   {percentiles(to_decision)}")
    print(f"  decided → landed    {percentiles(to_landed)}")
    # By the trace's arrival, in thirds of the run: a latency that grows from one to the next is a
    # backlog (the machine does not keep up with the rate), a flat one a delay.
    ordered = [float(r[2]) for r in sorted(rows, key=lambda r: r[5])]
    for third in range(3):
        part = ordered[third * len(ordered) // 3 : (third + 1) * len(ordered) // 3]
        print(f"    {('first', 'second', 'last')[third]} third of the traces {percentiles(part)}")
    print(f"    its metric landed {percentiles(metric)}")
    print(f"    its judge landed  {percentiles(judge)}")
    print(f"batch meanwhile       {batch_scored} KQL items scored while the traces were sent "
          f"({batch_scored / sending:.1f} items/s), {batch_left} still waiting at the end, {len(load.batches)} batch(es)")
    print(system.table(max(sent, 1), sending).replace("ms/item", "ms/trace"))
    print(memory.table())
    print(f"load average          {os.getloadavg()[0]:.1f}")


def wait_landed(env: dict[str, str], expected: int, deadline: float) -> int:
    url = env["ASSAY_DATABASE_URL"].replace("+psycopg", "")
    landed = 0
    while time.monotonic() < deadline:
        with psycopg.connect(url) as conn:
            landed = conn.execute(
                "SELECT count(*) FROM online_scores o JOIN scores s ON s.id = o.score_id WHERE s.status = 'completed'"
            ).fetchone()[0]
        if landed >= expected:
            break
        time.sleep(1)
    return landed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=200, help="ingest: export requests of 512 spans")
    parser.add_argument("--senders", type=int, default=4, help="ingest: concurrent clients")
    parser.add_argument("--skip-ingest", action="store_true")
    parser.add_argument("--rate", type=float, default=20.0, help="latency: traces a second")
    parser.add_argument("--minutes", type=float, default=1.0, help="latency and memory: how long the traces are sent")
    parser.add_argument("--quiet", type=float, default=1.0, help="latency: the rule's quiet_seconds")
    parser.add_argument("--batch-items", type=int, default=5000, help="latency: KQL items a batch of the batch load")
    args = parser.parse_args()
    if not args.skip_ingest:
        ingest(args.requests, args.senders)
    if args.minutes > 0:
        latency(args.rate, args.minutes, args.quiet, args.batch_items)


if __name__ == "__main__":
    main()
