"""Host errors and the one place where OSError becomes one of them.

Callers of the host layer handle these situations, never errno values:

* ``ThreadGone``: the thread or process no longer exists (it exited, or was reaped).
  This is ordinary control flow for a scheduler of other programs' threads.
* ``AccessDenied``: the kernel refused (missing privilege, ptrace check,
  ``perf_event_paranoid``).
* ``Unsupported``: this kernel or machine lacks the feature (no PMU event, no syscall).
* ``InvalidMask``: an affinity mask that has no CPU in the thread's allowed set.
* ``Overridden``: someone else set a thread's mask since the daemon last did.
* ``TooManyFiles``: the process (EMFILE) or system (ENFILE) is out of file descriptors.

Every OSError raised by a syscall or a /proc read goes through :func:`translated`,
which applies one table; a call site may re-interpret an errno whose meaning depends on
the syscall (ENOENT is "no such event" for perf_event_open but "gone" for /proc, EINVAL
is "bad mask" only for sched_setaffinity).
"""

from __future__ import annotations

import errno
from collections.abc import Iterator, Mapping
from contextlib import contextmanager


class HostError(Exception):
    """Base of every error raised by ``parlschedd.host``; carries the ids involved."""

    def __init__(
        self,
        message: str,
        *,
        tid: int | None = None,
        pid: int | None = None,
        errno_: int | None = None,
    ) -> None:
        super().__init__(message)
        self.tid = tid
        self.pid = pid
        self.errno = errno_


class ThreadGone(HostError):
    """The thread or process vanished (ESRCH, or ENOENT under /proc)."""


class AccessDenied(HostError):
    """The kernel refused the operation (EPERM, EACCES)."""


class Unsupported(HostError):
    """The kernel or hardware lacks the feature (ENOSYS, EOPNOTSUPP, ENODEV)."""


class InvalidMask(HostError):
    """The CPU mask has no CPU the thread may run on (EINVAL from sched_setaffinity)."""


class Overridden(HostError):
    """Someone else (taskset, an administrator, the program itself) set the thread's
    mask since we last did: it is theirs now, not ours to change or to restore."""


class TooManyFiles(HostError):
    """Out of file descriptors (EMFILE per process, ENFILE system-wide)."""


_DEFAULT: Mapping[int, type[HostError]] = {
    errno.ESRCH: ThreadGone,
    errno.ENOENT: ThreadGone,
    errno.EPERM: AccessDenied,
    errno.EACCES: AccessDenied,
    errno.ENOSYS: Unsupported,
    errno.EOPNOTSUPP: Unsupported,
    errno.ENODEV: Unsupported,
    errno.EMFILE: TooManyFiles,
    errno.ENFILE: TooManyFiles,
}


@contextmanager
def translated(
    what: str,
    *,
    tid: int | None = None,
    pid: int | None = None,
    overrides: Mapping[int, type[HostError]] | None = None,
) -> Iterator[None]:
    """Re-raise an OSError inside the block as the matching :class:`HostError`.

    ``what`` names the operation for the message; ``overrides`` re-interprets errnos
    whose meaning is specific to one syscall. An errno found in neither table becomes a
    plain ``HostError``, so callers only ever catch ``HostError`` subclasses.
    """
    try:
        yield
    except OSError as exc:
        raise as_host_error(exc, what, tid=tid, pid=pid, overrides=overrides) from exc


def as_host_error(
    exc: OSError,
    what: str,
    *,
    tid: int | None = None,
    pid: int | None = None,
    overrides: Mapping[int, type[HostError]] | None = None,
) -> HostError:
    """The HostError for an OSError: the table behind ``translated``, callable from a
    plain ``except`` where a context manager per call would cost too much (the
    daemon's per-thread, per-period reads)."""
    code = exc.errno if exc.errno is not None else 0
    kind = (overrides or {}).get(code) or _DEFAULT.get(code, HostError)
    subject = f" (tid {tid})" if tid is not None else f" (pid {pid})" if pid is not None else ""
    reason = errno.errorcode.get(code, str(code))
    return kind(f"{what}{subject}: {reason}", tid=tid, pid=pid, errno_=code)
