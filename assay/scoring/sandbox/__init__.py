"""The sandbox for generated code: a clean, long-lived executor per worker process with pandas
pre-imported, one confined child per run (rlimits, unprivileged uid, no network, Landlock,
seccomp), bounded JSON results. Generated code never runs in a worker process.

Public API (see :mod:`assay.scoring.sandbox.client`): :func:`sandbox_client` (the per-process
accessor metrics use), :class:`SandboxClient`, :class:`DatasetRef`, :class:`RunResult`,
:class:`SandboxLimits`, :func:`sandbox_layers`, :func:`reset_after_fork`,
:func:`shutdown_sandbox`, :class:`SandboxError`, :class:`SandboxUnavailable`.
"""

from assay.scoring.sandbox.client import (
    DatasetRef,
    RunResult,
    SandboxClient,
    SandboxError,
    SandboxUnavailable,
    reset_after_fork,
    sandbox_client,
    sandbox_layers,
    set_sandbox_client,
    shutdown_sandbox,
)
from assay.scoring.sandbox.config import SandboxLimits

__all__ = [
    "DatasetRef",
    "RunResult",
    "SandboxClient",
    "SandboxError",
    "SandboxLimits",
    "SandboxUnavailable",
    "reset_after_fork",
    "sandbox_client",
    "sandbox_layers",
    "set_sandbox_client",
    "shutdown_sandbox",
]
