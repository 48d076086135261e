"""glibc malloc settings for a broker process: keep large request buffers on the heap.

A produce request, a follower's fetch response or a fetch of a consumer is read into one buffer of
up to a megabyte or more. glibc serves such sizes with a fresh mmap (its threshold adapts only up
to the largest block freed so far, and the heap's top is trimmed back to the kernel at 128 KiB),
so every request's buffer is new memory whose pages fault in as the bytes arrive and are unmapped
when it is freed: measured on the 2-core development VM, allocating and filling a 1 MiB buffer
cost ~1,000-1,600 us that way against ~50 us from the heap. This sets the two thresholds once at
start (``mallopt``), as Kafka's JVM sizes its heap once: allocations below M_MMAP_THRESHOLD come
from the heap, and freed heap memory is kept for the next request up to M_TRIM_THRESHOLD before it
goes back to the kernel. The price is RSS: up to that much freed memory stays mapped in a busy
broker. Off with ``kbroker.malloc.tuning=false``; nothing happens where libc has no mallopt (not glibc).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging

log = logging.getLogger("broker.malloc_tuning")

# mallopt(3) parameter numbers (glibc's malloc.h).
M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3
# glibc's largest allowed mmap threshold on 64-bit (HEAP_MAX_SIZE / 2): requests of at most this
# size come from the heap. Larger frames (socket.request.max.bytes allows 100 MiB) still get mmap.
MMAP_THRESHOLD_BYTES = 32 << 20
# Freed memory at the heap's top kept for reuse: a few requests' worth in flight.
TRIM_THRESHOLD_BYTES = 128 << 20


def tune_malloc() -> bool:
    """Apply the thresholds; True if libc took them."""
    name = ctypes.util.find_library("c")
    if name is None:
        return False
    mallopt = getattr(ctypes.CDLL(name), "mallopt", None)
    if mallopt is None:
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    ok = mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES) == 1 and mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD_BYTES) == 1
    if not ok:
        log.info("malloc tuning not applied (this libc refused mallopt)")
    return ok
