"""The config rules (parlschedd/daemon/rules.py): which processes a rule matches, on
real processes in real cgroups, through a real RuleMatcher over this host's /proc and
/sys/fs/cgroup, and what a real engine and a real daemon attach by them.

The rules in tests/daemon/test_daemon.py match by a command-line tag or by a cgroup
alone; these check a name matched by comm only, a rule with both a cgroup and a
name, and that a match detached by hand is left alone only until it exits, its pid
given to a new process by the kernel (ns_last_pid) where that matters."""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import re
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator

import pytest
import structlog

from parlschedd.config import TargetRule
from parlschedd.daemon import matching as matching_module
from parlschedd.daemon.matching import CMDLINE_MATCHED, CMDLINE_READ
from parlschedd.daemon.rules import RuleMatcher
from parlschedd.host import cgroups, procfs
from tests.daemon.test_engine import _engine, _pin_engine, _released
from tests.reliability.helpers import masks
from tests.conftest import (CGROUP_MOUNTS, NOBODY, PINNING, needs_root, own_cgroup, start_daemon, tagged_sleeper,
                            target_pids, threads_of, wait_for)

pytestmark = needs_root

# comm set from the environment, which is not in the command line: a name rule can find
# it only by comm
NAMED_BY_COMM = """
import os, time
with open("/proc/self/comm", "w") as comm:
    comm.write(os.environ["PARLSCHED_COMM"])
print("ready", flush=True)
time.sleep(60)
"""




def matcher() -> RuleMatcher:
    return RuleMatcher(procfs.PROC_ROOT, cgroups.CGROUP_ROOT)


def named_by_comm(comm: str) -> subprocess.Popen:
    """A process whose comm is ``comm`` and whose command line does not hold it."""
    proc = subprocess.Popen([sys.executable, "-c", NAMED_BY_COMM], stdout=subprocess.PIPE, text=True,
                            env={**os.environ, "PARLSCHED_COMM": comm})
    assert proc.stdout.readline() == "ready\n"
    return proc


@contextlib.contextmanager
def killed_at_end(*procs: subprocess.Popen) -> Iterator[None]:
    try:
        yield
    finally:
        for p in procs:
            p.kill()
            p.wait()
            if p.stdout:
                p.stdout.close()


def test_a_name_rule_matches_a_process_by_its_comm_alone(kill_after):
    """A rule's ``name`` is searched in the process's comm as well as in its command
    line: a program that names itself (prctl PR_SET_NAME, a write to
    /proc/self/comm) is matched by that name though its command line is only
    "python -c ...". A real engine attaches it by the rule, and a process with the
    same command line but another comm is not matched."""
    comm = f"psr-{uuid.uuid4().hex[:8]}"
    named = kill_after(named_by_comm(comm))
    other = kill_after(named_by_comm(f"psr-{uuid.uuid4().hex[:8]}"))
    assert procfs.comm(named.pid) == comm
    assert comm not in " ".join(procfs.cmdline(named.pid)), "the command line must not hold the name"
    rule = TargetRule(name=f"^{comm}$")
    assert matcher().matching(rule) == {named.pid}
    with _released(*_engine()) as engine:
        matcher().rescan(engine, (rule,), time.monotonic())
        assert set(engine.targets) == {named.pid} and engine.targets[named.pid].rule == 0
        assert other.pid not in engine.targets


def test_a_clients_pid_taken_by_another_process_is_matched_again(kill_after):
    """A client of the control socket is never matched (``clients``, pid -> start
    time), while it runs: its pid given since to another process (another start time;
    here the client's entry is made stale by hand) is a workload, attached by a rule
    that matches it."""
    comm = f"psr-{uuid.uuid4().hex[:8]}"
    named = kill_after(named_by_comm(comm))
    rules = matcher()
    with _released(*_engine()) as engine:
        rules.note_client(named.pid, engine)  # as the control socket does for each peer
        rules.rescan(engine, (TargetRule(name=f"^{comm}$"),), time.monotonic())
        assert engine.targets == {}, "a client, while it runs"
        rules.clients[named.pid] -= 1  # the client that had this pid has exited
        rules.rescan(engine, (TargetRule(name=f"^{comm}$"),), time.monotonic())
        assert set(engine.targets) == {named.pid} and named.pid not in rules.clients


def test_a_reload_that_leaves_no_rule_lets_go_of_what_the_rules_attached(kill_after):
    """A config reloaded without any rule: the targets the rules attached are detached
    (their masks given back), as when a rule stops matching."""
    comm = f"psr-{uuid.uuid4().hex[:8]}"
    named = kill_after(named_by_comm(comm))
    rules = matcher()
    with _released(*_engine()) as engine:
        rules.rescan(engine, (TargetRule(name=f"^{comm}$"),), time.monotonic())
        assert set(engine.targets) == {named.pid}
        rules.rescan(engine, (), time.monotonic())
        assert engine.targets == {}


def test_the_first_rule_that_matches_a_process_says_how_it_is_managed(kill_after):
    """Two rules match: the first one's settings (here observe) are the process's, and
    its index is the target's rule (no test saw the last one win)."""
    comm = f"psr-{uuid.uuid4().hex[:8]}"
    named = kill_after(named_by_comm(comm))
    rules = (TargetRule(name=f"^{comm}$", observe=True), TargetRule(name=f"^{comm}$", observe=False))
    with _released(*_engine()) as engine:
        matcher().rescan(engine, rules, time.monotonic())
        assert engine.targets[named.pid].rule == 0 and engine.targets[named.pid].observe


