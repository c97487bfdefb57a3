"""The e2e probe, run by parlsched-e2e-probe.service inside the booted container.

It does what a user and an administrator do: `make install` (twice: idempotent),
`systemctl enable --now parlschedd`, attach a multi-threaded workload owned by another
user, reload, crash, stop, read the journal, `make uninstall`. It records raw facts in
/e2e/result.json and asserts nothing: tests/e2e/test_systemd.py on the host judges them.
A failing step is recorded under "errors" and the probe goes on with the next one.
System python3, standard library only.
"""

from __future__ import annotations

import json
import os
import platform
import re
import subprocess
import time
import traceback
import urllib.request
from contextlib import contextmanager
from pathlib import Path

IO = Path("/e2e")
SRC = "/usr/src/parlsched"
UNIT = "parlschedd.service"
UNIT_PATH = "/usr/local/lib/systemd/system/parlschedd.service"
CONFIG = Path("/etc/parlsched/parlschedd.yaml")
SOCKET = "/run/parlsched/parlschedd.sock"
CTL = "/usr/local/bin/parlschedctl"
USER = "pswork"  # owns the workload; member of group parlsched
AS_USER = ["setpriv", f"--reuid={USER}", f"--regid={USER}", "--init-groups", "--reset-env"]
WORKLOAD_THREADS = 4

result: dict = {"steps": {}, "errors": {}, "started": time.time()}


def out(msg: str) -> None:
    print(f"[probe {time.time() - result['started']:6.1f}s] {msg}", flush=True)


def run(cmd: list[str], timeout: float = 60, keep: int = 6000, **kw) -> dict:
    """``cmd``'s exit code and the last ``keep`` characters of its stdout and stderr."""
    t0 = time.monotonic()
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, **kw)
        rec = {"rc": p.returncode, "stdout": p.stdout[-keep:], "stderr": p.stderr[-keep:]}
    except subprocess.TimeoutExpired as exc:
        rec = {"rc": None, "stdout": str(exc.stdout or "")[-3000:], "stderr": f"timeout after {timeout}s"}
    rec["seconds"] = round(time.monotonic() - t0, 2)
    out(f"{' '.join(cmd)} -> {rec['rc']} ({rec['seconds']}s)")
    return rec


@contextmanager
def step(name: str):
    out(f"== {name}")
    rec: dict = {}
    result["steps"][name] = rec
    try:
        yield rec
    except Exception:
        result["errors"][name] = traceback.format_exc()
        out(f"!! {name} failed:\n{result['errors'][name]}")
    finally:
        save()


def save() -> None:
    tmp = IO / "result.json.tmp"
    tmp.write_text(json.dumps(result, indent=1, default=str))
    tmp.replace(IO / "result.json")


def show(*props: str) -> dict:
    p = subprocess.run(["systemctl", "show", UNIT, *[f"--property={x}" for x in props]],
                       capture_output=True, text=True, timeout=30)
    return dict(line.split("=", 1) for line in p.stdout.splitlines() if "=" in line)


def main_pid() -> int:
    return int(show("MainPID")["MainPID"])


def is_active() -> str:
    return subprocess.run(["systemctl", "is-active", UNIT], capture_output=True, text=True).stdout.strip()


def cpus_allowed(tid: int) -> str:
    for line in Path(f"/proc/{tid}/status").read_text().splitlines():
        if line.startswith("Cpus_allowed_list:"):
            return line.split(":", 1)[1].strip()
    raise ValueError(f"no Cpus_allowed_list for {tid}")


def threads(pid: int) -> list[int]:
    return sorted(int(t) for t in os.listdir(f"/proc/{pid}/task"))


def masks(pid: int) -> dict[str, str]:
    return {str(t): cpus_allowed(t) for t in threads(pid)}


def status_json(as_user: bool = False) -> dict:
    p = subprocess.run((AS_USER if as_user else []) + [CTL, "status", "--json"],
                       capture_output=True, text=True, timeout=30)
    if p.returncode != 0:
        raise RuntimeError(f"status --json rc {p.returncode}: {p.stderr.strip()}")
    return json.loads(p.stdout)


def target_of(status: dict, pid: int) -> dict | None:
    return next((t for t in status.get("targets", []) if t.get("pid") == pid), None)


