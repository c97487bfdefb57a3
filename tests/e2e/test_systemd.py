"""parlschedd under a real systemd: the facts e2e/probe.py recorded inside a booted
Debian container (e2e/run.sh), checked one by one.

Run with `make e2e` (needs root). PARLSCHED_E2E_RESULT=path/to/result.json checks an
earlier run's result instead of booting again.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from parlschedd.cpulist import format_cpulist

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[2]
SCORE_TARGET = 4.0


def single_cpu(cpulist: str) -> bool:
    return cpulist.isdigit()


@pytest.fixture(scope="module")
def result() -> dict:
    given = os.environ.get("PARLSCHED_E2E_RESULT")
    if given:
        return json.loads(Path(given).read_text())
    out = Path(os.environ.get("E2E_OUT", REPO / "build" / "e2e"))
    budget = int(os.environ.get("E2E_TIMEOUT", "840"))
    env = dict(os.environ, E2E_OUT=str(out), E2E_PY=os.environ.get("E2E_PY", sys.executable))
    (out / "result.json").unlink(missing_ok=True)
    proc = subprocess.run(["bash", str(REPO / "e2e" / "run.sh")], env=env, timeout=budget + 60)
    assert proc.returncode == 0, f"e2e/run.sh failed ({proc.returncode}); logs in {out}"
    return json.loads((out / "result.json").read_text())


@pytest.fixture(scope="module")
def steps(result: dict) -> dict:
    return result["steps"]


def test_probe_ran_to_the_end_without_errors(result):
    assert "finished" in result, "the probe did not finish"
    assert result["errors"] == {}, "\n".join(f"{k}:\n{v}" for k, v in result["errors"].items())


def test_container_booted_a_real_systemd(steps):
    env = steps["environment"]
    assert env["systemd"].startswith("systemd ")
    assert env["system_state"] in ("running", "starting", "degraded")


def test_make_install_is_idempotent_and_keeps_the_config(steps):
    inst = steps["install"]
    assert inst["first"]["rc"] == 0, inst["first"]["stderr"]
    assert inst["second"]["rc"] == 0, inst["second"]["stderr"]
    assert inst["config_kept"], "a second make install replaced an edited config"
    assert inst["config_group"] == ["parlsched"]
    assert inst["group"]["rc"] == 0 and inst["group"]["stdout"].startswith("parlsched:")
    assert inst["links"] == {"parlschedd": "/opt/parlsched/venv/bin/parlschedd",
                             "parlschedctl": "/opt/parlsched/venv/bin/parlschedctl"}
    assert inst["unit_file"] == "FragmentPath=/usr/local/lib/systemd/system/parlschedd.service"
    assert last_words(inst["second"]) == "installed; start it with: systemctl enable --now parlschedd"


def test_make_install_over_the_running_daemon_says_to_restart_it_and_not_to_start_it(steps):
    reinstall = steps["start"]["reinstall"]
    assert reinstall["rc"] == 0, reinstall["stderr"]
    assert last_words(reinstall) == "installed; parlschedd is still running the old version: systemctl restart parlschedd"


def last_words(make_run: dict) -> str:
    """What make install said at its end (its stdout also echoes the recipe's commands)."""
    return [line for line in make_run["stdout"].splitlines() if line.startswith("installed;")][-1]


def test_systemd_analyze_verify_passes(steps):
    v = steps["verify"]
    assert v["rc"] == 0 and v["stdout"] == "" and v["stderr"] == "", v


def test_exposure_score(steps):
    sec = steps["security"]
    print(f"systemd-analyze security parlschedd.service: {sec['score']} {sec['verdict']}")
    assert sec["score"] is not None, sec["text"][-2000:]
    assert sec["score"] <= SCORE_TARGET


def test_enable_now_starts_a_notify_service_with_a_watchdog(steps):
    st = steps["start"]
    assert st["enable"]["rc"] == 0, st["enable"]["stderr"]
    assert st["is_active"] == "active" and st["is_enabled"] == "enabled"
    show = st["show"]
    assert show["Type"] == "notify" and show["NotifyAccess"] == "main"
    assert show["StatusText"].startswith("managing ")  # STATUS= reached systemd
    assert show["WatchdogUSec"] == "30s"
    assert int(show["WatchdogTimestampMonotonic"]) > 0  # a WATCHDOG=1 ping arrived
    assert show["NRestarts"] == "0"


def test_daemon_runs_with_only_its_capabilities_and_a_seccomp_filter(steps):
    ps = steps["start"]["proc_status"]
    caps = {0: "CAP_CHOWN", 23: "CAP_SYS_NICE", 38: "CAP_PERFMON"}
    want = sum(1 << bit for bit in caps)
    assert int(ps["CapBnd"], 16) == want and int(ps["CapEff"], 16) == want, ps
    assert ps["NoNewPrivs"] == "1" and ps["Seccomp"] == "2"


def test_socket_is_group_parlsched_0660(steps):
    st = steps["start"]
    assert st["socket"]["mode"] == "0o660" and st["socket"]["group"] == "parlsched"
    assert st["rundir_mode"] == "0o755"


def test_attach_by_a_group_member_pins_every_thread(steps):
    at = steps["attach"]
    assert at["uid"] != 0, "the workload should belong to an unprivileged user"
    assert at["attach_as_user"]["rc"] == 0, at["attach_as_user"]["stderr"]
    target = at["status_target"]
    tids = {th["tid"] for th in target["threads"]}
    assert set(at["workers"]) <= tids and len(at["workers"]) == 4
    assert all(th["pinned"] for th in target["threads"]), target
    cpus = at["status_daemon"]["cpus"]
    domains = [format_cpulist(d) for d in at["status_daemon"]["domains"]]
    for th in target["threads"]:
        # Read after the status: the daemon may have moved the thread since, so the mask
        # need not be the one status showed, but it is one the daemon sets: a single CPU
        # it uses, or a whole domain (a free thread, learning.free in the default config).
        mask = at["pinned_masks"][str(th["tid"])]
        assert (single_cpu(mask) and int(mask) in cpus) or mask in domains, (th, mask)
        assert th["cpu"] in cpus if not th["free"] else th["cpu"] is None
    assert at["status_daemon"]["counter_source"] == "perf:task-clock"
    # The unit lets the daemon read /proc/loadavg: a quiet period lists no tree (its
    # ProcSubset=pid hid it, and every --descendants tree was listed every period)
    assert at["status_daemon"]["trees_listed"] == "after a birth"
    # A non-root caller sees its own target.
    assert [t["pid"] for t in at["user_status"]["targets"]] == [at["pid"]]


def test_workload_started_with_distinct_original_masks(steps):
    original = steps["attach"]["original"]
    assert len(set(original.values())) > 1, original


def test_reload_keeps_the_daemon_and_its_targets(steps):
    rl = steps["reload"]
    assert rl["reload"]["rc"] == 0
    assert rl["is_active"] == "active" and rl["main_pid_after"] == rl["main_pid_before"]
    assert rl["attached_after"]


def test_reload_with_a_broken_config_keeps_running(steps):
    rl = steps["reload"]
    assert rl["bad_reload"]["rc"] == 0
    assert rl["bad_is_active"] == "active" and rl["bad_main_pid"] == rl["main_pid_before"]
    assert rl["bad_attached_after"]
    assert rl["reload_again"]["rc"] == 0


def test_crash_is_restarted_and_recovers_its_targets(steps):
    cr = steps["crash"]
    assert cr["kill"]["rc"] == 0
    assert cr["restarted"] and cr["main_pid_after"] != cr["main_pid_before"]
    assert int(cr["n_restarts"]) >= 1
    assert cr["reattached"], "state.json did not survive the restart (RuntimeDirectoryPreserve=restart)"


def test_watchdog_restarts_a_hung_daemon(steps):
    wd = steps["watchdog"]
    assert wd["restart"]["rc"] == 0 and wd["watchdog_usec"] == "2s"
    assert wd["pinned_before"], "systemctl restart dropped the target attached by hand"
    assert [e["pid"] for e in wd["reattached_events"]] == [steps["attach"]["pid"]]
    assert wd["restarted"] and wd["main_pid_after"] != wd["main_pid_before"]
    assert any("Watchdog timeout" in line for line in wd["systemd_lines"]), wd["systemd_lines"]
    assert wd["reattached"], "the restarted daemon did not recover its target"


def test_stop_restores_every_original_affinity_exactly(steps):
    sp, at = steps["stop"], steps["attach"]
    domains = [format_cpulist(d) for d in at["status_daemon"]["domains"]]
    # before the stop every mask is one the daemon set (a CPU, or a free thread's domain)
    assert sp["attached_before"] and all(single_cpu(m) or m in domains for m in sp["masks_before"].values())
    assert sp["masks_before"] != at["original"]
    assert sp["stop"]["rc"] == 0 and sp["is_active"] == "inactive"
    assert sp["restored"] == at["original"]
    assert sp["show"]["Result"] == "success"
    assert not sp["rundir_exists"], "RuntimeDirectory= not removed on stop"


def test_a_refused_start_is_not_restarted_and_starts_once_fixed(steps):
    rf = steps["refused"]
    assert rf["start"]["rc"] != 0 and rf["show"]["ActiveState"] == "failed"
    assert (rf["show"]["ExecMainStatus"], rf["show"]["NRestarts"]) == ("78", "0"), rf["show"]
    refusal = [line for line in rf["errors"].splitlines() if '"refused to start"' in line]
    assert refusal and "period_s" in json.loads(refusal[-1])["error"], rf["errors"]  # at priority err
    assert rf["fixed_start"]["rc"] == 0 and rf["fixed_is_active"] == "active", rf["fixed_start"]
    assert rf["fixed_status_text"].startswith("managing ")


def test_journal_has_the_structured_log_lines(steps):
    j = steps["journal"]
    events = [e.get("event") for e in j["events"]]
    for wanted in ("started", "attached", "reloaded", "reload failed, keeping the old config",
                   "recovered from previous run", "restored", "stopped"):
        assert wanted in events, (wanted, events)
    attached = [e for e in j["events"] if e.get("event") == "attached"]
    assert attached[0]["pid"] == steps["attach"]["pid"] and attached[0]["level"] == "info"
    assert all("timestamp" in e and "level" in e for e in j["events"])
    assert j["non_json"] == [], j["non_json"][:10]
    priority = {"debug": "7", "info": "6", "warning": "4", "error": "3", "critical": "2"}
    filed = {(e["level"], e["_journal"]["PRIORITY"]) for e in j["events"]}
    assert filed == {(level, priority[level]) for level, _ in filed}, filed  # each line at its level's priority
    assert {"info", "error"} <= {level for level, _ in filed}, filed


def test_cgroup_rule_finds_a_units_process_through_read_only_cgroupfs(steps):
    cg = steps["cgroup_rule"]
    assert cg["config_check"]["rc"] == 0, cg["config_check"]
    assert cg["start"]["rc"] == 0 and cg["run"]["rc"] == 0, cg
    assert cg["found"], "the cgroup rule did not attach the unit's process"
    assert cg["hand_target_forgotten"], "systemctl stop + start attached the last run's target again"
    assert len(cg["target"]["threads"]) >= 3


def test_metrics_are_scraped_through_the_documented_drop_in_and_said_unreachable_with_private_network_kept(steps):
    m = steps["metrics"]
    documented = m["documented"]
    assert documented["is_active"] == "active" and documented["scrape"]["ok"], documented
    assert "parlsched_managed_threads" in documented["scrape"]["text"]
    assert [s["event"] for s in documented["said"]] == ["metrics listening"], documented
    private = m["kept_private_network"]  # bound in the unit's own network namespace
    assert private["is_active"] == "active" and not private["scrape"]["ok"], private
    unreachable = [s for s in private["said"] if s["event"] == "metrics not reachable"]
    assert len(unreachable) == 1 and unreachable[0]["level"] == "warning", private
    assert "PrivateNetwork=yes under systemd" in unreachable[0]["problem"]


def test_each_capability_is_needed(steps):
    ab = steps["ablation"]
    nice = ab["CAP_SYS_NICE"]
    assert nice["is_active"] != "active" and "needs CAP_SYS_NICE" in nice["journal"]  # refuses to start, says why
    perfmon = ab["CAP_PERFMON"]
    assert perfmon["is_active"] == "active" and perfmon["counter_source"] == "schedstat"
    chown = ab["CAP_CHOWN"]
    assert chown["is_active"] != "active" and "Operation not permitted" in chown["journal"]


def test_make_uninstall_removes_what_install_added(steps):
    un = steps["uninstall"]
    assert un["first"]["rc"] == 0, un["first"]["stderr"]
    assert all(un["gone"].values()), un["gone"]
    assert un["unit_known"] == "not-found"
    assert un["config_kept"] and un["group_kept"]
    assert un["second"]["rc"] == 0, un["second"]["stderr"]
    assert un["purge"]["rc"] == 0 and un["config_purged"] and un["group_purged"]