def test_a_reload_that_changes_a_rule_leaves_a_thread_handed_over_theirs(kill_after):
    """A reload that changes a rule's settings detaches its processes and attaches them
    again at once: a thread someone else had re-pinned stays theirs, not taken back
    (no test saw the hand-over forgotten there)."""
    comm = f"psr-{uuid.uuid4().hex[:8]}"
    named = kill_after(named_by_comm(comm))
    with _released(*_pin_engine()) as engine:
        matcher().rescan(engine, (TargetRule(name=f"^{comm}$"),), time.monotonic())
        engine.tick(time.monotonic())
        [pinned] = os.sched_getaffinity(named.pid)
        theirs = sorted(os.sched_getaffinity(0) - {pinned})[0]
        os.sched_setaffinity(named.pid, {theirs})
        engine.resync(time.monotonic())
        assert named.pid in engine.handed_over
        matcher().rescan(engine, (TargetRule(name=f"^{comm}$", threads=".*"),), time.monotonic())
        target = engine.targets[named.pid]
        assert target.thread_filter is not None, "attached again as the changed rule says"
        engine.tick(time.monotonic())
        assert named.pid in target.ignored and named.pid not in target.threads
        assert os.sched_getaffinity(named.pid) == {theirs}


def test_a_rule_that_matches_the_daemon_itself_does_not_attach_it():
    """The daemon would pin its own loop: only the attach by hand refused it in a test.
    (This process stands for the daemon, under a name of its own for the test.)"""
    comm, mine = f"psr-{uuid.uuid4().hex[:8]}", procfs.comm(os.getpid())
    with open("/proc/self/comm", "w") as f:
        f.write(comm)
    try:
        rule = TargetRule(name=f"^{comm}$", descendants=False)
        assert matcher().matching(rule) == {os.getpid()}
        with _released(*_engine()) as engine:
            matcher().rescan(engine, (rule,), time.monotonic())
            assert os.getpid() not in engine.targets
    finally:
        with open("/proc/self/comm", "w") as f:
            f.write(mine)


@pytest.mark.parametrize("mount, prefix", CGROUP_MOUNTS, ids=["v2", "v1 cpuset"])
def test_a_rule_with_a_cgroup_and_a_name_matches_only_the_named_in_the_cgroup(tmp_path, mount, prefix):
    """Both a cgroup and a name: a process must be in the cgroup (or below it) and have
    the name. Of three processes, the one in the cgroup with the name matches; one
    with the name outside the cgroup and one in the cgroup without the name do not;
    nor does anything when the cgroup does not exist. Checked on the matcher, and
    on a real daemon, which attaches that one process and no other over several
    rescans."""
    tag = f"parlsched-rule-{uuid.uuid4().hex[:8]}"
    with own_cgroup(mount) as group:
        inside, outside, unnamed = tagged_sleeper(tag), tagged_sleeper(tag), tagged_sleeper("not-the-tag")
        with killed_at_end(inside, outside, unnamed):
            for p in (inside, unnamed):
                (group / "cgroup.procs").write_text(str(p.pid))
            rule = TargetRule(name=tag, cgroup=f"{prefix}/{group.name}")
            assert matcher().matching(TargetRule(name=tag)) == {inside.pid, outside.pid}
            assert matcher().matching(TargetRule(cgroup=rule.cgroup)) == {inside.pid, unnamed.pid}
            assert matcher().matching(rule) == {inside.pid}
            assert matcher().matching(TargetRule(name=tag, cgroup=f"{prefix}/{group.name}-absent")) == set()

            (tmp_path / "parlschedd.yaml").write_text(
                f"period_s: 0.05\nrescan_s: 0.1\ntargets:\n  - cgroup: '{rule.cgroup}'\n    name: '{tag}'\n")
            d = start_daemon(tmp_path)
            try:
                wait_for(lambda: inside.pid in target_pids(d))
                witness = tagged_sleeper(tag)  # attached by a rescan after inside's: no other was by then
                with killed_at_end(witness):
                    (group / "cgroup.procs").write_text(str(witness.pid))
                    assert wait_for(lambda: witness.pid in target_pids(d))
                    assert target_pids(d) == {inside.pid, witness.pid}
            finally:
                d.stop()


def daemon_with_rule(tmp_path, tag: str):
    """A real daemon whose one rule matches ``tag`` by name, rescanning every 0.1 s."""
    (tmp_path / "parlschedd.yaml").write_text(f"period_s: 0.05\nrescan_s: 0.1\ntargets:\n  - name: '{tag}'\n")
    return start_daemon(tmp_path)


def assert_left_alone(d, tag: str, pid: int) -> None:
    """``pid``, which the daemon's rule matches by ``tag``, is not attached by the rescans
    that go on: a new process the rule matches (the witness) is."""
    witness = tagged_sleeper(tag)
    with killed_at_end(witness):
        assert wait_for(lambda: witness.pid in target_pids(d))
        assert pid not in target_pids(d), "left alone while it lives"


