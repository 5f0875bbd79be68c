"""A group's judge calls ask the circuit breaker and the rate governor once, not one by one.

``GroupGate`` stands in for both for the calls of one group (one task's claimed components, all
sent at once). The first call to a model asks for the whole group: the breaker whether it is closed
with no failure counted, the governor for the group's requests and tokens (the first prompt's
estimate times the group's calls to that model; a later, longer prompt takes the difference). Those
answers admit the group's first attempts for ``PASS_SECONDS``; everything else asks as before, one
call at a time: a retry, a repair call, a call started late, every call while the breaker is
half-open (so exactly one takes its probe) or has failures counted (their successes are news), and
every call once one of the group's calls failed with an outage or met a 429 (the passes left are
revoked, so a breaker that opens mid-group stops the group's unsent calls, which are deferred
without spending attempts). A pass is not used while the governor knows of a hold another group of
the process met (``Governor.local_hold``): a 429 stops every group's unsent calls at once.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from assay.scoring.judge.breaker import Breaker
from assay.scoring.judge.governor import Governor

# How long a group's admission lasts: its calls start at once, and one starting later asks for itself.
PASS_SECONDS = 1.0


@dataclass
class _Admission:
    until: float
    breaker_passes: int = 0  # first calls the breaker admitted (closed, no failure counted)
    requests: int = 0  # requests the governor granted and not yet used
    tokens: int = 0  # tokens the governor granted and not yet used
    asked_breaker: bool = False
    asked_governor: bool = False


class GroupGate:
    """The breaker and governor for one group's calls (implements both protocols)."""

    def __init__(
        self,
        breaker: Breaker,
        governor: Governor,
        calls: Mapping[str, int],
        clock: Callable[[], float] = time.monotonic,
        *,
        online: bool = False,
    ) -> None:
        """``calls``: the group's calls per model (a model not named asks call by call); ``online``: the
        group is online work (its asks may use the governor's share for it)."""
        self._breaker = breaker
        self._governor = governor
        self._calls = dict(calls)
        self._online = online
        self._clock = clock
        self._lock = threading.Lock()
        self._admissions: dict[str, _Admission] = {}

    def _admission(self, model: str) -> _Admission | None:
        if self._calls.get(model, 0) <= 0:
            return None
        now = self._clock()
        admission = self._admissions.get(model)
        if admission is None:
            admission = self._admissions[model] = _Admission(until=now + PASS_SECONDS)
        return admission if now < admission.until else None

    def _revoke(self, model: str) -> None:
        with self._lock:
            admission = self._admissions.get(model)
            if admission is not None:
                admission.breaker_passes = admission.requests = admission.tokens = 0
                admission.until = 0.0

    # --- breaker ---

    def before_call(self, model: str) -> bool:
        with self._lock:
            admission = self._admission(model)
            if admission is not None:
                if not admission.asked_breaker:
                    admission.asked_breaker = True  # a store error here defers this call, as before
                    if self._breaker.before_group(model):
                        admission.breaker_passes = self._calls[model]
                if admission.breaker_passes > 0:
                    admission.breaker_passes -= 1
                    return False
        return self._breaker.before_call(model)

    def before_group(self, model: str) -> bool:
        return self._breaker.before_group(model)

    def record_success(self, model: str) -> None:
        self._breaker.record_success(model)

    def record_failure(self, model: str) -> None:
        self._revoke(model)
        self._breaker.record_failure(model)

    def status(self) -> list[dict[str, Any]]:
        return self._breaker.status()

    # --- governor ---

    def acquire(self, model: str, tokens: int, requests: int = 1, *, online: bool = False) -> float:
        online = online or self._online
        if requests != 1:
            return self._governor.acquire(model, tokens, requests, online=online)
        with self._lock:
            admission = self._admission(model)
            if admission is not None:
                if not admission.asked_governor:
                    admission.asked_governor = True
                    calls = self._calls[model]
                    if self._governor.acquire(model, tokens * calls, calls, online=online) == 0.0:
                        admission.requests, admission.tokens = calls, tokens * calls
                    else:  # the group does not fit now: its calls ask (and wait, or defer) one by one
                        admission.until = 0.0
                if admission.requests > 0:
                    # A hold another group of this process met since the pass was granted stops it too.
                    held = self._governor.local_hold(model)
                    if held > 0:
                        return held
                    shortfall = tokens - admission.tokens
                    if shortfall > 0:
                        wait = self._governor.acquire(model, shortfall, 0, online=online)
                        if wait > 0:
                            return wait
                    admission.requests -= 1
                    admission.tokens = max(0, admission.tokens - tokens)
                    return 0.0
        return self._governor.acquire(model, tokens, online=online)

    def charge(self, model: str, output_tokens: int, *, online: bool = False) -> None:
        self._governor.charge(model, output_tokens, online=online or self._online)

    def local_hold(self, model: str) -> float:
        return self._governor.local_hold(model)

    def observe_headers(self, model: str, headers: Mapping[str, str]) -> None:
        self._governor.observe_headers(model, headers)

    def hold(self, model: str, seconds: float) -> None:
        self._revoke(model)
        self._governor.hold(model, seconds)
