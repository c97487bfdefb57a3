"""Whose files the daemon believes (parlschedd/trust.py), judged on real files, real
directories and real links in tmp_path, with real owners (root, nobody, a uid no user
has) and modes; and the advice ``fix`` gives, run in a shell to see that it works."""

from __future__ import annotations

import errno
import os
import pwd
import shlex
import subprocess
from pathlib import Path

import pytest

from parlschedd.trust import MAX_LINKS, OnPath, fix, trusted_owners, untrusted, untrusted_on_path, who
from tests.conftest import NOBODY, needs_root

pytestmark = needs_root  # every test chowns to another user

ROOTS = trusted_owners(0)
NOT_ROOTS = "owned by uid 65534 (nobody), not by root"


def _nameless_uid() -> int:
    """A uid no user on this host has."""
    return next(uid for uid in range(40000, 60000) if not _has_name(uid))


def _has_name(uid: int) -> bool:
    try:
        pwd.getpwuid(uid)
    except KeyError:
        return False
    return True


def _made(path: Path, mode: int, owner: int = 0, text: str | None = None) -> Path:
    """A directory (or, with ``text``, a file) at ``path`` with this mode and owner."""
    if text is None:
        path.mkdir()
    else:
        path.write_text(text)
    os.chown(path, owner, owner)
    path.chmod(mode)  # after chown, which clears a file's setuid/setgid bits
    return path


def _link(at: Path, to: Path | str, owner: int = 0) -> Path:
    os.symlink(to, at)
    os.lchown(at, owner, owner)
    return at


def test_who_names_root_a_user_and_a_uid_no_user_has():
    nameless = _nameless_uid()
    assert (who(0), who(NOBODY), who(nameless)) == ("root", "uid 65534 (nobody)", f"uid {nameless} (no such user)")


def test_a_daemon_as_root_trusts_root_alone_one_as_its_own_user_that_user_too():
    assert trusted_owners(0) == (0,)
    assert trusted_owners(NOBODY) == (0, NOBODY)


def test_a_file_of_roots_no_one_else_may_write_is_trusted(tmp_path):
    for mode in (0o644, 0o600, 0o755, 0o400):
        path = _made(tmp_path / f"{mode:o}.yaml", mode, text="x")
        assert untrusted(os.stat(path), ROOTS) is None, oct(mode)


def test_a_file_another_user_owns_is_refused_naming_owner_and_who_should(tmp_path):
    path = _made(tmp_path / "c.yaml", 0o644, NOBODY, text="x")
    assert untrusted(os.stat(path), ROOTS) == NOT_ROOTS
    nameless = _nameless_uid()
    os.chown(path, nameless, nameless)
    assert untrusted(os.stat(path), trusted_owners(NOBODY)) == \
        f"owned by uid {nameless} (no such user), not by root or uid 65534 (nobody)"


def test_the_daemons_own_user_is_trusted_as_root_is_but_by_its_daemon_alone(tmp_path):
    """A daemon run as nobody (with capabilities) must write in its state dir: nobody's
    own files are believed by it, never by root's daemon."""
    path = _made(tmp_path / "c.yaml", 0o644, NOBODY, text="x")
    roots = _made(tmp_path / "r.yaml", 0o644, text="x")
    assert untrusted(os.stat(path), trusted_owners(NOBODY)) is None
    assert untrusted(os.stat(roots), trusted_owners(NOBODY)) is None
    assert untrusted(os.stat(path), trusted_owners(0)) == NOT_ROOTS


@pytest.mark.parametrize("mode, said", [
    (0o664, "mode 0664, writable by its group"),
    (0o646, "mode 0646, writable by others"),
    (0o666, "mode 0666, writable by its group and others"),
    (0o620, "mode 0620, writable by its group"),
])
def test_a_file_its_group_or_others_may_write_is_refused_naming_the_mode(tmp_path, mode, said):
    path = _made(tmp_path / "c.yaml", mode, text="x")
    assert untrusted(os.stat(path), ROOTS) == said


def test_both_wrongs_are_said_owner_first(tmp_path):
    path = _made(tmp_path / "c.yaml", 0o666, NOBODY, text="x")
    assert untrusted(os.stat(path), ROOTS) == f"{NOT_ROOTS}; mode 0666, writable by its group and others"


