"""The broker's identity: a random name the reconciler and the planner keep in the broker's Redis.

Redis loses it with its messages (restarted without persistence, flushed, or replaced by a new
server), so an identity the store has not recorded (``broker_epochs``) means a new broker, and the
time it was created says which messages it can hold (:func:`assay.scoring.pipeline.reconcile.broker_holds_since`).
The planner makes sure it exists before it stamps and publishes, so what it publishes to a new broker
is known to be there; the reconciler re-sends only what went to a broker before this one.
"""

from __future__ import annotations

import logging
import time
import uuid
from dataclasses import dataclass
from datetime import datetime, timezone

import redis

from assay.settings import get_settings

log = logging.getLogger(__name__)

# The key the reconciler has kept since before identities existed (then holding "1"): an upgraded
# deployment's broker keeps its name, and is recorded as the first broker, which lost nothing.
BROKER_IDENTITY_KEY = "assay-broker-marker"


@dataclass(frozen=True)
class BrokerIdentity:
    name: str
    created_at: datetime | None  # None for a marker written before identities carried their time


def _parse(raw: bytes) -> BrokerIdentity:
    text = raw.decode("utf-8", "replace")
    name, _, created = text.partition("@")
    try:
        created_at = datetime.fromtimestamp(float(created), timezone.utc) if created else None
    except ValueError:
        created_at = None
    return BrokerIdentity(name, created_at)


def broker_identity() -> BrokerIdentity | None:
    """The broker's identity, created if it has none (a new broker, or one that lost its keys). None
    when the broker is not Redis (the embedded mode's in-memory one) or cannot be reached."""
    settings = get_settings()
    if not settings.broker_url.startswith(("redis://", "rediss://", "unix://")):
        return None
    key = f"{settings.broker_key_prefix}{BROKER_IDENTITY_KEY}"
    client = redis.Redis.from_url(settings.broker_url, socket_timeout=5, socket_connect_timeout=5)
    try:
        # SET NX then GET: of several processes meeting a new broker at once, all read the one that won.
        client.set(key, f"{uuid.uuid4().hex}@{time.time():.6f}", nx=True)
        raw = client.get(key)
    except redis.RedisError as exc:
        log.warning("cannot read the broker's identity: %s", exc)
        return None
    finally:
        client.close()
    return _parse(raw) if raw is not None else None