def test_a_match_detached_by_hand_is_attached_again_once_it_exits(tmp_path):
    """detach of a process a rule matches holds only while that process lives: once it
    has exited (and rescans saw it gone), a new process the rule matches is attached,
    though the kernel gave it the same pid. A record kept after the exit would leave
    alone every later process given that pid while the daemon runs; a new process with
    another pid could not show it, the record being of the pid."""
    tag = f"parlsched-exit-{uuid.uuid4().hex[:8]}"
    first = tagged_sleeper(tag)
    d = daemon_with_rule(tmp_path, tag)
    try:
        with killed_at_end(first):
            wait_for(lambda: first.pid in target_pids(d))
            said = subprocess.run([sys.executable, "-m", "parlschedctl", "detach", str(first.pid)], capture_output=True,
                                  text=True, env={**os.environ, "PARLSCHED_SOCKET": d.socket}, timeout=30)
            assert said.returncode == 0 and said.stdout.splitlines()[-1] == (  # the user is told, not only the log
                "config rule 0 matches it: left alone until it exits (attach it to manage it again)"), said
            assert_left_alone(d, tag, first.pid)
        witness = tagged_sleeper(tag)  # attached by a rescan after the exit, which saw it gone
        with killed_at_end(witness):
            assert wait_for(lambda: witness.pid in target_pids(d))
        again = tagged_sleeper(tag, pid=first.pid)
        with killed_at_end(again):
            wait_for(lambda: again.pid in target_pids(d))
    finally:
        d.stop()


def test_a_match_attached_by_hand_is_left_alone_once_detached_as_the_rules_own(tmp_path):
    """A process a rule matches, detached, attached again by hand (rule null), then
    detached: the reply said no rule applied, and the rule attached it back at the
    next rescan; it cannot be let go but by changing the rule."""
    tag = f"parlsched-hand-{uuid.uuid4().hex[:8]}"
    matched = tagged_sleeper(tag)
    d = daemon_with_rule(tmp_path, tag)
    try:
        with killed_at_end(matched):
            wait_for(lambda: matched.pid in target_pids(d))
            assert d.request("detach", pid=matched.pid)["rule"] == 0
            assert d.request("attach", pid=matched.pid)["target"]["rule"] is None  # by hand
            assert d.request("detach", pid=matched.pid)["rule"] == 0, "the rule that now leaves it alone"
            assert_left_alone(d, tag, matched.pid)
    finally:
        d.stop()


def detach_by_hand(engine, pid: int) -> None:
    """As the daemon's detach of a rule's match: restored, and left alone while it lives."""
    engine.detach(pid)
    engine.left_alone[pid] = procfs.process_start_time(pid)


def test_a_match_left_alone_whose_pid_comes_back_as_another_process_is_attached(kill_after):
    """The pid of a process detached by hand may be another process's by the next
    rescan (it exited, and the kernel gave its pid to a new one, between two rescans):
    the new process, told apart by its start time, is attached, while the one detached
    is left alone as long as it runs (even through a reload whose rules stop matching
    it for a while: it was forgotten then, and attached when matched again). On a real RuleMatcher and a real engine, rescanned
    by hand, so that no rescan falls between the exit and the new process."""
    tag = f"parlsched-reuse-{uuid.uuid4().hex[:8]}"
    rule = TargetRule(name=tag)
    first = kill_after(tagged_sleeper(tag))
    rules = matcher()
    with _released(*_engine()) as engine:
        rules.rescan(engine, (rule,), time.monotonic())
        assert set(engine.targets) == {first.pid}
        detach_by_hand(engine, first.pid)
        rules.rescan(engine, (rule,), time.monotonic())
        assert engine.targets == {}, "the process detached by hand is left alone"
        rules.rescan(engine, (TargetRule(name=f"{tag}-another"),), time.monotonic())  # a reload: it matches no rule
        rules.rescan(engine, (rule,), time.monotonic())  # and the rule back: still the process detached by hand
        assert engine.targets == {}, "left alone until it exits, not until it stops matching"
        time.sleep(0.05)  # a start time in clock ticks: the new process's is a later one
        first.kill()
        first.wait()
        again = kill_after(tagged_sleeper(tag, pid=first.pid))
        rules.rescan(engine, (rule,), time.monotonic())
        assert set(engine.targets) == {again.pid} == {first.pid}


def test_a_jobs_children_that_the_rule_matches_go_with_the_job(kill_after):
    """A rule matching a job (a shell) and each of its children: the children are the
    job's descendants, not targets of their own, and a detach by hand of the job lets
    them go with it while it lives. They were attached back one by one within rescan_s
    of the detach, pinned again, though the detach said the rule left the job alone. On
    a real RuleMatcher and a real engine, rescanned by hand."""
    tag = f"parlsched-job-{uuid.uuid4().hex[:8]}"
    child = f"{sys.executable} -c 'import time; time.sleep(60)' {tag}"
    job = kill_after(subprocess.Popen(["sh", "-c", f"{child} & {child} & wait", tag]))
    children = wait_for(lambda: (kids := procfs.descendants(job.pid)) and len(kids) == 2
                        and all(tag.encode() in open(f"/proc/{k}/cmdline", "rb").read() for k in kids) and kids)
    rule, rules = TargetRule(name=tag), matcher()
    assert rules.matching(rule) == {job.pid, *children}
    try:
        with _released(*_engine()) as engine:
            rules.rescan(engine, (rule,), time.monotonic())
            assert set(engine.targets) == {job.pid}
            detach_by_hand(engine, job.pid)
            rules.rescan(engine, (rule,), time.monotonic())
            assert engine.targets == {}, "the job's children are let go with it"
            engine.left_alone.clear()  # the record gone: the rule matches the job and its children again
            rules.rescan(engine, (rule,), time.monotonic())
            assert set(engine.targets) == {job.pid}, "the job, its children in it"
    finally:
        for pid in children:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, 9)


