"""A circuit breaker per judge model, so a provider outage stops the whole fleet from hammering it.

closed --(``threshold`` consecutive transient failures)--> open --(cool-down)--> half-open: exactly one
caller gets through as the probe --(its success)--> closed, --(its failure)--> open again.

``RedisBreaker`` keeps the state in Redis so every worker sees the same breaker; each transition is a
Lua script, so two workers can never both take the probe. ``InProcessBreaker`` has the same semantics
for the embedded (single-process) mode. Only outages are recorded as failures (see
``retry.is_outage``: 5xx, 529, 408, 409, timeouts, connection errors): a 4xx or an unusable answer is
the item's problem, and a 429 is backpressure that the rate governor answers, not an outage.

A success resets the count of failures. ``before_call`` says whether a success of that call would be
news: when the breaker was closed with no failure counted, it is not, and is not written (one round
trip to Redis per call saved). So a success resets the failures its call found when it was sent; a
failure recorded while it was in flight (a storm beginning) still counts, as it should.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Protocol

import redis

CLOSED, OPEN, HALF_OPEN = "closed", "open", "half_open"


class BreakerOpen(Exception):
    """No call may be sent to this model now; try again in ``retry_in`` seconds."""

    def __init__(self, model: str, retry_in: float) -> None:
        super().__init__(f"circuit breaker for {model} is open; next try in {retry_in:.1f}s")
        self.model = model
        self.retry_in = retry_in


class Breaker(Protocol):
    def before_call(self, model: str) -> bool:
        """Return if a call may be sent now (raise ``BreakerOpen`` otherwise): whether its success must
        be recorded (failures are counted, or it is the half-open probe)."""

    def before_group(self, model: str) -> bool:
        """Whether the breaker is closed with no failure counted: the calls of a group may then go
        without asking one by one (their successes are no news). Takes nothing: a half-open breaker's
        probe is left for ``before_call``, so exactly one call of a group (or fleet) takes it."""

    def record_success(self, model: str) -> None: ...

    def record_failure(self, model: str) -> None:
        """Record an outage (5xx, 529, 408, 409, timeout, connection error; never a 429)."""

    def status(self) -> list[dict[str, Any]]:
        """Per model: ``model``, ``state``, ``failures``, ``opened_at``, ``next_probe_at`` (UTC datetimes or None)."""


def _timestamp(epoch: float | None) -> datetime | None:
    return None if epoch is None else datetime.fromtimestamp(epoch, UTC)


def _status_row(
    model: str, state: str, failures: int, opened_at: float | None, cooldown: float, now: float
) -> dict[str, Any]:
    if state == OPEN and opened_at is not None and now >= opened_at + cooldown:
        state = HALF_OPEN
    return {
        "model": model,
        "state": state,
        "failures": failures,
        "opened_at": _timestamp(opened_at if state != CLOSED else None),
        "next_probe_at": _timestamp(opened_at + cooldown if state != CLOSED and opened_at is not None else None),
    }


# --- Redis -----------------------------------------------------------------------------------------

# All scripts take the server's clock so workers with skewed clocks agree on the cool-down.
_NOW = "local t = redis.call('TIME'); local now = tonumber(t[1]) + tonumber(t[2]) / 1000000\n"

# KEYS: state hash, probe lock, models set. ARGV: cooldown seconds, probe lock ttl ms, model.
# Returns {verdict, wait}: verdict 1 = closed, go; 2 = you are the probe, go; 3 = closed with failures
# counted, go; 0 = refused, wait seconds. The model joins the set ``status`` lists on its first call.
_BEFORE_CALL = _NOW + """
if redis.call('HGET', KEYS[1], 'state') ~= 'open' then
  if tonumber(redis.call('HGET', KEYS[1], 'failures') or '0') > 0 then return {3, '0'} end
  redis.call('SADD', KEYS[3], ARGV[3])
  return {1, '0'}
