"""Smooth pacing by the generic cell rate algorithm (GCRA), for the rate governor.

Each limit of a route is one number: its *theoretical arrival time* (TAT), the moment the route would
be back to idle had every admitted unit been spread evenly at the limit's rate. A request of ``amount``
units at ``interval`` seconds each (60 / the per-minute limit) is admitted when the TAT it would leave,
``max(TAT, now) + amount * interval``, is no further ahead of now than the burst tolerance (or than
its own cost, so a request larger than the tolerance is admitted once the route is idle instead of
never). Admissions are thus spread at the limit's rate with at most ``tolerance`` seconds' worth
sent at once, where a per-minute window admits the whole minute's worth in a burst that a provider
enforcing over a second or so refuses.

Online share: while online work has asked for a route in the last ``ONLINE_ACTIVE_SECONDS``, batch
work must also fit a second TAT paced at ``(1 - share)`` of each limit, so it can take at most that
part and online work finds the rest free; online work asks only the shared TAT, so it may use it all.
With no online work about, batch work uses the whole limit.

``RedisPacer`` keeps the TATs in Redis and updates them in one Lua script (atomic, one round trip, the
server's clock for every worker); ``MemoryPacer`` is the same algorithm in one process (embedded mode).
Why not a library: ``limits`` (which the governor used before) has no GCRA, and ``throttled-py``'s GCRA
takes one limit per call at a fixed quota, while an ask here must take requests and tokens together or
not at all, at limits the provider's headers may lower at any moment, in two lanes; the script is short.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import redis

# How long one online ask keeps the batch lane to its share (longer than the gaps of a steady online
# stream, short enough that batch work gets the whole limit back soon after online work stops).
ONLINE_ACTIVE_SECONDS = 10.0


@dataclass(frozen=True)
class Cost:
    """One limit's part of an ask: ``amount`` units, each worth ``interval`` seconds at the limit."""

    dimension: str
    interval: float
    amount: float


class Pacer(Protocol):
    tolerance: float  # seconds of a limit admitted at once

    def admit(self, route: str, costs: Sequence[Cost], *, online: bool) -> float:
        """Take every cost and return 0.0, or take nothing and return the seconds to wait."""

    def charge(self, route: str, costs: Sequence[Cost], *, online: bool) -> None:
        """Add costs known only afterwards (output tokens), without asking."""


# Epoch seconds carry about 0.2 µs of rounding: an ask exactly at the tolerance must not wait for it.
_EPSILON = 1e-6


def _over(tat: float, now: float, cost: float, tolerance: float) -> tuple[float, float]:
    """(the TAT after taking ``cost`` seconds, how far that is past what may be admitted; 0: nothing)."""
    new = max(tat, now) + cost
    over = new - now - max(tolerance, cost)
    return new, over if over > _EPSILON else 0.0


class MemoryPacer:
    def __init__(self, tolerance: float, share: float) -> None:
        self.tolerance, self.share = tolerance, share
        self._tat: dict[tuple[str, str, bool], float] = {}
        self._online_until: dict[str, float] = {}
        self._lock = threading.Lock()

    def _lanes(self, route: str, online: bool, now: float) -> tuple[bool, ...]:
        """The TATs an ask goes through: the shared one, and the batch lane's while it is reserving."""
        if online:
            self._online_until[route] = now + ONLINE_ACTIVE_SECONDS
            return (False,)
        return (False, True) if self.share > 0 and self._online_until.get(route, 0.0) > now else (False,)

    def _interval(self, cost: Cost, batch: bool) -> float:
        return cost.interval / (1 - self.share) if batch else cost.interval

    def admit(self, route: str, costs: Sequence[Cost], *, online: bool) -> float:
        with self._lock:
            now = time.time()
            wait, updates = 0.0, {}
            for batch in self._lanes(route, online, now):
                for cost in costs:
                    key = (route, cost.dimension, batch)
                    updates[key], over = _over(
                        self._tat.get(key, now), now, cost.amount * self._interval(cost, batch), self.tolerance
                    )
                    wait = max(wait, over)
            if wait > 0:
                return wait
            self._tat.update(updates)
            return 0.0

    def charge(self, route: str, costs: Sequence[Cost], *, online: bool) -> None:
        with self._lock:
            now = time.time()
            for batch in self._lanes(route, online, now):
                for cost in costs:
                    key = (route, cost.dimension, batch)
                    self._tat[key] = max(self._tat.get(key, now), now) + cost.amount * self._interval(cost, batch)


# KEYS: the online marker, then per cost its shared TAT and its batch lane's TAT.
# ARGV: tolerance, online (1/0), share, the marker's life in ms, charge (1/0), then per cost interval, amount.
_SCRIPT = """
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
local tolerance, online, share = tonumber(ARGV[1]), ARGV[2] == '1', tonumber(ARGV[3])
local charge = ARGV[5] == '1'
local lanes = 1
if online then
  redis.call('SET', KEYS[1], '1', 'PX', ARGV[4])
elseif share > 0 and redis.call('EXISTS', KEYS[1]) == 1 then
  lanes = 2
end
local wait, updates = 0, {}
for i = 1, (#KEYS - 1) / 2 do
  local interval, amount = tonumber(ARGV[4 + 2 * i]), tonumber(ARGV[5 + 2 * i])
  for lane = 1, lanes do
    local key = KEYS[2 * i + lane - 1]
    local step = interval
    if lane == 2 then step = interval / (1 - share) end
    local tat = tonumber(redis.call('GET', key) or '0')
    if tat < now then tat = now end
    local cost = amount * step
    local new = tat + cost
    local over = new - now - math.max(tolerance, cost)
    if over > 0.000001 and over > wait and not charge then wait = over end
    updates[#updates + 1] = {key, new}
  end
end
if wait > 0 then return string.format('%.6f', wait) end
for _, u in ipairs(updates) do
  redis.call('SET', u[1], string.format('%.6f', u[2]), 'PX', math.ceil((u[2] - now) * 1000) + 1000)
end
return '0'
"""


class RedisPacer:
    def __init__(self, client: redis.Redis, key_prefix: str, tolerance: float, share: float) -> None:
        self._script = client.register_script(_SCRIPT)
        self._prefix = f"{key_prefix}:governor-tat"
        self.tolerance, self.share = tolerance, share

    def _run(self, route: str, costs: Sequence[Cost], online: bool, charge: bool) -> float:
        keys = [f"{self._prefix}:{route}:online"]
        args: list[str | float | int] = [
            self.tolerance,
            int(online),
            self.share,
            math.ceil(ONLINE_ACTIVE_SECONDS * 1000),
            int(charge),
        ]
        for cost in costs:
            keys += [f"{self._prefix}:{route}:{cost.dimension}", f"{self._prefix}:{route}:{cost.dimension}:batch"]
            args += [repr(cost.interval), repr(cost.amount)]
        return float(self._script(keys=keys, args=args))

    def admit(self, route: str, costs: Sequence[Cost], *, online: bool) -> float:
        return self._run(route, costs, online, charge=False)

    def charge(self, route: str, costs: Sequence[Cost], *, online: bool) -> None:
        self._run(route, costs, online, charge=True)