# A process that forks a child (as root, the child execs a tagged sleep) and then drops
# to NOBODY itself: a user's process with a root-owned child, as su or a root service
# leaves them.
USER_WITH_ROOT_CHILD = """
import os, sys, time
if os.fork() == 0:
    os.execv(sys.executable, [sys.executable, "-c", "import time; time.sleep(60)", sys.argv[1]])
os.setresuid({nobody}, {nobody}, {nobody})
print("ready", flush=True)
time.sleep(60)
"""


def test_a_users_descendants_target_does_not_keep_a_root_rule_from_its_root_child(kill_after):
    """A non-root user's target with descendants holds only that user's processes (its
    listing leaves others' out), so it must not count as the ancestor that claims a
    root-owned child a rule matches: the rule attaches the child. Were it counted, a
    user could keep root's rules off any root process below one of theirs. On a real
    RuleMatcher and a real engine, rescanned by hand."""
    tag = f"parlsched-under-user-{uuid.uuid4().hex[:8]}"
    parent = kill_after(subprocess.Popen([sys.executable, "-c", USER_WITH_ROOT_CHILD.format(nobody=NOBODY), tag],
                                         stdout=subprocess.PIPE, text=True))
    assert parent.stdout.readline() == "ready\n"
    child = wait_for(lambda: procfs.descendants(parent.pid))[0]
    wait_for(lambda: tag.encode() in open(f"/proc/{child}/cmdline", "rb").read())
    assert os.stat(f"/proc/{parent.pid}").st_uid == NOBODY and os.stat(f"/proc/{child}").st_uid == 0
    try:
        with _released(*_engine()) as engine:
            engine.attach(parent.pid, time.monotonic(), descendants=True, uid=NOBODY)
            matcher().rescan(engine, (TargetRule(name=tag),), time.monotonic())
            assert set(engine.targets) == {parent.pid, child}, "the root rule's match below the user's target"
            assert engine.targets[child].rule == 0
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(child, 9)
        parent.stdout.close()


def test_a_name_rule_looks_at_the_first_4096_characters_of_a_command_line(kill_after):
    """A name rule's regex runs over the command line's first CMDLINE_MATCHED characters
    only (a command line may be megabytes long, searched every rescan_s): a tag past
    them does not match, the same tag before them does."""
    tag = f"parlsched-long-{uuid.uuid4().hex[:8]}"
    padding = "x" * CMDLINE_MATCHED
    late = kill_after(tagged_sleeper(f"{padding} {tag}"))
    early = kill_after(tagged_sleeper(f"{tag} {padding}"))
    assert matcher().matching(TargetRule(name=tag)) == {early.pid}
    assert tag.encode() in open(f"/proc/{late.pid}/cmdline", "rb").read()


MAIN_THREAD_ENDS = """
import ctypes, sys, threading, time
threading.Thread(target=time.sleep, args=(60,)).start()
print("ready", flush=True)
sys.stdin.readline()
ctypes.CDLL(None).pthread_exit(None)  # the main thread alone: the other runs on
"""


def test_a_name_rule_keeps_a_process_whose_main_thread_ended(kill_after):
    """A process whose main thread ends with pthread_exit(3) while another runs on:
    /proc/PID/cmdline reads empty from then on (the main thread let its memory go),
    so a rule that matched its command line stopped matching and the daemon let it
    go at the next rescan (a review). Read through the thread that runs on, it
    matches still: for a target alone (a stat more for each kernel thread else),
    so such a process the rules had not attached before is matched by its comm only."""
    tag = f"parlsched-main-ends-{uuid.uuid4().hex[:8]}"
    proc = kill_after(subprocess.Popen([sys.executable, "-c", MAIN_THREAD_ENDS, tag], stdin=subprocess.PIPE,
                                       stdout=subprocess.PIPE, text=True))
    assert proc.stdout.readline() == "ready\n"
    rule = TargetRule(name=tag)
    with _released(*_engine()) as engine:
        matcher().rescan(engine, (rule,), time.monotonic())
        assert set(engine.targets) == {proc.pid}
        proc.stdin.write("end\n")
        proc.stdin.flush()
        wait_for(lambda: procfs.thread_stat(proc.pid).state == "Z")
        assert open(f"/proc/{proc.pid}/cmdline", "rb").read() == b""
        assert procfs.cmdline(proc.pid, any_thread=True)[-1] == tag and procfs.cmdline(proc.pid) == []
        matcher().rescan(engine, (rule,), time.monotonic())
        assert set(engine.targets) == {proc.pid}, "let go when its main thread ended"
        assert matcher().first_matching((rule,), proc.pid) == 0, "a detach's question"
        assert matcher().matching(rule) == set(), "not a target"


