"""Whose files the daemon believes, as sshd's StrictModes judges a user's files.

The daemon runs as root and acts on what its config and its state file say: the
config's rules choose which processes it pins, the state file's saved masks are put
back on root's threads at the next start and its targets attached again. A file, or a
directory holding one, that another user may write hands them that power: the daemon
refuses a config file or state dir owned by anyone but root or its own user, or
writable by group or others, and reads no state file but its own. So too every
directory the path's lookup passes through (``untrusted_on_path``): whoever may write
in one may put another file, or a link, in the place of what follows.
"""

from __future__ import annotations

import os
import pwd
import shlex
import stat
from collections import deque
from collections.abc import Collection
from typing import NamedTuple

MAX_LINKS = 40  # as the kernel's lookup: more links than this, and it fails (ELOOP)


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


def _owned_by(uid: int, owners: Collection[int]) -> str:
    return f"owned by {who(uid)}, not by {' or '.join(who(owner) for owner in owners)}"


def untrusted(st: os.stat_result, owners: Collection[int], sticky_ok: bool = False) -> str | None:
    """What makes a file or directory (``st``) one the daemon must not believe: an owner
    not among ``owners``, write permission for its group or others (``sticky_ok``: but
    for a sticky directory's, as /tmp's, where others cannot replace what they do not
    own). None when neither."""
    wrong = []
    if st.st_uid not in owners:
        wrong.append(_owned_by(st.st_uid, owners))
    if sticky_ok and stat.S_ISDIR(st.st_mode) and st.st_mode & stat.S_ISVTX:
        pass
    elif writers := [name for bit, name in ((stat.S_IWGRP, "its group"), (stat.S_IWOTH, "others")) if st.st_mode & bit]:
        wrong.append(f"mode {stat.S_IMODE(st.st_mode):04o}, writable by {' and '.join(writers)}")
    return "; ".join(wrong) or None


class OnPath(NamedTuple):
    """What on a path's lookup the daemon must not believe: ``kind`` "directory" or
    "link", where it is (``path``), and why (``problem``)."""

    kind: str
    path: str
    problem: str

    def said(self) -> str:
        return f"{self.kind} {self.path} on its path: {self.problem}"


def untrusted_on_path(path: str | os.PathLike[str], owners: Collection[int]) -> OnPath | None:
    """The first directory the lookup of ``path`` passes through, from / on, that the
    daemon must not believe, or a link it follows that others may replace; None when
    there is none. Each component is looked up as the kernel does: its directory is
    judged (owned by one of ``owners``, not writable by group or others unless sticky),
    a link is its directory's content (judged with it: in a sticky directory others
    may write, its own owner must be one of ``owners``) and is followed, its target
    looked up the same way, so both the path as given and the one it resolves to are
    judged, and every directory of the links between. ``path`` itself is not: the
    caller judges what it opened. What cannot be looked up ends the walk (None): the
    caller's own use of the path says what is wrong."""
    parts = deque(_parts(os.path.join(os.getcwd(), os.fspath(path))))
    here, links, judged = "/", 0, set()
    while parts:
        name = parts.popleft()
        if name == "..":
            here = os.path.dirname(here)
            continue
        try:
            held_in = os.lstat(here)
            if here not in judged:
                if problem := untrusted(held_in, owners, sticky_ok=True):
                    return OnPath("directory", here, problem)
                judged.add(here)
            entry = os.path.join(here, name)
            st = os.lstat(entry)
            if stat.S_ISLNK(st.st_mode):
                if held_in.st_mode & (stat.S_IWGRP | stat.S_IWOTH) and st.st_uid not in owners:
                    return OnPath("link", entry, f"{_owned_by(st.st_uid, owners)}, in a directory others may write")
                links += 1
                target = os.readlink(entry)
            elif parts and not stat.S_ISDIR(st.st_mode):
                return None
            else:
                here = entry
                continue
        except OSError:
            return None
        if links > MAX_LINKS:
            return None
        if target.startswith("/"):
            here = "/"
        parts.extendleft(reversed(_parts(target)))
    return None


def _parts(path: str) -> list[str]:
    return [part for part in path.split("/") if part not in ("", ".")]


def fix(path: str | os.PathLike[str], euid: int = 0, link: bool = False) -> str:
    """What to run to make ``path`` one a daemon running as ``euid`` believes: owned by
    that user (root, or the daemon's own, which must write in its state dir); for a
    ``link``, the link itself (its mode means nothing)."""
    owner = "root:" if euid == 0 else _owner(euid)
    path = os.fspath(path)
    quoted = shlex.quote(f"./{path}" if path.startswith("-") else path)  # not an option of chown's
    if link:
        return f"chown -h {owner} {quoted}"
    return f"chown {owner} {quoted} && chmod go-w {quoted}"


def _owner(uid: int) -> str:
    """A user as chown takes it: "name:" (and its login group), or the bare number of a
    uid no user has ("12345:" asks for the login group of a user there is none of)."""
    try:
        return f"{pwd.getpwuid(uid).pw_name}:"
    except KeyError:
        return str(uid)
