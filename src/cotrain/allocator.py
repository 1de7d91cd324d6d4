"""The C allocator's settings for a training process on Linux (glibc's `mallopt`).

A training step allocates and frees tensors of a few megabytes by the thousand: activations, their
gradients, casts. glibc returns freed memory at the top of its heap to the system once it passes the trim
threshold, and serves requests above the mmap threshold with a fresh mapping, so the next tensor of that size
faults its pages in again, one page at a time. With the threshold high and the heap kept, a step reuses the
memory it has already touched: on SmolLM2-135M under bf16 autocast a micro-batch's forward and backward
took 8% less time (bench/README.md, "The allocator"). The memory a process holds stays near its peak, which
it reached anyway.

`tune` sets this once per process, where the C library is glibc and nobody has set `MALLOC_*` in the
environment; `COTRAIN_MALLOC=system` leaves the allocator as it is.
"""
from __future__ import annotations

import ctypes
import os
import sys

M_TRIM_THRESHOLD, M_TOP_PAD, M_MMAP_THRESHOLD = -1, -2, -3
SETTINGS = {M_MMAP_THRESHOLD: 32 << 20, M_TRIM_THRESHOLD: 1 << 30, M_TOP_PAD: 256 << 20}
"""mmap threshold 32 MiB (glibc's largest: requests above it are still mapped afresh), trim threshold 1 GiB,
256 MiB more each time the heap grows."""
DESCRIPTION = "glibc mallopt: mmap threshold 32 MiB, trim threshold 1 GiB, top pad 256 MiB"

TUNED: str | None = None
"""What `tune` did in this process (for env.json), or None before it ran."""


def _glibc():
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(None)
    except OSError:
        return None
    return libc if hasattr(libc, "gnu_get_libc_version") else None  # glibc alone has it (musl does not)


def tune(environ=os.environ) -> str:
    """Set `SETTINGS` once per process where it applies; returns (and keeps in `TUNED`) what was done."""
    global TUNED
    if TUNED is not None:
        return TUNED
    if environ.get("COTRAIN_MALLOC") == "system":
        TUNED = "as the system has it (COTRAIN_MALLOC=system)"
    elif any(k.startswith("MALLOC_") for k in environ):
        TUNED = "as the environment's MALLOC_* settings have it"
    elif (libc := _glibc()) is None:
        TUNED = "as the system has it (not glibc)"
    else:
        # in this order: the trim threshold alone, with the mmap threshold left where it was, maps more afresh
        done = all(libc.mallopt(key, value) == 1 for key, value in SETTINGS.items())
        TUNED = DESCRIPTION if done else "partly as the system has it (mallopt refused a setting)"
    return TUNED