def test_a_name_rule_reads_a_command_line_no_further_than_it_looks(kill_after, monkeypatch):
    """Command lines were read whole at each rescan, then cut: 20 of a user's idle
    processes with 6 MB of arguments each held the daemon's loop for seconds (review).
    No more is read than the characters a rule looks at can take."""
    tag = f"parlsched-long-{uuid.uuid4().hex[:8]}"
    long = kill_after(subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", tag,
                                        *["x" * 100_000] * 10]))  # 1 MB (128 KiB an argument at most)
    wait_for(lambda: tag in procfs.cmdline(long.pid), timeout=10)
    limits = []
    real = procfs.cmdline
    monkeypatch.setattr(procfs, "cmdline", lambda pid, root, limit=None, any_thread=False:
                        limits.append(limit) or real(pid, root, limit, any_thread))
    rule = TargetRule(name=f"{tag} x+$")  # $: the end of what is read
    assert matcher().matching(rule) == {long.pid}
    with _released(*_engine()) as engine:  # the rescan asks too whether it is a client of the socket
        matcher().rescan(engine, (rule,), time.monotonic())
        assert set(engine.targets) == {long.pid}
    assert len(limits) >= 3 and set(limits) == {CMDLINE_READ} and CMDLINE_READ >= 4 * CMDLINE_MATCHED


def test_a_detachs_question_reads_the_names_of_that_process_alone(kill_after, monkeypatch):
    """Which rule matches a process detached by hand was found by listing every
    process's names for each rule."""
    comm = f"psr-{uuid.uuid4().hex[:8]}"
    named = kill_after(named_by_comm(comm))
    monkeypatch.setattr(matching_module, "_all_pids", lambda root: pytest.fail("every process listed"))
    rules = (TargetRule(name="^parlsched-no-such-name$"), TargetRule(name=f"^{comm}$"))
    assert matcher().first_matching(rules, named.pid) == 1
    assert matcher().first_matching(rules[:1], named.pid) is None


def test_a_rule_without_descendants_keeps_the_children_of_a_job_detached_by_hand(kill_after):
    """A rule with descendants: false manages each process apart (a pre-fork server's
    master and workers): a detach by hand of the master let its workers go too."""
    tag = f"parlsched-prefork-{uuid.uuid4().hex[:8]}"
    child = f"{sys.executable} -c 'import time; time.sleep(60)' {tag}"
    job = kill_after(subprocess.Popen(["sh", "-c", f"{child} & {child} & wait", tag]))
    children = wait_for(lambda: (kids := procfs.descendants(job.pid)) and len(kids) == 2
                        and all(tag.encode() in open(f"/proc/{k}/cmdline", "rb").read() for k in kids) and kids)
    rule, rules = TargetRule(name=tag, descendants=False), matcher()
    try:
        with _released(*_engine()) as engine:
            rules.rescan(engine, (rule,), time.monotonic())
            assert set(engine.targets) == {job.pid, *children}
            detach_by_hand(engine, job.pid)
            rules.rescan(engine, (rule,), time.monotonic())
            assert set(engine.targets) == set(children)
    finally:
        for pid in children:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, 9)


def test_a_child_matched_before_its_job_goes_to_the_job_once_the_job_is_matched(kill_after):
    """A child that a rule matched (a target of its own) before its parent was matched
    (moved into the rule's cgroup later, or a reload) stayed a target of its own beside
    the parent's target with descendants, and stayed pinned after a hand detach of the
    parent. The rescan after the parent's attach hands it to the parent; a hand detach
    of the parent lets it go too. Real RuleMatcher and engine, rescanned by hand."""
    tag, child_tag = (f"parlsched-{what}-{uuid.uuid4().hex[:8]}" for what in ("job", "child"))
    child = f"{sys.executable} -c 'import time; time.sleep(60)' {tag} \"$CHILD_TAG\""  # the job's own line lacks it
    job = kill_after(subprocess.Popen(["sh", "-c", f"{child} & wait", tag], env={**os.environ, "CHILD_TAG": child_tag}))
    [kid] = wait_for(lambda: (kids := procfs.descendants(job.pid)) and len(kids) == 1
                     and child_tag.encode() in open(f"/proc/{kids[0]}/cmdline", "rb").read() and kids)
    rules = matcher()
    try:
        with _released(*_engine()) as engine:
            rules.rescan(engine, (TargetRule(name=child_tag),), time.monotonic())
            assert set(engine.targets) == {kid}
            both = (TargetRule(name=tag),)  # a reload: the rule now matches the job and the child
            rules.rescan(engine, both, time.monotonic())
            assert set(engine.targets) == {job.pid, kid}
            rules.rescan(engine, both, time.monotonic())
            assert set(engine.targets) == {job.pid}, "the child is the job's descendant now"
            engine.detach(job.pid)
            rules.rescan(engine, (TargetRule(name=child_tag),), time.monotonic())  # the child a target again
            assert set(engine.targets) == {kid}
            engine.left_alone[job.pid] = procfs.process_start_time(job.pid)  # the job detached by hand
            rules.rescan(engine, both, time.monotonic())
            assert engine.targets == {}, "let go with the job"
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(kid, 9)


