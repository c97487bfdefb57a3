"""A multi-threaded target for the e2e probe (system python3, standard library only).

Starts N busy-ish worker threads; each sets its own CPU mask first (all CPUs, or one of
them, cycling), so the probe can check that `systemctl stop parlschedd` restores each
thread's own original mask and not just "all CPUs". Writes {"pid", "tids"} as one JSON
line to the file named by argv[2] once every worker runs, then works until killed.
"""

import json
import os
import sys
import threading
import time


def worker(mask: set[int], ready: list[int], lock: threading.Lock) -> None:
    os.sched_setaffinity(0, mask)  # 0: the calling thread on Linux
    with lock:
        ready.append(threading.get_native_id())
    x = 0
    while True:
        for i in range(50000):
            x += i
        time.sleep(0.005)


def main() -> None:
    n, out = int(sys.argv[1]), sys.argv[2]
    cpus = sorted(os.sched_getaffinity(0))
    masks = [set(cpus)] + [{c} for c in cpus]
    ready: list[int] = []
    lock = threading.Lock()
    for i in range(n):
        threading.Thread(target=worker, args=(masks[i % len(masks)], ready, lock),
                         name=f"busy{i}", daemon=True).start()
    while len(ready) < n:
        time.sleep(0.01)
    with open(out + ".tmp", "w") as f:
        json.dump({"pid": os.getpid(), "tids": sorted(ready)}, f)
    os.rename(out + ".tmp", out)
    while True:
        time.sleep(1)


if __name__ == "__main__":
    main()