def wait_for(pred, timeout: float, interval: float = 0.2):
    deadline = time.monotonic() + timeout
    while True:
        value = pred()
        if value or time.monotonic() > deadline:
            return value
        time.sleep(interval)


def all_pinned(pid: int):
    """The target's status when every thread the daemon lists is pinned, else None."""
    try:
        t = target_of(status_json(), pid)
    except (RuntimeError, ValueError, subprocess.TimeoutExpired):
        return None
    if t and t["threads"] and all(th.get("pinned") for th in t["threads"]):
        return t
    return None


def journal_events(since_cursor: str | None = None) -> dict:
    cmd = ["journalctl", "-u", UNIT, "-o", "json", "--no-pager"]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    events, other = [], []
    for line in p.stdout.splitlines():
        entry = json.loads(line)
        msg = entry.get("MESSAGE")
        if isinstance(msg, list):  # journald gives non-UTF-8 messages as byte arrays
            msg = bytes(msg).decode(errors="replace")
        if entry.get("_PID") == "1" or entry.get("_COMM") == "systemd" or msg is None:
            continue  # systemd's own lines about the unit
        try:
            obj = json.loads(msg)
        except ValueError:
            other.append(msg)
            continue
        if isinstance(obj, dict):
            obj["_journal"] = {k: entry.get(k) for k in ("_PID", "SYSLOG_IDENTIFIER", "PRIORITY", "_TRANSPORT")}
            events.append(obj)
        else:
            other.append(msg)
    return {"events": events, "non_json": other}


DROPIN = Path("/run/systemd/system/parlschedd.service.d/e2e.conf")


def drop_in(text: str | None) -> None:
    """A runtime drop-in (as `systemctl edit --runtime` makes), or none."""
    if text is None:
        DROPIN.unlink(missing_ok=True)
    else:
        DROPIN.parent.mkdir(parents=True, exist_ok=True)
        DROPIN.write_text("[Service]\n" + text + "\n")
    run(["systemctl", "daemon-reload"])
    run(["systemctl", "reset-failed", UNIT])  # also resets the start rate limit


def scrape(url: str) -> dict:
    try:
        with urllib.request.urlopen(url, timeout=3) as response:
            return {"ok": True, "text": response.read().decode()[-2000:]}
    except OSError as exc:
        return {"ok": False, "error": str(exc)}


def events_of(pid: int) -> list[dict]:
    return [e for e in journal_events()["events"] if e["_journal"].get("_PID") == str(pid)]