def test_a_sticky_directory_others_may_write_is_trusted_only_where_asked(tmp_path):
    """/tmp's 1777: others cannot replace what they do not own there, so a directory on
    a path may be one (sticky_ok); the state dir itself, or a file, may not."""
    sticky = _made(tmp_path / "sticky", 0o1777)
    plain = _made(tmp_path / "plain", 0o777)
    assert untrusted(os.stat(sticky), ROOTS, sticky_ok=True) is None
    assert untrusted(os.stat(sticky), ROOTS) == "mode 1777, writable by its group and others"
    assert untrusted(os.stat(plain), ROOTS, sticky_ok=True) == "mode 0777, writable by its group and others"
    sticky_file = _made(tmp_path / "f", 0o1666, text="x")  # the sticky bit means nothing on a file
    assert untrusted(os.stat(sticky_file), ROOTS, sticky_ok=True) == "mode 1666, writable by its group and others"
    theirs = _made(tmp_path / "theirs", 0o1777, NOBODY)  # sticky, but its owner may do as it likes in it
    assert untrusted(os.stat(theirs), ROOTS, sticky_ok=True) == NOT_ROOTS


def test_a_path_through_roots_directories_alone_has_nothing_on_it(tmp_path):
    """pytest's tmp_path: root's 0700 directories under /tmp, root's sticky 1777."""
    deep = _made(_made(tmp_path / "a", 0o755) / "b", 0o700)
    path = _made(deep / "c.yaml", 0o666, NOBODY, text="x")  # the file itself is the caller's to judge
    assert untrusted_on_path(path, ROOTS) is None
    assert untrusted_on_path(_made(tmp_path / "sticky", 0o1777) / "absent", ROOTS) is None


@pytest.mark.parametrize("mode, owner, said", [
    (0o777, 0, "mode 0777, writable by its group and others"),
    (0o775, 0, "mode 0775, writable by its group"),
    (0o755, NOBODY, NOT_ROOTS),
    (0o1777, NOBODY, NOT_ROOTS),
])
def test_a_directory_on_the_path_someone_else_may_write_makes_it_untrusted(tmp_path, mode, owner, said):
    d = _made(tmp_path / "d", mode, owner)
    path = _made(_made(d / "inner", 0o755) / "c.yaml", 0o644, text="x")
    assert untrusted_on_path(path, ROOTS) == OnPath("directory", str(d), said)
    assert untrusted_on_path(path, ROOTS).said() == f"directory {d} on its path: {said}"
    assert untrusted_on_path(d / "not-there-yet", ROOTS) == OnPath("directory", str(d), said)


def test_the_first_directory_from_the_root_down_is_named(tmp_path):
    outer = _made(tmp_path / "outer", 0o755, NOBODY)
    inner = _made(outer / "inner", 0o777)
    assert untrusted_on_path(inner / "c.yaml", ROOTS) == OnPath("directory", str(outer), NOT_ROOTS)


def test_a_directory_of_the_daemons_own_user_on_the_path_is_trusted_by_its_daemon(tmp_path):
    d = _made(tmp_path / "d", 0o755, NOBODY)
    assert untrusted_on_path(d / "state", trusted_owners(NOBODY)) is None
    assert untrusted_on_path(d / "state", trusted_owners(0)) == OnPath("directory", str(d), NOT_ROOTS)


def test_a_relative_path_is_judged_from_the_working_directory_up(tmp_path, monkeypatch):
    d = _made(tmp_path / "d", 0o777)
    monkeypatch.chdir(d)
    assert untrusted_on_path("c.yaml", ROOTS) == OnPath("directory", str(d), "mode 0777, writable by its group and others")


def test_a_link_is_followed_and_the_directory_it_leads_into_judged(tmp_path):
    """The link's own directory is root's; where it points (a 0777 dir) is judged too,
    for an absolute and a relative target."""
    shared = _made(tmp_path / "shared", 0o777)
    _made(shared / "c.yaml", 0o644, text="x")
    etc = _made(tmp_path / "etc", 0o755)
    wrong = OnPath("directory", str(shared), "mode 0777, writable by its group and others")
    assert untrusted_on_path(_link(etc / "abs.yaml", shared / "c.yaml"), ROOTS) == wrong
    assert untrusted_on_path(_link(etc / "rel.yaml", "../shared/c.yaml"), ROOTS) == wrong
    assert untrusted_on_path(_link(etc / "dir", "../shared") / "c.yaml", ROOTS) == wrong
    fine = _made(tmp_path / "fine", 0o755)
    _made(fine / "c.yaml", 0o644, text="x")
    assert untrusted_on_path(_link(etc / "fine.yaml", "../fine/c.yaml"), ROOTS) is None


