"""The lease heartbeat: one thread per worker process renews, in one UPDATE, the leases its running
tasks hold, so leases can be short (a minute) and what a dead worker held is taken up again soon.

A task registers the components it claimed for as long as it runs them (``holding``), and no longer:
once it ends, however it ends, their leases are left to run out. A renewal that cannot reach the store
is tried again at the next beat; a component whose lease this process may no longer hold (not renewed
in time, or found taken, landed or cancelled) is not started (``holds``), so slow work never runs past
its lease into another worker's run of the same component.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Collection, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from assay.scoring.pipeline.claims import renew_leases
from assay.scoring.pipeline.components import ComponentRef

log = logging.getLogger(__name__)

# What a renewal returns: the (score_id, component, owner) of every lease it extended.
Renew = Callable[[Collection[str]], set[tuple[object, str, str]]]


@dataclass
class _Held:
    refs: set[ComponentRef]
    lease_seconds: float
    confirmed_until: float  # monotonic: the lease is ours at least until then


class LeaseKeeper:
    """The leases this process's running tasks hold, renewed every ``interval`` seconds by one thread."""

    def __init__(self, renew: Renew, interval: float) -> None:
        self._renew = renew
        self.interval = interval
        self._held: dict[str, _Held] = {}
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    @contextmanager
    def holding(self, owner: str, refs: Iterable[ComponentRef], lease_seconds: float) -> Iterator[None]:
        """Keep the leases ``owner`` just claimed on ``refs`` renewed while the block runs."""
        claimed_at = time.monotonic()
        with self._lock:
            self._held[owner] = _Held(set(refs), lease_seconds, claimed_at + lease_seconds)
            if self._thread is None:
                self._thread = threading.Thread(target=self._beat, name="assay-lease-heartbeat", daemon=True)
                self._thread.start()
        try:
            yield
        finally:
            with self._lock:
                self._held.pop(owner, None)

    def holds(self, owner: str, ref: ComponentRef) -> bool:
        """Whether ``owner`` still holds the lease on ``ref`` until the next beat at least: work on it
        may start."""
        with self._lock:
            held = self._held.get(owner)
            return held is not None and ref in held.refs and time.monotonic() + self.interval < held.confirmed_until

    def renew_now(self) -> None:
        """One heartbeat: renew every lease held, and forget those found lost."""
        with self._lock:
            snapshot = {owner: set(held.refs) for owner, held in self._held.items() if held.refs}
        if not snapshot:
            return
        sent_at = time.monotonic()
        try:
            renewed = self._renew(list(snapshot))
        # The store is down (whatever the driver raises): the leases run on; the next beat tries again.
        except Exception as exc:  # noqa: BLE001
            log.warning("could not renew %d task(s)' component leases: %s", len(snapshot), exc)
            return
        with self._lock:
            for owner, refs in snapshot.items():
                held = self._held.get(owner)
                if held is None:  # the task ended meanwhile
                    continue
                lost = {ref for ref in refs if (ref.score_id, ref.component, owner) not in renewed}
                held.refs -= lost
                held.confirmed_until = sent_at + held.lease_seconds

    def _beat(self) -> None:
        while True:
            time.sleep(self.interval)
            self.renew_now()


_keeper: LeaseKeeper | None = None
_keeper_pid: int | None = None
_keeper_lock = threading.Lock()


def heartbeat_interval(judge_lease_seconds: float, metrics_lease_seconds: float) -> float:
    """A quarter of the shorter lease: three beats can fail (a store restart) before a lease runs out."""
    return min(judge_lease_seconds, metrics_lease_seconds) / 4


def lease_keeper() -> LeaseKeeper:
    """This process's keeper (a forked pool process makes its own: threads do not survive a fork)."""
    global _keeper, _keeper_pid
    with _keeper_lock:
        if _keeper is None or _keeper_pid != os.getpid():
            from assay.scoring.store.db import transaction
            from assay.settings import get_settings

            settings = get_settings()
            judge, metrics = settings.judge_lease_seconds, settings.metrics_lease_seconds

            def renew(owners: Collection[str]) -> set[tuple[object, str, str]]:
                with transaction() as session:
                    return renew_leases(session, owners, judge_seconds=judge, metrics_seconds=metrics)

            _keeper, _keeper_pid = LeaseKeeper(renew, heartbeat_interval(judge, metrics)), os.getpid()
        return _keeper