end
local probe_at = tonumber(redis.call('HGET', KEYS[1], 'opened_at')) + tonumber(ARGV[1])
if now < probe_at then return {0, tostring(probe_at - now)} end
if redis.call('SET', KEYS[2], '1', 'NX', 'PX', ARGV[2]) then return {2, '0'} end
local ttl = redis.call('PTTL', KEYS[2]) / 1000
return {0, tostring(math.max(0.05, math.min(ttl, tonumber(ARGV[1]))))}
"""

# KEYS: state hash, probe lock, models set. ARGV: model. Returns 1 when closed with no failure counted.
_BEFORE_GROUP = """
if redis.call('HGET', KEYS[1], 'state') == 'open' then return 0 end
if tonumber(redis.call('HGET', KEYS[1], 'failures') or '0') > 0 then return 0 end
redis.call('SADD', KEYS[3], ARGV[1])
return 1
"""

# KEYS: state hash, probe lock, models set. ARGV: model, threshold, cooldown seconds.
_RECORD_FAILURE = _NOW + """
redis.call('SADD', KEYS[3], ARGV[1])
local failures = redis.call('HINCRBY', KEYS[1], 'failures', 1)
if redis.call('HGET', KEYS[1], 'state') == 'open' then
  local opened_at = tonumber(redis.call('HGET', KEYS[1], 'opened_at'))
  -- A failure after the cool-down is the probe's (or a straggler's): open again for a new cool-down.
  -- One inside the cool-down is a call already in flight when it opened: it must not extend it.
  if now >= opened_at + tonumber(ARGV[3]) then
    redis.call('HSET', KEYS[1], 'opened_at', tostring(now))
    redis.call('DEL', KEYS[2])
  end
  return failures
end
if failures >= tonumber(ARGV[2]) then
  redis.call('HSET', KEYS[1], 'state', 'open', 'opened_at', tostring(now))
  redis.call('DEL', KEYS[2])
end
return failures
"""

# KEYS: state hash, probe lock, models set. ARGV: model.
_RECORD_SUCCESS = """
redis.call('SADD', KEYS[3], ARGV[1])
redis.call('HSET', KEYS[1], 'state', 'closed', 'failures', 0)
redis.call('HDEL', KEYS[1], 'opened_at')
redis.call('DEL', KEYS[2])
return 1
"""


class RedisBreaker:
    """Breaker state shared by every worker through Redis, one hash per model under ``key_prefix``."""

    def __init__(
        self,
        redis_client: redis.Redis,
        key_prefix: str,
        *,
        threshold: int = 5,
        cooldown_seconds: float = 30.0,
        probe_timeout_seconds: float = 300.0,
    ) -> None:
        """``probe_timeout_seconds``: how long the probe slot stays taken if its holder dies mid-call;
        keep it above the judge's timeout so a slow probe is not joined by a second one."""
        if threshold < 1 or cooldown_seconds <= 0 or probe_timeout_seconds <= 0:
            raise ValueError("threshold must be >= 1 and the cool-down and probe timeout positive")
        self._redis = redis_client
        self._prefix = key_prefix
        self.threshold = threshold
        self.cooldown_seconds = cooldown_seconds
        self._probe_ttl_ms = int(probe_timeout_seconds * 1000)
        self._before_call = redis_client.register_script(_BEFORE_CALL)
        self._before_group = redis_client.register_script(_BEFORE_GROUP)
        self._record_failure = redis_client.register_script(_RECORD_FAILURE)
        self._record_success = redis_client.register_script(_RECORD_SUCCESS)

    def _state_key(self, model: str) -> str:
        return f"{self._prefix}:breaker:{model}"

    def _keys(self, model: str) -> list[str]:
        state = self._state_key(model)
        return [state, f"{state}:probe", f"{self._prefix}:breaker-models"]

    def before_call(self, model: str) -> bool:
        args = [self.cooldown_seconds, self._probe_ttl_ms, model]
        verdict, wait = self._before_call(keys=self._keys(model), args=args)
        if int(verdict) == 0:
            raise BreakerOpen(model, float(wait))
        return int(verdict) != 1

    def before_group(self, model: str) -> bool:
        return int(self._before_group(keys=self._keys(model), args=[model])) == 1

    def record_failure(self, model: str) -> None:
        self._record_failure(keys=self._keys(model), args=[model, self.threshold, self.cooldown_seconds])

    def record_success(self, model: str) -> None:
        self._record_success(keys=self._keys(model), args=[model])

    def status(self) -> list[dict[str, Any]]:
        seconds, micros = self._redis.time()
        now = seconds + micros / 1_000_000
        rows = []
        for raw_model in sorted(self._redis.smembers(f"{self._prefix}:breaker-models")):
            model = raw_model.decode() if isinstance(raw_model, bytes) else raw_model
            fields = {
                (k.decode() if isinstance(k, bytes) else k): (v.decode() if isinstance(v, bytes) else v)
                for k, v in self._redis.hgetall(self._state_key(model)).items()
            }
            opened_at = float(fields["opened_at"]) if "opened_at" in fields else None
            state, failures = fields.get("state", CLOSED), int(fields.get("failures", 0))
            rows.append(_status_row(model, state, failures, opened_at, self.cooldown_seconds, now))
        return rows