def test_dot_dot_after_a_link_leaves_the_links_target_as_the_kernel_does(tmp_path):
    """``l/../c.yaml`` with ``l`` a link to ``x/y`` is ``x/c.yaml``, not the
    ``c.yaml`` next to ``l`` a string's normpath would make of it: ``x`` is judged."""
    x = _made(tmp_path / "x", 0o777)
    _made(x / "y", 0o755)
    _made(x / "c.yaml", 0o644, text="in x")
    _made(tmp_path / "c.yaml", 0o644, text="beside the link")
    path = f"{_link(tmp_path / 'l', x / 'y')}/../c.yaml"
    assert Path(path).read_text() == "in x"
    assert untrusted_on_path(path, ROOTS) == OnPath("directory", str(x), "mode 0777, writable by its group and others")


def test_a_link_another_user_owns_in_a_sticky_directory_is_theirs_to_replace(tmp_path):
    """In /tmp's kind of directory others cannot replace a link of root's, but the
    owner of a link there may unlink it and put another in its place."""
    sticky = _made(tmp_path / "sticky", 0o1777)
    target = _made(_made(tmp_path / "fine", 0o755) / "c.yaml", 0o644, text="x")
    theirs = _link(sticky / "theirs.yaml", target, NOBODY)
    assert untrusted_on_path(theirs, ROOTS) == OnPath(
        "link", str(theirs), f"{NOT_ROOTS}, in a directory others may write")
    assert untrusted_on_path(theirs, trusted_owners(NOBODY)) is None  # the daemon's own user's
    assert untrusted_on_path(_link(sticky / "roots.yaml", target), ROOTS) is None


def test_a_link_another_user_owns_in_roots_own_directory_is_no_matter(tmp_path):
    """A link's target cannot be changed, only the link replaced, which its directory
    decides: root's 0755 there."""
    target = _made(tmp_path / "c.yaml", 0o644, text="x")
    assert untrusted_on_path(_link(_made(tmp_path / "etc", 0o755) / "l.yaml", target, NOBODY), ROOTS) is None


def _chain(where: Path, n: int, to: Path) -> Path:
    """``n`` links, each to the next, the last to ``to``; the first returned."""
    at = to
    for i in range(n):
        at = _link(where / f"l{i}", at.name if at.parent == where else at)
    return at


@pytest.mark.parametrize("n", [MAX_LINKS, MAX_LINKS + 1])
def test_links_are_followed_as_far_as_the_kernel_follows_them(tmp_path, n):
    """40 links: the kernel opens the file, and the 0777 directory it is in is found;
    41: the kernel refuses (ELOOP), and so the judge says nothing (the caller's open
    says what is wrong)."""
    shared = _made(tmp_path / "shared", 0o777)
    first = _chain(_made(tmp_path / "links", 0o755), n, _made(shared / "c.yaml", 0o644, text="x"))
    wrong = OnPath("directory", str(shared), "mode 0777, writable by its group and others")
    if n <= MAX_LINKS:
        assert first.read_text() == "x"
        assert untrusted_on_path(first, ROOTS) == wrong
    else:
        with pytest.raises(OSError) as raised:
            first.read_text()
        assert raised.value.errno == errno.ELOOP
        assert untrusted_on_path(first, ROOTS) is None


def test_what_cannot_be_looked_up_ends_the_walk(tmp_path):
    """A link loop, a file in the place of a directory, a missing directory: nothing
    said (before the 0777 directory after it is reached), the caller's use fails."""
    links = _made(tmp_path / "links", 0o755)
    _link(links / "a", "b")
    _link(links / "b", "a")
    assert untrusted_on_path(links / "a", ROOTS) is None
    _made(tmp_path / "file", 0o644, text="x")
    assert untrusted_on_path(tmp_path / "file" / "shared" / "c.yaml", ROOTS) is None
    assert untrusted_on_path(tmp_path / "absent" / "c.yaml", ROOTS) is None


