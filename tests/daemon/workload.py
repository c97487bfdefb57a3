"""A real multi-threaded target for the daemon tests.

Starts N worker threads that alternate short compute bursts and sleeps. Commands on
stdin, one per line: ``spawn`` starts one more worker, ``stop`` ends the newest worker,
``tids`` prints the live worker tids, ``rename TID NAME`` names a thread (the kernel
lets a process name only its own threads); every command answers one JSON line on stdout.
"""

import json
import sys
import threading
import time


def worker(stop: threading.Event, ready: list, lock: threading.Lock) -> None:
    tid = threading.get_native_id()
    with open(f"/proc/self/task/{tid}/comm", "w") as comm:  # the kernel's thread name
        comm.write(threading.current_thread().name)
    with lock:
        ready.append(threading.get_native_id())
    x = 0
    while not stop.is_set():
        for i in range(20000):
            x += i
        time.sleep(0.002)
    with lock:
        ready.remove(threading.get_native_id())


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    tids: list[int] = []
    lock = threading.Lock()
    stops: list[threading.Event] = []
    threads: list[threading.Thread] = []

    def spawn() -> None:
        stop = threading.Event()
        t = threading.Thread(target=worker, args=(stop, tids, lock), daemon=True, name=f"worker{len(stops)}")
        stops.append(stop)
        threads.append(t)
        before = len(tids)
        t.start()
        while len(tids) == before:
            time.sleep(0.001)

    for _ in range(n):
        spawn()
    print(json.dumps({"pid": threading.get_native_id(), "tids": list(tids)}), flush=True)
    for line in sys.stdin:
        cmd = line.strip()
        if cmd == "spawn":
            spawn()
        elif cmd == "stop" and stops:
            stops.pop().set()
            threads.pop().join()
        elif cmd.startswith("rename "):
            _, tid, name = cmd.split()
            with open(f"/proc/self/task/{tid}/comm", "w") as comm:
                comm.write(name)
        with lock:
            print(json.dumps({"tids": list(tids)}), flush=True)


if __name__ == "__main__":
    main()
