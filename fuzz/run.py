"""Run both fuzzers for a bounded time and check the daemon afterwards (`make fuzz`).

    sudo .venv/bin/python fuzz/run.py [--seconds 60]

A third of the time goes to fuzz_protocol.py (parse_request in-process,
coverage-guided), a third to fuzz_socket.py (a real daemon's socket, as uid nobody),
a third to fuzz_energy.py (the energy model's file loaders, in-process). Around the socket run a
1-thread target stays attached; afterwards the daemon must be up, still managing it
(pinned), with fds and RSS within a margin of their values before. Writes
fuzz/results/last.json (executions, seconds, crashes per fuzzer) and keeps crash inputs
in fuzz/artifacts/. Exits 1 if a fuzzer found a crash or the daemon check failed.

When atheris cannot be imported, a bounded random-mutation fuzzer over the same seed
corpus (Python's random module, no coverage guidance) runs instead, and the results
say so.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))
from parlschedctl import client  # noqa: E402

NOBODY = 65534


def have_atheris() -> bool:
    try:
        import atheris  # noqa: F401
    except ImportError:
        return False
    return True


def run_libfuzzer(script: str, seconds: int, corpus: Path, env: dict, user: int | None = None) -> dict:
    artifacts = HERE / "artifacts"
    artifacts.mkdir(exist_ok=True)
    os.chmod(artifacts, 0o777)
    os.chmod(corpus, 0o777)
    for f in corpus.iterdir():
        os.chmod(f, 0o666)
    cmd = [sys.executable, str(HERE / script), f"-max_total_time={seconds}", f"-artifact_prefix={artifacts}/",
           "-max_len=200000", "-timeout=20", "-print_final_stats=1", str(corpus)]
    t0 = time.monotonic()
    proc = subprocess.run(cmd, env=env, cwd=str(ROOT), capture_output=True, text=True, user=user,
                          group=user, extra_groups=[] if user is not None else None)
    elapsed = time.monotonic() - t0
    err = proc.stderr
    m = re.search(r"Done (\d+) runs in (\d+) second", err) or re.search(r"stat::number_of_executed_units:\s*(\d+)", err)
    runs = int(m.group(1)) if m else None
    crashed = proc.returncode != 0
    if crashed:
        (HERE / "artifacts" / f"{script}.log").write_text(err[-20000:])
    return {"fuzzer": script, "engine": "atheris/libFuzzer", "executions": runs, "seconds": round(elapsed, 1),
            "returncode": proc.returncode, "crashes": int(crashed),
            "corpus_files": len(list(corpus.iterdir())), "tail": err.strip().splitlines()[-3:]}


def random_fuzz(target, seconds: float, seeds: list[bytes]) -> dict:
    """Fallback without atheris: random byte mutations of the seeds."""
    import random
    rng = random.Random(7)
    runs, crashes, t0 = 0, 0, time.monotonic()
    while time.monotonic() - t0 < seconds:
        data = bytearray(rng.choice(seeds))
        for _ in range(rng.randint(1, 8)):
            op = rng.randrange(4)
            pos = rng.randrange(len(data) + 1)
            if op == 0:
                data[pos:pos] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 8)))
            elif op == 1 and data:
                del data[pos:pos + rng.randint(1, 8)]
            elif op == 2:
                data[pos:pos] = rng.choice([b"[" * 5000, b"\n", b"\xff", b'"', b"{", b"9" * 400, b"x" * 70000])
            elif data:
                data[min(pos, len(data) - 1)] ^= 1 << rng.randrange(8)
        runs += 1
        try:
            target(bytes(data))
        except Exception:  # noqa: BLE001
            crashes += 1
    return {"engine": "random mutation (atheris unavailable)", "executions": runs,
            "seconds": round(time.monotonic() - t0, 1), "crashes": crashes}


def daemon_figures(pid: int) -> tuple[int, float]:
    fds = len(os.listdir(f"/proc/{pid}/fd"))
    rss = next(int(l.split()[1]) for l in open(f"/proc/{pid}/status") if l.startswith("VmRSS:")) / 1024
    return fds, rss


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=int, default=60, help="total fuzzing time (split between the three fuzzers)")
    args = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("fuzz/run.py: run as root (it starts a real daemon)")
    share = max(1, args.seconds // 3)  # each fuzzer's share of it
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    results: dict = {"date": time.strftime("%Y-%m-%d %H:%M"), "seconds_requested": args.seconds, "fuzzers": []}
    seeds_dir = HERE / "corpus" / "protocol"
    seeds = [f.read_bytes() for f in sorted(seeds_dir.iterdir())]
    work = Path(tempfile.mkdtemp(prefix="parlsched-fuzz-"))
    os.chmod(work, 0o755)
    atheris_ok = have_atheris()
    # 1. the parser, in-process
    corpus = work / "corpus-protocol"
    shutil.copytree(seeds_dir, corpus)
    if atheris_ok:
        results["fuzzers"].append(run_libfuzzer("fuzz_protocol.py", share, corpus, env))
    else:
        from parlschedd.daemon import protocol

        def parse(data: bytes) -> None:
            try:
                protocol.parse_request(data)
            except protocol.ProtocolError:
                pass
        results["fuzzers"].append({"fuzzer": "parse_request", **random_fuzz(parse, share, seeds)})
    # 2. the live socket of a real daemon, as nobody
    (work / "cfg.yaml").write_text("period_s: 0.05\ndomain_period_s: 0.5\nsocket: {mode: '0666'}\n")
    sock = str(work / "ctl.sock")
    log = open(work / "daemon.log", "ab")
    daemon = subprocess.Popen([sys.executable, "-m", "parlschedd", "--config", str(work / "cfg.yaml"), "--socket", sock,
                               "--state-dir", str(work / "state"), "--log-level", "warning"], stderr=log, cwd=str(ROOT))
    target = subprocess.Popen(["sleep", "3600"])
    ok = True
    try:
        for _ in range(200):
            try:
                client.request(sock, "ping")
                break
            except client.Unreachable:
                time.sleep(0.05)
        client.request(sock, "attach", pid=target.pid)
        time.sleep(0.5)
        fds0, rss0 = daemon_figures(daemon.pid)
        corpus = work / "corpus-socket"
        shutil.copytree(seeds_dir, corpus)
        if atheris_ok:
            res = run_libfuzzer("fuzz_socket.py", share, corpus,
                                {**env, "PARLSCHED_FUZZ_SOCKET": sock, "PARLSCHED_FUZZ_UID": str(NOBODY)})
        else:
            os.environ["PARLSCHED_FUZZ_SOCKET"] = sock
            sys.path.insert(0, str(HERE))
            import fuzz_socket  # noqa: E402  (needs atheris too: fallback inlines its check)
            res = {"fuzzer": "socket", **random_fuzz(fuzz_socket.test_one_input, share, seeds)}
        time.sleep(0.5)
        fds1, rss1 = daemon_figures(daemon.pid)
        status = client.request(sock, "status", pid=target.pid)
        pinned = all(t["pinned"] for t in status["targets"][0]["threads"])
        check = {"daemon_alive": daemon.poll() is None, "target_still_pinned": pinned,
                 "fds_before": fds0, "fds_after": fds1, "rss_mib_before": round(rss0, 1), "rss_mib_after": round(rss1, 1),
                 "fds_bounded": fds1 <= fds0 + 4, "rss_bounded": rss1 <= rss0 + 32}
        res["daemon_check"] = check
        results["fuzzers"].append(res)
        ok = all(v for k, v in check.items() if isinstance(v, bool))
    finally:
        daemon.send_signal(signal.SIGTERM)
        rc = daemon.wait(30)
        target.kill()
        target.wait()
        results["daemon_exit_code"] = rc
        ok = ok and rc == 0
    # 3. the energy model's loaders, in-process
    sys.path.insert(0, str(HERE))
    import fuzz_energy  # noqa: E402

    corpus = work / "corpus-energy"
    corpus.mkdir()
    try:
        energy_seeds = fuzz_energy.seeds()
    except OSError as exc:  # no shared data beside the checkout: said, the other results kept
        energy_seeds = {}
        results["fuzzers"].append({"fuzzer": "fuzz_energy.py", "executions": 0, "seconds": 0, "crashes": 0,
                                   "skipped": f"no seeds: {exc}"})
    for name, seed in energy_seeds.items():
        (corpus / name).write_bytes(seed)
    if energy_seeds and atheris_ok:
        results["fuzzers"].append(run_libfuzzer("fuzz_energy.py", share, corpus, env))
    elif energy_seeds:
        results["fuzzers"].append({"fuzzer": "energy loaders",
                                   **random_fuzz(fuzz_energy.test_one_input, share, list(energy_seeds.values()))})
    crashes = sum(f.get("crashes", 0) for f in results["fuzzers"])
    results["ok"] = ok and crashes == 0
    out = HERE / "results" / "last.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps(results, indent=1) + "\n")
    for f in results["fuzzers"]:
        print(f"{f['fuzzer']:<20} {f.get('engine', '')}: {f['executions']} executions in {f['seconds']} s, "
              f"{f['crashes']} crashes")
        if "daemon_check" in f:
            print("  daemon after:", json.dumps(f["daemon_check"]))
    print(f"wrote {out}; {'OK' if results['ok'] else 'FAILED'}")
    shutil.rmtree(work, ignore_errors=True)
    return 0 if results["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
