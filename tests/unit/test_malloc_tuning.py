"""kbroker.malloc.tuning: with glibc's thresholds set at start, request-sized buffers (about 1 MiB, a
few in flight, of mixed sizes) freed and allocated again are reused from the heap instead of being
mapped and faulted in anew each time (broker/malloc_tuning.py). Measured in child processes by
their minor page faults."""

from __future__ import annotations

import subprocess
import sys

import pytest

# Requests of mixed sizes, a few in flight at a time, as a broker reads them.
CHILD = """
import resource, sys
if sys.argv[1] == "1":
    from broker.malloc_tuning import tune_malloc
    assert tune_malloc()
sizes = [1 << 20, 700 << 10, 1200 << 10, 300 << 10, 900 << 10]
data = b"x" * (2 << 20)
live = []
def step(i):
    n = sizes[i % len(sizes)]
    b = bytearray(n); b[:] = data[:n]; live.append(b)
    if len(live) > 3: live.pop(0)
for i in range(20): step(i)
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for i in range(200): step(i)
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


def _faults(tuned: bool) -> int:
    out = subprocess.run([sys.executable, "-c", CHILD, "1" if tuned else "0"], check=True, capture_output=True,
                         text=True, timeout=120)
    return int(out.stdout.strip())


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc mallopt")
def test_tuned_malloc_reuses_request_sized_buffers() -> None:
    untuned, tuned = _faults(False), _faults(True)
    # Untuned, each buffer is a fresh mapping whose pages fault in (~110 faults apiece here);
    # tuned, freed heap blocks come back.
    assert untuned > 200 * 20, untuned
    assert tuned < untuned // 20, (tuned, untuned)

