"""Process settings, read from the environment (prefix ``ASSAY_``) and an optional ``.env`` file.

Settings are operational: where things run, keys, limits. Scoring *criteria* live in suite files
(``config/suites/*.yaml``) and are hashed; nothing here changes a criteria hash.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from pydantic import Field, SecretStr, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

REPO_ROOT = Path(__file__).resolve().parent.parent
# A shorter API key or session secret could be guessed; the failure throttle only slows guessing down.
MIN_SECRET_CHARS = 32
# The name of a named API key (``name:key``): what the API records as who did something.
KEY_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._@+-]{0,63}")


@dataclass(frozen=True)
class ApiKey:
    """One entry of ``ASSAY_API_KEYS``: ``name:key``, or a bare key named by its fingerprint."""

    name: str
    key: str


def unnamed_key_name(key: str) -> str:
    """The name of a key configured without one: ``key-`` and the first 8 hex digits of its SHA-256."""
    return "key-" + hashlib.sha256(key.encode()).hexdigest()[:8]


def parse_api_key(entry: str) -> ApiKey:
    """An ``ASSAY_API_KEYS`` entry: ``name:key`` (split at the first ``:``), else a bare key.

    Raises ValueError (naming the problem, never the key) when the name is not 1-64 letters, digits
    or ``._@+-`` starting with a letter or digit."""
    name, colon, key = entry.partition(":")
    if not colon:
        return ApiKey(unnamed_key_name(entry), entry)
    if not KEY_NAME.fullmatch(name):
        raise ValueError(
            "the name before ':' must be 1-64 letters, digits or ._@+- starting with a letter or digit "
            "(write entries as name:key; a key itself has no ':')"
        )
    return ApiKey(name, key)


def configured_keys(settings: Any) -> list[ApiKey]:
    """The named API keys of ``settings`` (its ``api_keys`` entries, empty ones left out)."""
    entries = [k.get_secret_value() if hasattr(k, "get_secret_value") else str(k) for k in settings.api_keys or []]
    return [parse_api_key(entry) for entry in entries if entry]


def _default_config_dir() -> Path:
    packaged = REPO_ROOT / "config"
    return packaged if packaged.is_dir() else Path.cwd() / "config"


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="ASSAY_", env_file=".env", extra="ignore")

    database_url: str = Field(
        "postgresql+psycopg://postgres@127.0.0.1:5432/assay",
        description="SQLAlchemy URL of the store (Postgres in production, SQLite in embedded mode).",
    )
    db_pool_size: int = Field(
        10, ge=1, description="Connections kept open per process (a threads worker keeps at least one per thread)."
    )
    db_max_overflow: int = Field(30, ge=0, description="Extra connections a busy process may open.")
    broker_url: str = Field("redis://127.0.0.1:6379/0", description="Celery broker URL.")
    broker_key_prefix: str = Field(
        "", description="Prefix for every broker key in Redis, to share one Redis between deployments."
    )
    redis_key_prefix: str = Field("assay", description="Prefix of the breaker and governor keys in Redis.")
    redis_url: str = Field(
        "redis://127.0.0.1:6379/1", description="Redis for the shared judge breaker and rate governor."
    )
    config_dir: Path = Field(default_factory=_default_config_dir)
    data_dir: Path = Field(
        Path("data"), description="Dataset files may be registered by path only from inside this directory."
    )

    # API
    api_keys: list[SecretStr] = Field(
        default_factory=list,
        description="Bearer API keys accepted by the API, each `name:key` (the name is who the API records "
        "as acting: 1-64 letters, digits or ._@+-) or a bare key (named key-<first 8 hex digits of its "
        f"SHA-256>); each key at least {MIN_SECRET_CHARS} characters.",
    )
    operator_keys: list[str] = Field(
        default_factory=list,
        description="Names of API keys (from ASSAY_API_KEYS) whose holders are operators: they may post "
        "versions of, disable, enable or delete any API suite, not only their own. Only a key is an operator, "
        "never a proxy user of the same name.",
    )
    auth_failures_per_minute: int = Field(
        10,
        ge=1,
        description="Wrong API keys (bearer or sign-in form) a client may present per minute; then 429 with "
        "Retry-After until the oldest failure is a minute old.",
    )
    trusted_proxies: list[str] = Field(
        default_factory=list,
        description="IPs / CIDRs of reverse proxies (oauth2-proxy) whose X-Forwarded-User header is trusted.",
    )
    max_upload_bytes: int = Field(2 * 1024**3, description="Largest accepted batch upload body, in bytes.")
    max_item_bytes: int = Field(1024**2, description="Largest accepted single item (one JSONL line), in bytes.")
    max_items_per_batch: int = 1_000_000
    max_dataset_bytes: int = Field(256 * 1024**2, description="Largest dataset (all its tables), in bytes.")
    max_reported_bad_lines: int = 100
    max_session_bytes: int = Field(
        32 * 1024**2, description="Largest alert session accepted by POST /api/v1/sessions (the request body), in bytes."
    )
    max_suite_bytes: int = Field(
        1024**2, ge=1, description="Largest suite body accepted by POST /api/v1/suites and /validate, in bytes."
    )
    max_body_bytes: int = Field(
        16 * 1024**2,
        ge=1,
        description="Largest request body of every route without a limit of its own (uploads, sessions, "
        "score-query and dataset files have theirs), in bytes.",
    )

    # Alert sessions (the alert-session scoring design): the TARSy history service a session is fetched from when not stored.
    history_service_url: str | None = Field(
        None, description="Base URL of the history service (GET {url}/api/v1/history/sessions/{id}); unset: none."
    )
    history_service_timeout_seconds: float = Field(10.0, gt=0, description="Timeout of one history service request.")

    # Pipeline
    plan_chunk_size: int = Field(500, description="Scores whose components the planner enqueues per chunk.")
    max_queue_depth: int = Field(20_000, description="Planner pauses while a queue holds more messages.")
    metrics_lease_seconds: int = Field(
        60,
        ge=4,
        description="Lease of a claimed metric component. A live worker renews its leases every quarter of"
        " the shorter lease (its heartbeat), so this is about how soon a dead worker's work is taken up.",
    )
    judge_lease_seconds: int = Field(
        60, ge=4, description="Lease of a claimed judge component (renewed by the heartbeat, as above)."
    )
    max_component_attempts: int = Field(5, description="Claims of one component before it is failed as poison.")
    visibility_timeout_seconds: int = 3600
    reconcile_interval_seconds: int = Field(
        30, description="How often beat runs the reconciler (which re-sends the work of expired leases)."
    )
    requeue_after_seconds: int = Field(
        120,
        description="A pending component enqueued longer ago than this, in a queue with no messages waiting,"
        " is assumed lost and re-enqueued (its message was lost, or held by a worker that died).",
    )
    judge_concurrency: int = Field(
        16,
        ge=1,
        description=(
            "Judge calls in flight per judge worker process, all on its one judge event loop. `assay worker"
            " --queues judge` runs ceil(judge_concurrency / judge_group_size) + 1 task threads by default."
        ),
    )
    judge_group_size: int = Field(
        8,
        ge=1,
        description=(
            "Judge components per task message: the task starts their calls on the worker's judge event loop"
            " at once and lands the results together as they come in (1: one per message)."
        ),
    )
    metric_group_size: int = Field(
        32,
        ge=1,
        description=(
            "Scores whose metric components travel in one task message: the task claims them in one"
            " statement, validates each item once for all its components and lands what finished together,"
            " at least every second (slow items, e.g. pandas, one by one), so a group never outlives its"
            " leases (1: one score per message)."
        ),
    )
    embedded_stall_seconds: float = Field(
        120.0, gt=0, description="`assay run` stops (exit 1) when nothing finished this long while tasks kept failing."
    )

    # Re-scoring (stale scores under changed criteria)
    rescore_schedule: str = Field(
        "0 2 * * *", description="Crontab (minute hour day month weekday, UTC) of the nightly re-scoring run."
    )
    rescore_expires_seconds: int = Field(
        3600, ge=1, description="A nightly run not started this long after its slot is dropped (no pile-up)."
    )
    prune_schedule: str = Field(
        "30 3 * * *",
        description="Crontab (minute hour day month weekday, UTC) of the nightly retention run (suites' `retention:`).",
    )
    prune_chunk_size: int = Field(1000, ge=1, description="Scores the retention run removes per transaction.")

    # Online scoring (OTLP traces in at /v1/traces; docs/online.md).
    otlp_max_body_bytes: int = Field(
        8 * 1024**2, ge=1, description="Largest OTLP export request accepted by POST /v1/traces as sent (compressed), in bytes."
    )
    otlp_max_decompressed_bytes: int = Field(
        32 * 1024**2,
        ge=1,
        description="Largest OTLP export request once decompressed, in bytes: a gzip body inflating past it is "
        "refused (413) without being inflated further.",
    )
    otlp_max_attribute_bytes: int = Field(
        256 * 1024,
        ge=1,
        description="Largest value of one span, event or resource attribute, in bytes (encoded): a span with a larger "
        "one is refused and counted in the response's partialSuccess.",
    )
    span_retention_days: int = Field(
        7, ge=1, description="Days of received spans kept: the nightly retention run drops older day partitions."
    )
    span_partitions_ahead: int = Field(
        2, ge=0, description="Day partitions of the span table beat creates ahead of today (PostgreSQL)."
    )
    online_sample_interval_seconds: float = Field(
        1.0, gt=0, description="How often beat runs the online sampler (completed traces become scored items)."
    )
    online_sample_limit: int = Field(500, ge=1, description="Traces the online sampler decides per run at most.")
    online_max_slice_labels: int = Field(
        20,
        ge=0,
        description="Slices per suite the Prometheus online gauges label by name (the busiest ones); the others "
        "are added up under slice=\"other\".",
    )
    rescore_wave_size: int = Field(5000, ge=1, description="Scores a re-scoring run creates per transaction.")
    provider_batch_interval_seconds: float = Field(
        60.0, gt=0, description="How often beat submits batch-lane judge requests and polls provider batches."
    )
    provider_batch_max_requests: int = Field(
        100_000, ge=1, description="Requests per provider batch at most; each provider's own limit applies too "
        "(Anthropic 100,000, OpenAI 50,000).",
    )
    provider_batch_max_bytes: int = Field(
        256 * 1024**2, ge=1, description="Bytes per provider batch at most; each provider's own limit applies too "
        "(Anthropic 256 MB, OpenAI 200 MB).",
    )
    provider_batch_hold_seconds: int = Field(
        48 * 3600,
        description="How long a batch-lane judge component is left to its provider batch before the "
        "reconciler treats it as lost (provider batches end within 24 h).",
    )

    # Calibration
    calibration_max_usd: float = Field(
        10.0,
        gt=0,
        description="A calibration run without budget_usd is refused when its estimate is over this many US "
        "dollars; under it, this is the run's budget.",
    )

    # Judge
    breaker_threshold: int = Field(5, ge=1, description="Consecutive transient failures that open the breaker.")
    judge_backoff_base_seconds: float = Field(
        1.0, gt=0, description="First retry wait of a transient judge error; doubles per retry (1 s, 2 s, 4 s)."
    )
    judge_burst_seconds: float = Field(
        0.5,
        ge=0,
        le=10,
        description="How far ahead of its limit's even pace the rate governor may admit a route's calls (seconds"
        " of the limit sent at once): providers enforce their per-minute limits over about a second, so more is"
        " refused with 429s.",
    )
    online_share: float = Field(
        0.2,
        ge=0,
        le=0.9,
        description="Share of each judge route's rate limits kept for online work while online work is about: batch"
        " work may use only the rest, online work all of it (0: no reservation).",
    )
    breaker_cooldown_seconds: float = Field(30.0, gt=0, description="Open time before one probe is let through.")
    anthropic_api_key: SecretStr | None = Field(None, validation_alias="ANTHROPIC_API_KEY")
    anthropic_base_url: str | None = Field(None, validation_alias="ANTHROPIC_BASE_URL")

    # Dashboard and metrics
    session_secret: SecretStr | None = Field(
        None,
        description="Signs dashboard session cookies; unset: derived from ASSAY_API_KEYS "
        "(rotating the keys signs everyone out).",
    )
    session_max_age_seconds: int = Field(12 * 3600, ge=60, description="How long a dashboard sign-in lasts.")
    metrics_public: bool = Field(False, description="Serve /metrics without credentials.")

    # Flower
    flower_user: str = "admin"
    flower_password: SecretStr | None = Field(
        None, description="Flower's basic-auth password; unset, empty or only blanks: `assay flower` refuses to start."
    )
    flower_port: int = 5555
    flower_address: str = Field(
        "127.0.0.1",
        description="Interface `assay flower` listens on (loopback: reach it through an SSH tunnel or an "
        "authenticating proxy; 0.0.0.0 inside a container whose port is published on the host's loopback).",
    )

    @field_validator("api_keys")
    @classmethod
    def _api_keys_valid(cls, keys: list[SecretStr]) -> list[SecretStr]:
        seen: dict[str, int] = {}
        for number, entry in enumerate(keys, start=1):
            what = f"API key {number} of {len(keys)}"
            try:
                parsed = parse_api_key(entry.get_secret_value())
            except ValueError as exc:
                raise ValueError(f"{what}: {exc}") from None
            _require_long_secret(what, SecretStr(parsed.key))
            if parsed.key in seen:
                raise ValueError(f"{what} is the same key as API key {seen[parsed.key]}: give each key one entry")
            seen[parsed.key] = number
        return keys

    @field_validator("operator_keys")
    @classmethod
    def _operator_keys_named(cls, names: list[str]) -> list[str]:
        for number, name in enumerate(names, start=1):
            if not KEY_NAME.fullmatch(name):
                raise ValueError(
                    f"operator key {number} of {len(names)} is not a key name (1-64 letters, digits or ._@+- "
                    "starting with a letter or digit): list the names of ASSAY_API_KEYS entries, not the keys"
                )
        return names

    @model_validator(mode="after")
    def _operators_are_configured_keys(self) -> Settings:
        unknown = sorted(set(self.operator_keys) - {key.name for key in configured_keys(self)})
        if unknown:
            raise ValueError(
                f"ASSAY_OPERATOR_KEYS names {', '.join(map(repr, unknown))}, which no ASSAY_API_KEYS entry is "
                "named: an operator is the holder of a configured key"
            )
        return self

    @field_validator("flower_password")
    @classmethod
    def _blank_flower_password_is_unset(cls, password: SecretStr | None) -> SecretStr | None:
        # An empty value (ASSAY_FLOWER_PASSWORD= in a .env, a compose default) would start Flower with a
        # login anyone passes: it counts as no password, which every consumer refuses.
        if password is not None and not password.get_secret_value().strip():
            return None
        return password

    @field_validator("session_secret")
    @classmethod
    def _session_secret_long_enough(cls, secret: SecretStr | None) -> SecretStr | None:
        if secret is not None and secret.get_secret_value():
            _require_long_secret("the session secret", secret)
        return secret


def _require_long_secret(what: str, secret: SecretStr) -> None:
    length = len(secret.get_secret_value())
    if length < MIN_SECRET_CHARS:
        raise ValueError(
            f"{what} is {length} characters long; at least {MIN_SECRET_CHARS} are required "
            "(make one with: python -c 'import secrets; print(secrets.token_urlsafe(32))')"
        )


@lru_cache
def get_settings() -> Settings:
    return Settings()


def judge_task_threads(calls_in_flight: int, group_size: int) -> int:
    """Task threads of a judge worker that keep its ``calls_in_flight`` call slots busy: one per
    group those hold, and one more, ready to claim its group as soon as call slots come free while
    another task lands its results and fetches its next message."""
    return -(-calls_in_flight // group_size) + 1