def main() -> None:
    wheel = (IO / "wheel").read_text().strip()
    env = dict(os.environ, PIP_CACHE_DIR="/var/cache/parlsched-pip", PIP_PROGRESS_BAR="off")
    pip_env = IO / "pip.env"  # the host's CA bundle and proxy settings, from run.sh
    if pip_env.exists():
        env.update(line.split("=", 1) for line in pip_env.read_text().splitlines() if "=" in line)
    make = ["make", "-C", SRC, f"WHEEL={wheel}"]

    with step("environment") as r:
        r["uname"] = os.uname().release
        r["cpus"] = sorted(os.sched_getaffinity(0))
        r["systemd"] = run(["systemctl", "--version"])["stdout"].splitlines()[0]
        r["os"] = platform.freedesktop_os_release()["PRETTY_NAME"]  # "Debian GNU/Linux 12 (bookworm)"
        r["system_state"] = run(["systemctl", "is-system-running"])["stdout"].strip()
        r["paranoid"] = Path("/proc/sys/kernel/perf_event_paranoid").read_text().strip()

    with step("install") as r:
        r["first"] = run(make + ["install"], timeout=600, env=env)
        with CONFIG.open("a") as f:
            f.write("# e2e: a local edit that make install must keep\n")
        r["second"] = run(make + ["install"], timeout=300, env=env)
        r["config_kept"] = "# e2e: a local edit" in CONFIG.read_text()
        r["config_group"] = re.findall(r"^  group: (.*)$", CONFIG.read_text(), re.M)
        r["group"] = run(["getent", "group", "parlsched"])
        r["links"] = {c: os.path.realpath(f"/usr/local/bin/{c}") for c in ("parlschedd", "parlschedctl")}
        r["unit_file"] = run(["systemctl", "show", UNIT, "--property=FragmentPath"])["stdout"].strip()
        r["useradd"] = run(["useradd", "--create-home", "--groups", "parlsched", USER])

    with step("verify") as r:
        r.update(run(["systemd-analyze", "verify", UNIT_PATH]))

    with step("security") as r:
        # the whole table: its last 6000 characters, all that was kept before, held only the
        # passed rows, not the ones the score is made of
        p = run(["systemd-analyze", "security", "--no-pager", UNIT], keep=1 << 20)
        r["rc"], r["text"] = p["rc"], p["stdout"]
        m = re.search(r"Overall exposure level for \S+: ([0-9.]+) (\S+)", p["stdout"])
        r["score"], r["verdict"] = (float(m.group(1)), m.group(2)) if m else (None, None)

    with step("start") as r:
        r["enable"] = run(["systemctl", "enable", "--now", UNIT], timeout=120)
        r["is_active"] = is_active()
        r["is_enabled"] = run(["systemctl", "is-enabled", UNIT])["stdout"].strip()
        time.sleep(1.5)
        r["show"] = show("MainPID", "Type", "NotifyAccess", "StatusText", "WatchdogUSec",
                         "WatchdogTimestampMonotonic", "NRestarts", "ActiveState", "SubState")
        pid = int(r["show"]["MainPID"])
        r["proc_status"] = {k: v.strip() for k, v in (line.split(":", 1) for line in
                            Path(f"/proc/{pid}/status").read_text().splitlines())
                            if k in ("Uid", "CapEff", "CapBnd", "CapAmb", "NoNewPrivs", "Seccomp")}
        st = os.stat(SOCKET)
        r["socket"] = {"mode": oct(st.st_mode & 0o7777), "gid": st.st_gid,
                       "group": run(["getent", "group", str(st.st_gid)])["stdout"].split(":")[0]}
        r["rundir_mode"] = oct(os.stat("/run/parlsched").st_mode & 0o7777)
        r["status"] = status_json()
        r["reinstall"] = run(make + ["install"], timeout=300, env=env)  # over the running daemon

    workload = None
    with step("attach") as r:
        wl_file = Path("/tmp/e2e-workload.json")
        wl_file.unlink(missing_ok=True)
        workload = subprocess.Popen(AS_USER + ["python3", str(IO / "workload.py"), str(WORKLOAD_THREADS), str(wl_file)])
        if not wait_for(wl_file.exists, 15):
            raise RuntimeError("workload did not start")
        wl = json.loads(wl_file.read_text())
        pid = r["pid"] = wl["pid"]
        r["workers"] = wl["tids"]
        r["uid"] = os.stat(f"/proc/{pid}").st_uid
        r["original"] = masks(pid)
        r["attach_as_user"] = run(AS_USER + [CTL, "attach", str(pid)])
        if r["attach_as_user"]["rc"] != 0:  # keep exercising the rest as root
            r["attach_as_root"] = run([CTL, "attach", str(pid)])
        target = wait_for(lambda: all_pinned(pid), 20)
        r["status_target"] = target or target_of(status_json(), pid)
        r["status_daemon"] = status_json()["daemon"]
        r["pinned_masks"] = masks(pid)
        r["user_status"] = status_json(as_user=True)

    with step("reload") as r:
        pid = result["steps"]["attach"]["pid"]
        r["main_pid_before"] = main_pid()
        r["reload"] = run(["systemctl", "reload", UNIT])
        time.sleep(1.0)
        r["is_active"], r["main_pid_after"] = is_active(), main_pid()
        r["attached_after"] = target_of(status_json(), pid) is not None
        # A broken config: the daemon keeps running with the old one.
        good = CONFIG.read_text()
        CONFIG.write_text(good + "period_s: not-a-number\n")
        r["bad_reload"] = run(["systemctl", "reload", UNIT])
        time.sleep(1.0)
        r["bad_is_active"], r["bad_main_pid"] = is_active(), main_pid()
        r["bad_attached_after"] = target_of(status_json(), pid) is not None
        CONFIG.write_text(good)
        r["reload_again"] = run(["systemctl", "reload", UNIT])

    with step("crash") as r:
        pid = result["steps"]["attach"]["pid"]
        before = main_pid()
        r["main_pid_before"] = before
        r["kill"] = run(["systemctl", "kill", "--signal=SIGKILL", UNIT])
        r["restarted"] = bool(wait_for(lambda: is_active() == "active" and main_pid() not in (0, before), 20))
        r["main_pid_after"] = main_pid()
        r["n_restarts"] = show("NRestarts")["NRestarts"]
        target = wait_for(lambda: all_pinned(pid), 20)
        r["reattached"] = target is not None
        r["masks"] = masks(pid)

    with step("watchdog") as r:
        # A hung daemon (SIGSTOP) misses its WATCHDOG=1 pings: systemd kills and restarts it.
        pid = result["steps"]["attach"]["pid"]
        drop_in("WatchdogSec=2s\nTimeoutAbortSec=2s")
        r["restart"] = run(["systemctl", "restart", UNIT], timeout=60)
        before = r["main_pid_before"] = main_pid()
        r["watchdog_usec"] = show("WatchdogUSec")["WatchdogUSec"]
        # A clean restart restores every mask and attaches the same targets again.
        r["pinned_before"] = wait_for(lambda: all_pinned(pid), 20) is not None
        r["reattached_events"] = [e for e in events_of(before) if e.get("event") == "re-attached from the last run"]
        os.kill(before, 19)  # SIGSTOP
        r["restarted"] = bool(wait_for(lambda: is_active() == "active" and main_pid() not in (0, before), 30))
        r["main_pid_after"] = main_pid()
        r["systemd_lines"] = [l for l in run(["journalctl", "-u", UNIT, "-o", "cat", "--no-pager"])["stdout"].splitlines()
                              if "atchdog" in l]
        r["reattached"] = wait_for(lambda: all_pinned(pid), 20) is not None
        drop_in(None)  # back to WatchdogSec=30s for what follows, without a restart

    with step("stop") as r:
        pid = result["steps"]["attach"]["pid"]
        r["attached_before"] = target_of(status_json(), pid) is not None
        r["masks_before"] = masks(pid)
        r["stop"] = run(["systemctl", "stop", UNIT], timeout=60)
        r["is_active"] = is_active()
        r["restored"] = masks(pid)
        r["rundir_exists"] = os.path.exists("/run/parlsched")
        r["show"] = show("Result", "ExecMainStatus", "ExecMainCode")

    with step("refused") as r:
        # A start refused for a bad config: not restarted into the start limit, its reason
        # an error in the journal, and the admin's start after the fix simply works.
        good = CONFIG.read_text()
        CONFIG.write_text(good + "period_s: not-a-number\n")
        r["start"] = run(["systemctl", "start", UNIT], timeout=60)
        time.sleep(5)  # more than RestartSec: a restart would have come
        r["show"] = show("ActiveState", "Result", "ExecMainStatus", "NRestarts")
        r["errors"] = run(["journalctl", "-u", UNIT, "-p", "err", "-o", "cat", "--no-pager"])["stdout"]
        CONFIG.write_text(good)
        r["fixed_start"] = run(["systemctl", "start", UNIT], timeout=60)
        r["fixed_is_active"] = is_active()
        r["fixed_status_text"] = show("StatusText")["StatusText"]
        r["stop"] = run(["systemctl", "stop", UNIT], timeout=60)

    with step("journal") as r:
        j = journal_events()
        r["events"] = j["events"]
        r["non_json"] = j["non_json"]
        (IO / "journal.txt").write_text(run(["journalctl", "-b", "--no-pager"], timeout=60)["stdout"])

    with step("cgroup_rule") as r:
        # A `cgroup:` target rule: the daemon reads cgroupfs, read-only here
        # (ProtectControlGroups=yes), and finds a unit's process without an attach.
        good = CONFIG.read_text()
        CONFIG.write_text(good.replace("targets: []", "targets:\n  - cgroup: /system.slice/e2e-cgroup-workload.service"))
        r["config_check"] = run([CTL, "config", "check", str(CONFIG)])
        r["start"] = run(["systemctl", "start", UNIT], timeout=60)
        # the stop removed /run/parlsched: what was attached by hand is forgotten
        r["hand_target_forgotten"] = target_of(status_json(), result["steps"]["attach"]["pid"]) is None
        cg_file = Path("/tmp/e2e-cgroup-workload.json")
        cg_file.unlink(missing_ok=True)
        r["run"] = run(["systemd-run", "--unit=e2e-cgroup-workload", f"--uid={USER}", "--property=PrivateTmp=no",
                        "python3", str(IO / "workload.py"), "3", str(cg_file)])
        if not wait_for(cg_file.exists, 15):
            raise RuntimeError("the cgroup workload did not start")
        cg_pid = r["pid"] = json.loads(cg_file.read_text())["pid"]
        target = wait_for(lambda: all_pinned(cg_pid), 20)
        r["found"] = target is not None
        r["target"] = target
        r["stop"] = run(["systemctl", "stop", UNIT], timeout=60)
        run(["systemctl", "stop", "e2e-cgroup-workload.service"], timeout=60)
        CONFIG.write_text(good)

    with step("metrics") as r:
        # `metrics:` under the unit, with the drop-in docs/systemd.md gives and with one
        # that keeps PrivateNetwork=yes: the listener binds in both, so the start succeeds.
        good = CONFIG.read_text()
        CONFIG.write_text(good.replace("\nmetrics: null\n", "\nmetrics: '127.0.0.1:9477'\n"))
        families = "RestrictAddressFamilies=AF_INET AF_INET6"
        for name, text in (("kept_private_network", families),
                           ("documented", f"{families}\nPrivateNetwork=no\nIPAddressDeny=")):
            m = r[name] = {}
            drop_in(text)
            m["start"] = run(["systemctl", "start", UNIT], timeout=60)
            m["is_active"] = is_active()
            daemon_pid = main_pid()
            m["scrape"] = scrape("http://127.0.0.1:9477/metrics")
            time.sleep(1)  # the journal has the start's lines
            m["said"] = [{k: e.get(k) for k in ("event", "level", "problem")} for e in events_of(daemon_pid)
                         if e.get("event", "").startswith("metrics")]
            if m["is_active"] != "active":
                m["journal"] = run(["journalctl", "-u", UNIT, "-n", "8", "-o", "cat", "--no-pager"])["stdout"]
            run(["systemctl", "stop", UNIT], timeout=60)
        drop_in(None)
        CONFIG.write_text(good)

    with step("ablation") as r:
        # Each capability of the bounding set, taken away in turn: what breaks.
        pid = result["steps"]["attach"]["pid"]
        for cap in ("CAP_SYS_NICE", "CAP_PERFMON", "CAP_CHOWN"):
            a = r[cap] = {}
            drop_in(f"CapabilityBoundingSet=~{cap}")
            a["start"] = run(["systemctl", "start", UNIT], timeout=60)
            time.sleep(0.5)
            a["is_active"] = is_active()
            daemon_pid = main_pid()
            if a["is_active"] == "active":
                a["attach"] = run([CTL, "attach", str(pid)])
                a["all_pinned"] = wait_for(lambda: all_pinned(pid), 4) is not None
                a["counter_source"] = status_json()["daemon"]["counter_source"]
                a["events"] = [e.get("event") + ": " + str(e.get("error", "")) for e in events_of(daemon_pid)
                               if e.get("level") in ("warning", "error")][:5]
            else:
                a["journal"] = run(["journalctl", "-u", UNIT, "-n", "8", "-o", "cat", "--no-pager"])["stdout"]
            run(["systemctl", "stop", UNIT], timeout=60)
            a["restored"] = masks(pid) == result["steps"]["attach"]["original"]
        drop_in(None)

    if workload is not None:
        workload.kill()
        workload.wait()

    with step("uninstall") as r:
        r["first"] = run(make + ["uninstall"], timeout=120)
        r["gone"] = {p: not os.path.lexists(p) for p in (
            UNIT_PATH, "/usr/local/bin/parlschedd", "/usr/local/bin/parlschedctl",
            "/opt/parlsched", "/usr/local/lib/sysusers.d/parlsched.conf")}
        r["unit_known"] = show("LoadState")["LoadState"]
        r["config_kept"] = CONFIG.exists()
        r["group_kept"] = run(["getent", "group", "parlsched"])["rc"] == 0
        r["second"] = run(make + ["uninstall"], timeout=120)
        r["purge"] = run(make + ["uninstall", "PURGE=1"], timeout=120)
        r["config_purged"] = not CONFIG.parent.exists()
        r["group_purged"] = run(["getent", "group", "parlsched"])["rc"] != 0

    result["finished"] = time.time()
    result["seconds"] = round(result["finished"] - result["started"], 1)
    save()
    out("done")


if __name__ == "__main__":
    try:
        main()
    except Exception:
        result["errors"]["probe"] = traceback.format_exc()
        save()
        raise