# --- in process ------------------------------------------------------------------------------------


@dataclass
class _ModelState:
    state: str = CLOSED
    failures: int = 0
    opened_at: float | None = None
    probe_until: float = 0.0  # the probe slot is taken until then


class InProcessBreaker:
    """The same breaker for one process (embedded mode), guarded by a lock."""

    def __init__(
        self, *, threshold: int = 5, cooldown_seconds: float = 30.0, probe_timeout_seconds: float = 300.0
    ) -> None:
        if threshold < 1 or cooldown_seconds <= 0 or probe_timeout_seconds <= 0:
            raise ValueError("threshold must be >= 1 and the cool-down and probe timeout positive")
        self.threshold = threshold
        self.cooldown_seconds = cooldown_seconds
        self._probe_timeout = probe_timeout_seconds
        self._models: dict[str, _ModelState] = {}
        self._lock = threading.Lock()

    def before_call(self, model: str) -> bool:
        with self._lock:
            st = self._models.setdefault(model, _ModelState())
            if st.state != OPEN or st.opened_at is None:
                return st.failures > 0
            now = time.time()
            probe_at = st.opened_at + self.cooldown_seconds
            if now < probe_at:
                raise BreakerOpen(model, probe_at - now)
            if now >= st.probe_until:
                st.probe_until = now + self._probe_timeout
                return True
            raise BreakerOpen(model, max(0.05, min(st.probe_until - now, self.cooldown_seconds)))

    def before_group(self, model: str) -> bool:
        with self._lock:
            st = self._models.setdefault(model, _ModelState())
            return st.state != OPEN and st.failures == 0

    def record_failure(self, model: str) -> None:
        with self._lock:
            st = self._models.setdefault(model, _ModelState())
            st.failures += 1
            now = time.time()
            if st.state == OPEN and st.opened_at is not None:
                if now >= st.opened_at + self.cooldown_seconds:  # the probe failed: a new cool-down
                    st.opened_at, st.probe_until = now, 0.0
            elif st.failures >= self.threshold:
                st.state, st.opened_at, st.probe_until = OPEN, now, 0.0

    def record_success(self, model: str) -> None:
        with self._lock:
            self._models[model] = _ModelState()

    def status(self) -> list[dict[str, Any]]:
        with self._lock:
            now = time.time()
            return [
                _status_row(model, st.state, st.failures, st.opened_at, self.cooldown_seconds, now)
                for model, st in sorted(self._models.items())
            ]
