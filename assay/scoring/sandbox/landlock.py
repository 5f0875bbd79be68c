"""Landlock (Linux ≥ 5.13) through raw syscalls with ctypes: no extension module, no dependency.

A ruleset *handles* access rights (everything it handles is denied unless a rule allows it) and
rules allow some of them beneath a directory. Once a process restricts itself it can never undo
it, and its future children inherit the domain. Used here for:

- the file system: read-only beneath the interpreter's library trees and the dataset's folder,
  read-write beneath the run's temp dir, nothing elsewhere (ABI 1+);
- TCP: bind and connect handled with no rule, so both are denied (ABI 4+);
- scopes: signals to processes outside the domain and abstract unix sockets denied (ABI 6+).

x86_64 and aarch64 share the syscall numbers (444-446).
"""

from __future__ import annotations

import ctypes
import os
import platform
from collections.abc import Iterable

_SYS_CREATE_RULESET = 444
_SYS_ADD_RULE = 445
_SYS_RESTRICT_SELF = 446
_CREATE_RULESET_VERSION = 1
_RULE_PATH_BENEATH = 1

# File-system rights, by the ABI that introduced them.
EXECUTE = 1 << 0
WRITE_FILE = 1 << 1
READ_FILE = 1 << 2
READ_DIR = 1 << 3
REMOVE_DIR = 1 << 4
REMOVE_FILE = 1 << 5
MAKE_CHAR = 1 << 6
MAKE_DIR = 1 << 7
MAKE_REG = 1 << 8
MAKE_SOCK = 1 << 9
MAKE_FIFO = 1 << 10
MAKE_BLOCK = 1 << 11
MAKE_SYM = 1 << 12
REFER = 1 << 13  # ABI 2
TRUNCATE = 1 << 14  # ABI 3
IOCTL_DEV = 1 << 15  # ABI 5

NET_BIND_TCP = 1 << 0  # ABI 4
NET_CONNECT_TCP = 1 << 1

SCOPE_ABSTRACT_UNIX_SOCKET = 1 << 0  # ABI 6
SCOPE_SIGNAL = 1 << 1

READ_ONLY = READ_FILE | READ_DIR
_FILE_RIGHTS = EXECUTE | WRITE_FILE | READ_FILE | TRUNCATE | IOCTL_DEV


def _fs_rights(abi: int) -> int:
    rights = (1 << 13) - 1
    if abi >= 2:
        rights |= REFER
    if abi >= 3:
        rights |= TRUNCATE
    if abi >= 5:
        rights |= IOCTL_DEV
    return rights


def read_write(abi: int) -> int:
    """What the run's temp dir allows: files and folders, read, write, create, delete; no devices,
    sockets or fifos."""
    rights = READ_FILE | READ_DIR | WRITE_FILE | REMOVE_DIR | REMOVE_FILE | MAKE_DIR | MAKE_REG | MAKE_SYM
    if abi >= 2:
        rights |= REFER
    if abi >= 3:
        rights |= TRUNCATE
    return rights


class _RulesetAttr(ctypes.Structure):
    _fields_ = [("handled_access_fs", ctypes.c_uint64), ("handled_access_net", ctypes.c_uint64), ("scoped", ctypes.c_uint64)]


class _PathBeneathAttr(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long


class LandlockError(OSError):
    pass


def _check(result: int, what: str) -> int:
    if result < 0:
        err = ctypes.get_errno()
        raise LandlockError(err, f"landlock {what}: {os.strerror(err)}")
    return result


def abi_version() -> int:
    """The kernel's Landlock ABI version; 0 when Landlock is missing or disabled."""
    if platform.system() != "Linux" or platform.machine() not in ("x86_64", "aarch64"):
        return 0
    result = _libc.syscall(_SYS_CREATE_RULESET, None, ctypes.c_size_t(0), ctypes.c_uint32(_CREATE_RULESET_VERSION))
    return int(result) if result > 0 else 0


def restrict(
    abi: int,
    *,
    read_only: Iterable[str],
    read_write_dirs: Iterable[str],
    deny_tcp: bool = True,
    scope: bool = True,
) -> dict[str, bool]:
    """Restrict the calling process (and its future children) for good. Needs ``no_new_privs`` set
    (or CAP_SYS_ADMIN). Returns which parts were applied. Paths that do not exist are skipped."""
    if abi < 1:
        raise LandlockError(0, "landlock is not available")
    attr = _RulesetAttr(handled_access_fs=_fs_rights(abi))
    size = 8
    applied = {"fs": True, "tcp": False, "scope": False}
    if deny_tcp and abi >= 4:
        attr.handled_access_net = NET_BIND_TCP | NET_CONNECT_TCP
        size = 16
        applied["tcp"] = True
    if scope and abi >= 6:
        attr.scoped = SCOPE_ABSTRACT_UNIX_SOCKET | SCOPE_SIGNAL
        size = 24
        applied["scope"] = True
    ruleset = _check(_libc.syscall(_SYS_CREATE_RULESET, ctypes.byref(attr), ctypes.c_size_t(size), ctypes.c_uint32(0)), "create_ruleset")
    try:
        rw = read_write(abi)
        for paths, rights in ((read_only, READ_ONLY), (read_write_dirs, rw)):
            for path in paths:
                _add_path(ruleset, path, rights)
        _check(_libc.syscall(_SYS_RESTRICT_SELF, ctypes.c_int(ruleset), ctypes.c_uint32(0)), "restrict_self")
    finally:
        os.close(ruleset)
    return applied


def _add_path(ruleset: int, path: str, rights: int) -> None:
    try:
        fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
    except FileNotFoundError:
        return
    try:
        if not os.path.isdir(path):
            rights &= _FILE_RIGHTS
        rule = _PathBeneathAttr(allowed_access=rights, parent_fd=fd)
        _check(
            _libc.syscall(_SYS_ADD_RULE, ctypes.c_int(ruleset), ctypes.c_int(_RULE_PATH_BENEATH), ctypes.byref(rule), ctypes.c_uint32(0)),
            f"add_rule {path}",
        )
    finally:
        os.close(fd)
