"""``assay dev``: try Assay without an account. ``fake-judge`` serves loopback fakes of the judge
providers' APIs (:mod:`assay.dev`), the ones the tests and benchmarks drive through the real SDKs."""

from __future__ import annotations

import signal
import threading
from typing import Annotated, Any

import typer

from assay.cli.common import console, fail, out

dev_cli = typer.Typer(help="Try Assay without an account: a loopback fake judge.", no_args_is_help=True)

PROVIDERS = ("anthropic", "openai", "both")
FAKE_KEY = "fake-key"  # the fakes want a key, as the real APIs do, and accept any
# As the real APIs: a shorter prompt prefix is not cached, so costs and estimates compare as they would.
MIN_CACHEABLE_TOKENS = 1024


@dev_cli.command("fake-judge")
def fake_judge(
    port: Annotated[int, typer.Option(min=1, max=65535, help="Port of the first fake (with both, OpenAI's is PORT+1).")] = 8765,
    provider: Annotated[str, typer.Option(help="anthropic, openai or both.")] = "both",
    latency: Annotated[float, typer.Option(min=0.0, help="Seconds before each answer.")] = 0.0,
) -> None:
    """Serve a fake judge on 127.0.0.1 for each provider API Assay speaks: Anthropic Messages (with
    Message Batches) and OpenAI Chat Completions. Every call answers with a valid verdict following the
    request's JSON schema, a deterministic function of the item, at no cost and with no key.

    Prints the variables to export in the shell that runs Assay (ANTHROPIC_BASE_URL, OPENAI_BASE_URL and
    dummy keys), then serves until Ctrl-C. For trying suites and judges, not for judging: the verdicts
    are made up.
    """
    if provider not in PROVIDERS:
        fail(f"--provider must be one of {', '.join(PROVIDERS)}, not {provider!r}")
    from assay.dev.anthropic_server import FakeAnthropic
    from assay.dev.openai_server import FakeOpenAI

    wanted = ["anthropic", "openai"] if provider == "both" else [provider]
    servers: list[Any] = []
    exports: list[str] = []
    try:
        for offset, name in enumerate(wanted):
            try:
                fake = (FakeAnthropic if name == "anthropic" else FakeOpenAI)(
                    latency=latency, port=port + offset, min_cacheable_tokens=MIN_CACHEABLE_TOKENS
                )
            except OSError as exc:
                fail(f"cannot listen on 127.0.0.1:{port + offset} ({exc.strerror}): pass another --port")
            servers.append(fake.start())
            if name == "anthropic":
                exports += [f"export ANTHROPIC_BASE_URL={fake.base_url}", f"export ANTHROPIC_API_KEY={FAKE_KEY}"]
            else:
                exports += [f"export OPENAI_BASE_URL={fake.api_base}", f"export OPENAI_API_KEY={FAKE_KEY}"]
        console.print(f"fake judge ({', '.join(wanted)}) on 127.0.0.1; in the shell that runs Assay:")
        for line in exports:
            out.print(line, highlight=False, markup=False)
        out.file.flush()  # read by a script or a test while the fakes serve on
        console.print("serving until Ctrl-C")
        _wait_for_a_stop()
    finally:
        for server in servers:
            server.stop()
    console.print("fake judge stopped")


def _wait_for_a_stop() -> None:
    stopped = threading.Event()
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda *_: stopped.set())
    while not stopped.wait(1.0):
        pass