@needs_root
def test_a_match_detached_by_hand_inside_a_rules_tree_is_not_taken_back_by_the_tree(kill_after):
    """A job's child attached by hand, then its job attached by a rule with descendants
    (the child stays the hand's target), then the child detached by hand: the reply
    said the rule left it alone until it exited, and the job's tree adopted and pinned
    it within a period, an attach of it then refused as the tree's (a review). The tree
    leaves it alone, and what runs below it (a grandchild), while it lives. Real
    RuleMatcher and pinning engine, rescanned and ticked by hand."""
    tag = f"parlsched-tree-{uuid.uuid4().hex[:8]}"
    child = f"{sys.executable} -c 'import os, time; os.fork(); time.sleep(60)' {tag}"  # and a grandchild
    job = kill_after(subprocess.Popen(["sh", "-c", f"{child} & wait", tag]))
    below = wait_for(lambda: (kids := procfs.descendants(job.pid)) and len(kids) == 2 and kids)
    kid = min(below, key=lambda p: procfs.process_start_time(p))  # the child; the grandchild forked from it
    try:
        with _released(*_pin_engine()) as engine:
            engine.attach(kid, time.monotonic())
            rules = matcher()
            rules.rescan(engine, (TargetRule(name=tag),), time.monotonic())
            assert set(engine.targets) == {job.pid, kid}
            original = masks(below)
            detach_by_hand(engine, kid)
            for _ in range(10):
                engine.tick(time.monotonic())
                engine.resync(time.monotonic())
                rules.rescan(engine, (TargetRule(name=tag),), time.monotonic())
                time.sleep(0.02)
            assert set(engine.targets) == {job.pid}
            assert not set(engine.targets[job.pid].threads) & set(below), "taken back by the job's tree"
            assert masks(below) == original
    finally:
        for pid in below:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, 9)


# A process a rule can name (its command line holds the tag) that runs the rest of its
# command line as a child, with a child of its own beside it; SIGTERM is passed on.
UNDER = """
import signal, subprocess, sys
other = subprocess.Popen(["sleep", "120"])
child = subprocess.Popen(sys.argv[2:])
signal.signal(signal.SIGTERM, lambda *_: child.terminate())
code = child.wait()
other.kill()
sys.exit(code)
"""


def test_the_daemon_never_manages_a_tree_it_runs_in(tmp_path):
    """A rule with descendants that matched a process the daemon ran under attached it
    and the daemon's own threads with it, pinning its loop; one that matched PID 1 (a
    word found only in its command line) took in every process on the host (review).
    Such a match is left alone while it lives, said once in the log naming the rule;
    attached by hand with --descendants, its tree is managed without the daemon. The
    tagged process is the daemon's grandparent (a first fix looked at the parent alone)."""
    tag = f"psr-under-{uuid.uuid4().hex[:8]}"
    d = start_daemon(tmp_path, f"period_s: 0.05\nrescan_s: 0.05\ntargets:\n  - name: '{tag}'\n" + PINNING,
                     prefix=[sys.executable, "-c", UNDER, tag, sys.executable, "-c", UNDER, "untagged"])
    try:
        parent, daemon = d.proc.pid, d.request("status")["daemon"]["pid"]
        assert procfs.process_stat(procfs.process_stat(daemon).ppid).ppid == parent
        said = wait_for(lambda: [r for r in d.log_records() if "parlschedd runs under" in r["event"]])
        time.sleep(0.3)  # rescans after the first
        assert d.request("status")["targets"] == []
        assert [(r["pid"], r["rule"]) for r in d.log_records() if "parlschedd runs under" in r["event"]] == \
            [(parent, "targets[0]")] and "narrow targets[0]" in said[0]["event"]
        everything = os.sched_getaffinity(daemon)
        d.request("attach", pid=parent, descendants=True)
        managed = wait_for(lambda: (t := threads_of(d, parent)) and len(t) >= 4 and t)
        assert set(managed).isdisjoint(procfs.list_tids(daemon))  # the others' of the tree
        time.sleep(0.3)  # periods that would have pinned the daemon's threads
        assert all(os.sched_getaffinity(tid) == everything for tid in procfs.list_tids(daemon))
    finally:
        assert d.stop() == 0


def test_pid_1_is_never_attached_by_a_rule_with_descendants_and_said_again_for_another_rule():
    """PID 1 is the ancestor of every process, also of a daemon whose parent is none
    (ppid 0: entered into a PID namespace by nsenter), which a first fix missed. Said
    once while a rule matches it, again when another rule does (a reload moved it), or
    when it matched none in between. (This process stands for the daemon.)"""
    init = TargetRule(name=f"^{re.escape(procfs.comm(1))}$")
    other = TargetRule(name="^parlsched-no-such-name$")
    rules = matcher()
    with _released(*_engine()) as engine, structlog.testing.capture_logs() as logs:
        for config in ((init,), (init,), (other, init), (other, init), (other,), (other, init)):
            rules.rescan(engine, config, time.monotonic())
        assert 1 not in engine.targets
    said = [(e["pid"], e["rule"]) for e in logs if "parlschedd runs under" in e["event"]]
    assert said == [(1, "targets[0]"), (1, "targets[1]"), (1, "targets[1]")]
    assert "and every process on the host" in next(e["event"] for e in logs if "runs under" in e["event"])


