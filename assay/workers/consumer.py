"""The worker's broker consumer, hardened against kombu 5.7 crashes on a Redis restart.

When the broker connection drops, Celery first ``collect()``s the connection (which drops the
transport's client) and then ``close()``s it. If the default channel failed to close during the
collect (Redis was down mid-poll), that second close tries to restore the channel's unacked messages
through the transport's dropped client and raises ``AttributeError`` — which Celery does not expect
there, so the consumer stops for good ("Unrecoverable error") while the process stays up and idle.

Nothing is lost by skipping that restore: unacked messages stay in Redis's unacked index and come
back after the visibility timeout (or, if Redis restarted empty, the reconciler re-enqueues their
work from Postgres). So the close is made tolerant of exactly that failure, and the consumer goes on
to reconnect as usual.

The same dropped client breaks a late ack: a task that was running on the old connection acks its
message through the hub once it ends, the channel's pool has gone with the connection, and
rebuilding it reads the dropped client — the ``AttributeError`` escapes into the event loop and
stops the consumer the same way. Such an ack is logged and skipped: the message comes back the same
way as above, and its components' claims make the second delivery a no-op.
"""

from __future__ import annotations

import functools
import logging
from typing import Any

from celery.worker.consumer import Consumer

log = logging.getLogger(__name__)


class ResilientConsumer(Consumer):
    def on_connection_error_after_connected(self, exc: Exception) -> None:
        connection = self.connection
        if connection is not None:
            connection.close = _tolerant_close(connection.close)  # type: ignore[method-assign]
        super().on_connection_error_after_connected(exc)

    def call_soon_ack(self, p: Any, *args: Any, **kwargs: Any) -> Any:
        return super().call_soon_ack(_tolerant_ack(p), *args, **kwargs)


def _tolerant_close(close: Any) -> Any:
    @functools.wraps(close)
    def tolerant() -> None:
        try:
            close()
        except AttributeError as exc:
            log.warning(
                "broker connection closed without restoring unacked messages (%s); they return after the "
                "visibility timeout, or through the reconciler",
                exc,
            )

    return tolerant


def _tolerant_ack(ack: Any) -> Any:
    @functools.wraps(ack)
    def tolerant(*args: Any, **kwargs: Any) -> Any:
        try:
            return ack(*args, **kwargs)
        except AttributeError as exc:
            log.warning(
                "message not acked: its broker connection is gone (%s); it returns after the visibility "
                "timeout, or through the reconciler, and its claim makes that delivery a no-op",
                exc,
            )
            return None

    return tolerant
