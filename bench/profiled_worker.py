"""A Celery worker under cProfile, every thread of it, timed by its own CPU clock (bench only): ``python -m bench.profiled_worker
OUT.prof -A assay.workers.app worker ...``. Each thread gets its own profiler when it first runs
Python code; at exit they are merged into OUT.prof (read it with ``python -m pstats OUT.prof``).

cProfile's overhead inflates CPU several-fold, so read the profile for shares, never for totals."""

from __future__ import annotations

import atexit
import cProfile
import pstats
import sys
import threading
import time

_profiles: list[cProfile.Profile] = []
_lock = threading.Lock()


def _start_in_thread(frame: object, event: str, arg: object) -> None:
    profile = cProfile.Profile(time.thread_time)
    with _lock:
        _profiles.append(profile)
    profile.enable()  # replaces this hook for the thread


def _dump(path: str) -> None:
    with _lock:
        profiles = list(_profiles)
    for profile in profiles:
        profile.disable()
    stats = None
    for profile in profiles:
        try:
            profile.create_stats()
        except Exception:
            continue
        if not profile.stats:  # type: ignore[attr-defined]
            continue
        if stats is None:
            stats = pstats.Stats(profile)
        else:
            stats.add(profile)
    if stats is not None:
        stats.dump_stats(path)


def main() -> None:
    out = sys.argv[1]
    sys.argv = ["celery", *sys.argv[2:]]
    threading.setprofile(_start_in_thread)
    main_profile = cProfile.Profile(time.thread_time)
    with _lock:
        _profiles.append(main_profile)
    atexit.register(_dump, out)
    main_profile.enable()
    from celery.__main__ import main as celery_main

    celery_main()


if __name__ == "__main__":
    main()