def test_a_rule_never_matches_a_client_of_the_control_socket(tmp_path):
    """`parlschedctl run`'s command line holds its CMD's, so a name rule meant for CMD
    matched the client too, and the daemon pinned its own client for the run; and a
    rescan while the client still imported (before its first request) caught it for
    a tenth of a second. Neither a parlschedctl process nor a process that has talked
    to the control socket is matched while it lives: never attached, as the log says."""
    seconds = f"1.5{uuid.uuid4().int % 10**6:06d}"  # run's CMD; the rule names the client's line only
    (tmp_path / "parlschedd.yaml").write_text(f"period_s: 0.05\nrescan_s: 0.02\ntargets:\n"
                                              f"  - name: 'run -- sleep {seconds}'\n  - name: '{seconds}-ruled'\n")
    ruled = tagged_sleeper(f"{seconds}-ruled")
    d = start_daemon(tmp_path)
    try:
        with killed_at_end(ruled):
            wait_for(lambda: ruled.pid in {t["pid"] for t in d.request("status")["targets"]})  # the rules work
            for _ in range(3):
                client = subprocess.Popen([sys.executable, "-m", "parlschedctl", "run", "--", "sleep", seconds],
                                          env={**os.environ, "PARLSCHED_SOCKET": d.socket}, stdout=subprocess.DEVNULL)
                assert client.wait(timeout=30) == 0
                attached = [r["pid"] for r in d.log_records() if r["event"] == "attached"]
                assert client.pid not in attached and len(attached) >= 2, attached  # the rule's, and run's CMD
    finally:
        d.stop()


def test_a_rule_leaves_the_command_parlschedctl_runs_to_it(tmp_path, kill_after):
    """`parlschedctl run -- CMD` with a rule that matches CMD: a rescan between CMD's
    exec and run's attach took CMD as the rule's, 1 run in 15 to 40 (a review), and
    run said "not managed: process N is already attached" while the rule pinned it (a
    `run --observe` too). A process whose parent is a parlschedctl process is left to
    it while it lives; once it is gone, the rule matches the process. Not a child of
    any client of the socket (a job launcher that asks for status): only parlschedctl's.
    Real RuleMatcher and engine; run is a script named parlschedctl that starts CMD
    and waits (run itself attaches CMD to a daemon, which this test has not)."""
    tag = f"parlsched-runs-{uuid.uuid4().hex[:8]}"
    starts = ("import subprocess, sys; "
              f"subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)', '{tag}']); sys.stdin.read()")
    (tmp_path / "parlschedctl").write_text(starts + "\n")

    def child_of(parent: subprocess.Popen) -> int:
        [kid] = wait_for(lambda: (kids := procfs.descendants(parent.pid))
                         and tag.encode() in open(f"/proc/{kids[0]}/cmdline", "rb").read() and kids)
        return kid

    run = kill_after(subprocess.Popen([sys.executable, str(tmp_path / "parlschedctl")], stdin=subprocess.PIPE))
    launcher = kill_after(subprocess.Popen([sys.executable, "-c", starts], stdin=subprocess.PIPE))
    cmd, job = child_of(run), child_of(launcher)
    rules, rule = matcher(), (TargetRule(name=tag),)
    try:
        with _released(*_engine()) as engine:
            rules.note_client(launcher.pid, engine)  # it talked to the socket
            rules.rescan(engine, rule, time.monotonic())
            assert set(engine.targets) == {job}, "run's CMD is run's to attach; the launcher's job is the rule's"
            run.kill()
            run.wait()
            rules.rescan(engine, rule, time.monotonic())
            assert set(engine.targets) == {job, cmd}
    finally:
        for pid in (cmd, job):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, 9)


def test_a_reload_says_which_rules_cgroup_is_not_there(tmp_path):
    """A rule added by a reload whose cgroup does not exist (a typo in the path, the
    hierarchy misnamed) matches nothing. The start says so in its log, config check
    as a warning; a reload said only "reloaded", and logged nothing: the admin who
    added the rule and reloaded had no word of it. The reload logs it as the start
    does, and `parlschedctl reload` prints it on stderr (--json: ``warnings``)."""
    absent = f"/parlsched-absent-{uuid.uuid4().hex[:8]}"
    d = start_daemon(tmp_path, "period_s: 0.05\nrescan_s: 0.1\n")
    try:
        d.config.write_text(f"period_s: 0.05\nrescan_s: 0.1\ntargets:\n  - name: '^nothing-named-so$'\n"
                            f"  - cgroup: '{absent}'\n  - cgroup: 'cpusets:{absent}'\n")
        ctl = [sys.executable, "-m", "parlschedctl", "--socket", d.socket, "reload"]
        said = subprocess.run(ctl, capture_output=True, text=True, timeout=30)
        assert said.returncode == 0 and said.stdout == "reloaded\n", said
        assert [line.split(": ", 2)[:2] for line in said.stderr.splitlines()] == [
            ["parlschedctl", "warning"]] * 2, said.stderr
        assert "targets[1].cgroup: no cgroup " in said.stderr and absent in said.stderr
        assert "targets[2].cgroup: no cgroup hierarchy for cpusets" in said.stderr
        warned = [r for r in d.log_records() if r["event"] == "config not all usable on this host"]
        assert [r["key"] for r in warned] == ["targets[1].cgroup", "targets[2].cgroup"]
        reply = json.loads(subprocess.run([*ctl, "--json"], capture_output=True, text=True, timeout=30).stdout)
        assert [w.split(":")[0] for w in reply["warnings"]] == ["targets[1].cgroup", "targets[2].cgroup"]
    finally:
        d.stop()


