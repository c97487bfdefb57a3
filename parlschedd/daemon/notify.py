"""sd_notify(3): READY / STATUS / WATCHDOG / STOPPING to systemd.

Uses systemd-python when it is installed (the ``systemd`` extra), else writes the
datagram itself; both are no-ops when NOTIFY_SOCKET is unset (not under systemd).
"""

from __future__ import annotations

import os
import socket

try:
    from systemd import daemon as _sd  # type: ignore[import-not-found]
except ImportError:  # pragma: no cover - depends on the optional extra
    _sd = None


def notify(message: str) -> bool:
    """Send ``message`` (``KEY=value`` lines) to systemd; False when not under it."""
    if _sd is not None:
        return bool(_sd.notify(message))
    address = os.environ.get("NOTIFY_SOCKET")
    if not address:
        return False
    if address.startswith("@"):
        address = "\0" + address[1:]
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC) as sock:
        sock.sendto(message.encode(), address)
    return True


def watchdog_interval() -> float | None:
    """Half the watchdog timeout systemd asked for, in seconds, or None."""
    usec = os.environ.get("WATCHDOG_USEC")
    pid = os.environ.get("WATCHDOG_PID")
    if not usec or (pid and int(pid) != os.getpid()):
        return None
    return int(usec) / 2e6
