"""heap.trim on this process's real glibc heap, in a child so the test's own heap
is neither the measure nor changed."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

from parlschedd.host import heap

pytestmark = pytest.mark.skipif(not heap.trimmable(), reason="needs glibc's malloc_trim")

# 40 MiB in blocks of 4000 bytes (malloc's, not pymalloc's, and below the mmap threshold),
# all freed but the last, which keeps the free run from being the heap's top: free()
# alone gives none of it back
FRAGMENTED_CHILD = textwrap.dedent("""
    import json, sys
    import psutil
    from parlschedd.host import heap

    def heap_rss():
        return sum(m.rss for m in psutil.Process().memory_maps() if m.path == "[heap]")

    blocks = [bytes(4000) for _ in range(10_000)]
    last = blocks[-1]
    del blocks
    before = heap_rss()
    trimmed = heap.trim()
    print(json.dumps({"before": before, "after": heap_rss(), "trimmed": trimmed}))
""")


def test_trim_returns_the_free_pages_inside_the_heap() -> None:
    done = subprocess.run([sys.executable, "-c", FRAGMENTED_CHILD], capture_output=True, text=True, check=True)
    measured = json.loads(done.stdout)
    assert measured["before"] > 40 * 2**20  # free() kept the 40 MiB freed below a live block
    assert measured["trimmed"] is True
    assert measured["before"] - measured["after"] > 35 * 2**20