def test_a_cgroup_rule_keeps_its_processes_when_a_threaded_cgroup_is_below(tmp_path):
    """cgroup v2 lets a job put its threads in threaded child cgroups (cgroup.type
    "threaded", for the cpu controller per thread); reading such a cgroup's
    cgroup.procs fails with EOPNOTSUPP, its processes being listed in the domain
    above. That one failure made the whole rule match nothing: the job's processes,
    attached by the rule, were detached ("no config rule matches it any more") as soon
    as the job made a threaded cgroup, and none of the job's was attached while it
    existed. The threaded cgroup is skipped; the processes are matched where they
    are listed."""
    tag = f"parlsched-threaded-{uuid.uuid4().hex[:8]}"
    with own_cgroup(CGROUP_MOUNTS[0][0]) as group:
        job = tagged_sleeper(tag)
        threaded = group / "threads"
        try:
            with killed_at_end(job):
                (group / "cgroup.procs").write_text(str(job.pid))
                rule = TargetRule(cgroup=f"/{group.name}")
                (tmp_path / "parlschedd.yaml").write_text(
                    f"period_s: 0.05\nrescan_s: 0.1\ntargets:\n  - cgroup: '{rule.cgroup}'\n")
                d = start_daemon(tmp_path)
                try:
                    wait_for(lambda: job.pid in target_pids(d))
                    threaded.mkdir()
                    (threaded / "cgroup.type").write_text("threaded")
                    assert matcher().matching(rule) == {job.pid}
                    witness = tagged_sleeper(tag)  # attached by a rescan after the threaded cgroup was made
                    with killed_at_end(witness):
                        (group / "cgroup.procs").write_text(str(witness.pid))
                        assert wait_for(lambda: witness.pid in target_pids(d))
                        assert target_pids(d) == {job.pid, witness.pid}
                    assert not [r for r in d.log_records() if r["event"] == "detached"]
                finally:
                    d.stop()
        finally:
            if threaded.exists():
                threaded.rmdir()


def test_the_log_says_which_rule_attached_a_process(tmp_path):
    """The "attached" log line of a process a config rule matched said only its pid,
    name and mode, as for an attach by hand: an administrator who found a process
    pinned that no one attached could not tell which rule (a regex broader than
    meant) had taken it. It names the rule, as the detach-by-hand line does; an
    attach by hand names none."""
    tag = f"parlsched-which-{uuid.uuid4().hex[:8]}"
    (tmp_path / "parlschedd.yaml").write_text(
        f"period_s: 0.05\nrescan_s: 0.1\ntargets:\n  - name: '^nothing-named-so$'\n  - name: '{tag}'\n")
    ruled, by_hand = tagged_sleeper(tag), tagged_sleeper("not-the-tag")
    with killed_at_end(ruled, by_hand):
        d = start_daemon(tmp_path)
        try:
            wait_for(lambda: ruled.pid in {t["pid"] for t in d.request("status")["targets"]})
            d.request("attach", pid=by_hand.pid)
            attached = {r["pid"]: r for r in d.log_records() if r["event"] == "attached"}
            assert attached[ruled.pid]["rule"] == "targets[1]"
            assert "rule" not in attached[by_hand.pid]
        finally:
            d.stop()


def test_a_cgroup_rule_matches_on_while_cgroups_below_it_come_and_go():
    """A cgroup removed between the walk's listing and the read of its cgroup.procs
    reads ENODEV (not ENOENT) when it goes after the file was opened: the whole rule
    matched nothing for that rescan, and every process it had attached was detached
    ("no config rule matches it any more"), its masks restored and its learning lost,
    and attached afresh at the next one; a rule on a slice whose units come and go
    (job steps, scopes) did that now and then, for nothing. A cgroup that goes
    mid-walk is skipped, as one already gone is."""
    tag = f"parlsched-churn-{uuid.uuid4().hex[:8]}"
    with own_cgroup(CGROUP_MOUNTS[0][0]) as group:
        job = tagged_sleeper(tag)
        stop = threading.Event()

        def churn() -> None:
            for i in itertools.count():
                if stop.is_set():
                    return
                step = group / f"step{i % 50}"
                with contextlib.suppress(OSError):
                    step.mkdir()
                with contextlib.suppress(OSError):
                    step.rmdir()

        churner = threading.Thread(target=churn)
        with killed_at_end(job):
            (group / "cgroup.procs").write_text(str(job.pid))
            rule, rules = TargetRule(cgroup=f"/{group.name}"), matcher()
            churner.start()
            try:
                deadline, walks = time.monotonic() + 8, 0
                while time.monotonic() < deadline:
                    assert rules.matching(rule) == {job.pid}, f"matched nothing at walk {walks}"
                    walks += 1
            finally:
                stop.set()
                churner.join()
        for step in group.glob("step*"):
            step.rmdir()
