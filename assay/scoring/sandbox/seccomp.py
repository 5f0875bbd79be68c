"""A seccomp-BPF deny-list, assembled by hand and installed with prctl through ctypes.

Everything not listed is allowed (Python and pandas need a wide, version-dependent set of
syscalls); what is listed fails with ``EPERM`` (``ENOSYS`` for ``clone3``, so the C library falls
back to ``clone``, whose flags a filter can read):

- no new processes: ``fork``, ``vfork``, ``execve``, ``execveat``, and ``clone`` without
  ``CLONE_THREAD`` (threads stay possible, bounded by ``RLIMIT_NPROC`` under the sandbox uid);
- no network at all: ``socket`` and ``socketpair`` for every family;
- signals only to itself: ``kill``, ``tkill``, ``tgkill``, ``rt_(tg)sigqueueinfo`` towards any
  other pid fail (so do ``pidfd_send_signal``);
- no way around the other layers: namespaces and mounts, ptrace and cross-process memory,
  pidfd file-descriptor theft, keyrings, bpf, perf, userfaultfd, io_uring, module and kexec
  loading, uid/gid/capability changes, device nodes, handle-based opens, personality.

Only x86_64 is supported (other architectures report the layer as unavailable). A syscall made
with another architecture's convention, or the x32 ABI, kills the process.
"""

from __future__ import annotations

import ctypes
import errno
import os
import platform

_AUDIT_ARCH_X86_64 = 0xC000003E
_X32_SYSCALL_BIT = 0x40000000
_CLONE_THREAD = 0x00010000

_RET_KILL_PROCESS = 0x80000000
_RET_ERRNO = 0x00050000
_RET_ALLOW = 0x7FFF0000

_LD_W_ABS = 0x20
_JEQ_K = 0x15
_JGE_K = 0x35
_JSET_K = 0x45
_RET_K = 0x06

_PR_SET_NO_NEW_PRIVS = 38
_PR_SET_SECCOMP = 22
_SECCOMP_MODE_FILTER = 2

# x86_64 numbers.
DENIED_X86_64: dict[str, int] = {
    "socket": 41, "socketpair": 53, "fork": 57, "vfork": 58, "execve": 59, "execveat": 322,
    "ptrace": 101, "process_vm_readv": 310, "process_vm_writev": 311, "kcmp": 312,
    "pidfd_getfd": 438, "pidfd_send_signal": 424,
    "mount": 165, "umount2": 166, "pivot_root": 155, "chroot": 161, "unshare": 272, "setns": 308,
    "fsopen": 430, "fsconfig": 431, "fsmount": 432, "move_mount": 429, "open_tree": 428, "fspick": 433,
    "mount_setattr": 442,
    "keyctl": 250, "add_key": 248, "request_key": 249, "bpf": 321, "perf_event_open": 298,
    "userfaultfd": 323, "io_uring_setup": 425, "io_uring_enter": 426, "io_uring_register": 427,
    "init_module": 175, "finit_module": 313, "delete_module": 176, "kexec_load": 246, "kexec_file_load": 320,
    "reboot": 169, "swapon": 167, "swapoff": 168, "acct": 163, "quotactl": 179, "syslog": 103,
    "name_to_handle_at": 303, "open_by_handle_at": 304, "personality": 135, "mknod": 133, "mknodat": 259,
    "setuid": 105, "setgid": 106, "setreuid": 113, "setregid": 114, "setresuid": 117, "setresgid": 119,
    "setgroups": 116, "setfsuid": 122, "setfsgid": 123, "capset": 126, "iopl": 172, "ioperm": 173,
    "uselib": 134, "vhangup": 153, "lookup_dcookie": 212,
}
_CLONE = 56
_CLONE3 = 435
# Signal senders whose first argument is the target pid / tgid: allowed only towards the process
# itself (or its own process group), so generated code cannot signal the executor or anyone else.
_SIGNAL_SENDERS = {"kill": 62, "tkill": 200, "tgkill": 234, "rt_sigqueueinfo": 129, "rt_tgsigqueueinfo": 297}


def supported() -> bool:
    return platform.system() == "Linux" and platform.machine() == "x86_64"


class _SockFilter(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint16), ("jt", ctypes.c_uint8), ("jf", ctypes.c_uint8), ("k", ctypes.c_uint32)]


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_uint16), ("filter", ctypes.POINTER(_SockFilter))]


