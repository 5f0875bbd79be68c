"""Sandbox limits and executor settings, from ``ASSAY_SANDBOX_*`` environment variables.

Limits are per run. A request may ask for tighter limits than these, never looser ones: the
executor clamps every request to its configured maxima.
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass, fields, replace
from typing import Any

# Layers the executor refuses to run without, unless ASSAY_SANDBOX_REQUIRE says otherwise.
# "no_network" is satisfied by a network namespace or by the seccomp socket ban; "no_new_processes"
# by seccomp (or by RLIMIT_NPROC under a non-root uid); "filesystem" by Landlock.
DEFAULT_REQUIRED_LAYERS = ("rlimits", "seccomp", "landlock", "no_network", "no_new_processes", "filesystem")


@dataclass(frozen=True)
class SandboxLimits:
    """Per-run resource limits."""

    wall_seconds: float = 10.0  # enforced by the executor (the child's parent): SIGKILL on expiry
    cpu_seconds: int = 10  # RLIMIT_CPU
    memory_mb: int = 1024  # RLIMIT_AS above the executor's own address space at fork
    file_size_mb: int = 16  # RLIMIT_FSIZE: no single file larger
    open_files: int = 64  # RLIMIT_NOFILE
    threads: int = 16  # RLIMIT_NPROC under the sandbox uid (no processes at all: seccomp)
    output_bytes: int = 8 * 1024 * 1024  # the encoded result
    max_rows: int = 100_000  # rows of the result
    stdout_bytes: int = 64 * 1024  # printed output beyond this is an error

    def clamp(self, requested: dict[str, Any] | None) -> SandboxLimits:
        """``requested`` values, each no looser than this object's."""
        if not requested:
            return self
        values: dict[str, Any] = {}
        for f in fields(self):
            if f.name in requested and requested[f.name] is not None:
                value = type(getattr(self, f.name))(requested[f.name])
                if value <= 0:
                    raise ValueError(f"limit {f.name} must be positive")
                values[f.name] = min(value, getattr(self, f.name))
        return replace(self, **values)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _env_number(env: dict[str, str], name: str, default: Any) -> Any:
    raw = env.get(f"ASSAY_SANDBOX_{name.upper()}")
    if raw is None or raw == "":
        return default
    return type(default)(raw)


def limits_from_env(env: dict[str, str] | None = None) -> SandboxLimits:
    env = dict(os.environ if env is None else env)
    base = SandboxLimits()
    return replace(base, **{f.name: _env_number(env, f.name, getattr(base, f.name)) for f in fields(base)})


def required_layers_from_env(env: dict[str, str] | None = None) -> tuple[str, ...]:
    env = dict(os.environ if env is None else env)
    raw = env.get("ASSAY_SANDBOX_REQUIRE")
    if raw is None:
        return DEFAULT_REQUIRED_LAYERS
    return tuple(p.strip() for p in raw.split(",") if p.strip())


# The uid range a root executor drops its children to: one uid per executor, so RLIMIT_NPROC
# counts only that executor's own child and no two executors' children share a uid.
SANDBOX_UID_BASE = int(os.environ.get("ASSAY_SANDBOX_UID_BASE", "2000000"))
SANDBOX_UID_SPAN = 100_000
