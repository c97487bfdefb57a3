"""Whose files the daemon believes, as sshd's StrictModes judges a user's files.

The daemon runs as root and acts on what its config and its state file say: the
config's rules choose which processes it pins, the state file's saved masks are put
back on root's threads at the next start and its targets attached again. A file, or a
directory holding one, that another user may write hands them that power: the daemon
refuses a config file or state dir owned by anyone but root or its own user, or
writable by group or others, and reads no state file but its own.
"""

from __future__ import annotations

import os
import pwd
import shlex
import stat
from collections.abc import Collection


def who(uid: int) -> str:
    """A uid as said in a refusal: "root", or "uid 65534 (nobody)"."""
    if uid == 0:
        return "root"
    try:
        return f"uid {uid} ({pwd.getpwuid(uid).pw_name})"
    except KeyError:
        return f"uid {uid} (no such user)"


def trusted_owners(euid: int) -> tuple[int, ...]:
    """Who may own the daemon's config and state dir: root, and the user the daemon runs
    as (one with capabilities, not root)."""
    return (0,) if euid == 0 else (0, euid)


def untrusted(st: os.stat_result, owners: Collection[int]) -> str | None:
    """What makes a file or directory (``st``) one the daemon must not believe: an owner
    not among ``owners``, write permission for its group or others. None when neither."""
    wrong = []
    if st.st_uid not in owners:
        wrong.append(f"owned by {who(st.st_uid)}, not by {' or '.join(who(uid) for uid in owners)}")
    if writers := [name for bit, name in ((stat.S_IWGRP, "its group"), (stat.S_IWOTH, "others")) if st.st_mode & bit]:
        wrong.append(f"mode {stat.S_IMODE(st.st_mode):04o}, writable by {' and '.join(writers)}")
    return "; ".join(wrong) or None


def fix(path: str | os.PathLike[str], euid: int = 0) -> str:
    """What to run to make ``path`` one a daemon running as ``euid`` believes: owned by
    that user (root, or the daemon's own, which must write in its state dir)."""
    owner = "root" if euid == 0 else _user(euid)
    quoted = shlex.quote(os.fspath(path))
    return f"chown {owner}: {quoted} && chmod go-w {quoted}"


def _user(uid: int) -> str:
    """A user's name for chown, its number where it has none."""
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)