def _assemble(program: list[tuple[int, str | int, str | int, int | str]]) -> list[tuple[int, int, int, int]]:
    """Resolve label jumps. An entry is (code, jt, jf, k); a str jt/jf is a label; a str k on a
    ``("label", ...)`` pseudo-instruction names the next instruction."""
    labels: dict[str, int] = {}
    real: list[tuple[int, str | int, str | int, int]] = []
    for code, jt, jf, k in program:
        if code == -1:
            labels[str(k)] = len(real)
        else:
            real.append((code, jt, jf, int(k)))
    out = []
    for index, (code, jt, jf, k) in enumerate(real):
        def rel(target: str | int, index: int = index) -> int:
            if isinstance(target, int):
                return target
            offset = labels[target] - index - 1
            if not 0 <= offset <= 255:
                raise ValueError(f"seccomp jump to {target} out of range ({offset})")
            return offset

        out.append((code, rel(jt), rel(jf), k))
    return out


def build_program(own_pid: int) -> list[tuple[int, int, int, int]]:
    """The filter for the process ``own_pid`` (built in that process, after the fork)."""
    own_group = (-own_pid) & 0xFFFFFFFF
    prog: list[tuple[int, str | int, str | int, int | str]] = [
        (_LD_W_ABS, 0, 0, 4),  # seccomp_data.arch
        (_JEQ_K, 0, "kill", _AUDIT_ARCH_X86_64),
        (_LD_W_ABS, 0, 0, 0),  # seccomp_data.nr
        (_JGE_K, "kill", 0, _X32_SYSCALL_BIT),
        (_JEQ_K, "clone", 0, _CLONE),
        (_JEQ_K, "enosys", 0, _CLONE3),
    ]
    for nr in sorted(_SIGNAL_SENDERS.values()):
        prog.append((_JEQ_K, "signal", 0, nr))
    for nr in sorted(set(DENIED_X86_64.values())):
        prog.append((_JEQ_K, "eperm", 0, nr))
    prog += [
        (_RET_K, 0, 0, _RET_ALLOW),
        (-1, 0, 0, "clone"),
        (_LD_W_ABS, 0, 0, 16),  # args[0], low 32 bits: clone flags
        (_JSET_K, "allow", "eperm", _CLONE_THREAD),
        (-1, 0, 0, "signal"),
        (_LD_W_ABS, 0, 0, 16),  # args[0], low 32 bits: the target pid (0: own group)
        (_JEQ_K, "allow", 0, own_pid),
        (_JEQ_K, "allow", 0, 0),
        (_JEQ_K, "allow", "eperm", own_group),
        (-1, 0, 0, "allow"),
        (_RET_K, 0, 0, _RET_ALLOW),
        (-1, 0, 0, "eperm"),
        (_RET_K, 0, 0, _RET_ERRNO | errno.EPERM),
        (-1, 0, 0, "enosys"),
        (_RET_K, 0, 0, _RET_ERRNO | errno.ENOSYS),
        (-1, 0, 0, "kill"),
        (_RET_K, 0, 0, _RET_KILL_PROCESS),
    ]
    return _assemble(prog)


_libc = ctypes.CDLL(None, use_errno=True)


def set_no_new_privs() -> None:
    if _libc.prctl(_PR_SET_NO_NEW_PRIVS, ctypes.c_ulong(1), ctypes.c_ulong(0), ctypes.c_ulong(0), ctypes.c_ulong(0)) != 0:
        err = ctypes.get_errno()
        raise OSError(err, "prctl(PR_SET_NO_NEW_PRIVS) failed")


def install() -> None:
    """Install the filter on the calling thread (the sandboxed child is single-threaded)."""
    if not supported():
        raise OSError(errno.ENOSYS, f"seccomp filter not built for {platform.machine()}")
    instructions = build_program(os.getpid())
    array = (_SockFilter * len(instructions))(*[_SockFilter(*i) for i in instructions])
    fprog = _SockFprog(len(instructions), ctypes.cast(array, ctypes.POINTER(_SockFilter)))
    set_no_new_privs()
    if _libc.prctl(_PR_SET_SECCOMP, ctypes.c_ulong(_SECCOMP_MODE_FILTER), ctypes.byref(fprog), ctypes.c_ulong(0), ctypes.c_ulong(0)) != 0:
        err = ctypes.get_errno()
        raise OSError(err, "prctl(PR_SET_SECCOMP) failed")