def _run(command: str, cwd: Path) -> None:
    """``command`` as an admin would paste it into a shell, in ``cwd`` (a test's
    tmp_path), when every path it names is in there: a judge broken by a change (the
    sticky bit not looked at) would name /tmp itself, and its advice must not take
    /tmp's 1777 away from the whole host."""
    *_, named = shlex.split(command.split(" && ")[0])
    assert os.path.realpath(os.path.join(cwd, named)).startswith(f"{cwd}/"), f"{command!r} is not about {cwd}"
    done = subprocess.run(["sh", "-c", command], cwd=cwd, capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, f"{command!r}: {done.stderr}"


AWKWARD = ["c.yaml", "with space.yaml", "it's; rm -rf x.yaml", "$(touch pwned).yaml"]


@pytest.mark.parametrize("name", AWKWARD)
def test_the_advice_for_a_file_when_run_makes_it_trusted(tmp_path, name):
    path = _made(tmp_path / name, 0o666, NOBODY, text="x")
    said = fix(path)
    assert said == f"chown root: {_quoted(path)} && chmod go-w {_quoted(path)}"
    _run(said, tmp_path)
    assert untrusted(os.stat(path), ROOTS) is None
    assert sorted(p.name for p in tmp_path.iterdir()) == [name], "the advice touched nothing else"


def _quoted(path: Path) -> str:
    return shlex.quote(str(path))


def test_the_advice_for_a_directory_on_the_path_when_run_makes_the_path_trusted(tmp_path):
    d = _made(tmp_path / "shared dir", 0o1777, NOBODY)
    path = _made(d / "c.yaml", 0o644, text="x")
    on_path = untrusted_on_path(path, ROOTS)
    _run(fix(on_path.path), tmp_path)
    assert untrusted_on_path(path, ROOTS) is None
    assert oct(os.stat(d).st_mode & 0o7777) == oct(0o1755)


def test_the_advice_for_a_link_changes_the_link_not_what_it_points_to(tmp_path):
    sticky = _made(tmp_path / "sticky", 0o1777)
    target = _made(_made(tmp_path / "fine", 0o755) / "c.yaml", 0o644, NOBODY, text="x")
    theirs = _link(sticky / "their link.yaml", target, NOBODY)
    on_path = untrusted_on_path(theirs, ROOTS)
    said = fix(on_path.path, link=on_path.kind == "link")
    assert said == f"chown -h root: {_quoted(theirs)}"
    _run(said, tmp_path)
    assert untrusted_on_path(theirs, ROOTS) is None
    assert os.stat(target).st_uid == NOBODY, "the link's target is not the advice's to change"


def test_the_advice_for_a_daemon_run_as_its_own_user_gives_the_state_dir_to_that_user(tmp_path):
    """chown root: would leave the daemon's state dir unwritable to it."""
    run = _made(tmp_path / "run", 0o777)
    said = fix(run, NOBODY)
    assert said.startswith("chown nobody: ")
    _run(said, tmp_path)
    st = os.stat(run)
    assert (st.st_uid, untrusted(st, trusted_owners(NOBODY))) == (NOBODY, None)


def test_the_advice_for_a_daemon_run_as_a_uid_no_user_has_runs(tmp_path):
    """A daemon run as a uid without a passwd entry (a DynamicUser= where nss-systemd
    is not configured): the advice named the uid as "12345:", which chown refuses
    ("invalid spec": the colon asks for the login group of a user there is none of)."""
    uid = _nameless_uid()
    run = _made(tmp_path / "run", 0o777)
    _run(fix(run, uid), tmp_path)
    st = os.stat(run)
    assert (st.st_uid, untrusted(st, trusted_owners(uid))) == (uid, None)


@pytest.mark.parametrize("link", [False, True])
def test_the_advice_for_a_relative_path_that_starts_with_a_dash_runs(tmp_path, link):
    """``--config=-x.yaml``: shlex.quote leaves -x.yaml as it is, and chown took it
    for its options."""
    target = _made(tmp_path / "-x.yaml", 0o666, NOBODY, text="x")
    if link:
        target = _link(tmp_path / "-l.yaml", target.name, NOBODY)
    _run(fix(target.name, link=link), tmp_path)
    st = os.lstat(target)
    assert st.st_uid == 0 and (link or untrusted(st, ROOTS) is None)
