"""Browser fixtures: Debian's Chromium driven by Playwright for Python, against a live API (uvicorn
subprocess) and a live worker judged by the loopback fake.

Chromium is launched from ``/usr/bin/chromium`` with a fresh, empty profile directory and flags that
keep it off the network (no background networking, component updates, sync or first-run pings), so
it talks to nothing but the loopback API. No browser is ever downloaded (never ``playwright install``).

Where Chromium or Playwright is missing the browser tests are skipped with a loud message; with
``ASSAY_REQUIRE_BROWSER=1`` (CI) that is a failure instead.
"""

from __future__ import annotations

import os
import shutil
import warnings
from collections.abc import Iterator
from typing import Any

import pytest

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
SKIP_MESSAGE = "BROWSER TESTS NOT RUN"


def browser_missing() -> str | None:
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "Playwright for Python is not installed (pip install playwright; never `playwright install`)"
    if not (os.path.isfile(CHROMIUM) and os.access(CHROMIUM, os.X_OK)):
        return f"Debian's Chromium is not installed at {CHROMIUM} (apt-get install -y chromium)"
    return None


def require_browser() -> None:
    reason = browser_missing()
    if reason is None:
        return
    message = f"{SKIP_MESSAGE}: {reason}"
    if os.environ.get("ASSAY_REQUIRE_BROWSER") == "1":
        pytest.fail(f"{message} — and ASSAY_REQUIRE_BROWSER=1 makes that a failure", pytrace=False)
    warnings.warn(message, stacklevel=2)
    pytest.skip(message)


def pytest_terminal_summary(terminalreporter: Any) -> None:
    # Counted from the skip reports (longrepr: path, line, "Skipped: <message>"), which reach this
    # process from every xdist worker.
    reasons = [
        report.longrepr[2].removeprefix("Skipped: ")
        for report in terminalreporter.stats.get("skipped", [])
        if isinstance(report.longrepr, tuple) and SKIP_MESSAGE in report.longrepr[2]
    ]
    if reasons:
        terminalreporter.section("browser tests skipped", sep="!", red=True, bold=True)
        terminalreporter.line(reasons[0], red=True, bold=True)
        terminalreporter.line(f"{len(reasons)} browser test(s) did not run. Set ASSAY_REQUIRE_BROWSER=1 to fail instead.", red=True)


@pytest.fixture
def chromium(tmp_path) -> Iterator[Any]:
    """A Chromium context on an empty profile directory; downloads allowed (into Playwright's temp dir)."""
    require_browser()
    from playwright.sync_api import sync_playwright

    profile = tmp_path / "chromium-profile"
    profile.mkdir()
    assert not any(profile.iterdir())
    with sync_playwright() as p:
        context = p.chromium.launch_persistent_context(
            str(profile),
            executable_path=CHROMIUM,
            headless=True,
            args=CHROMIUM_ARGS,
            accept_downloads=True,
            viewport={"width": 1400, "height": 1000},
        )
        context.set_default_timeout(30_000)
        try:
            yield context
        finally:
            context.close()
    shutil.rmtree(profile, ignore_errors=True)
