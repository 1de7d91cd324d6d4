"""How many intra-op threads a run computes on: the cores free at its start, read from `/proc` before torch
loads.

Two threads on two cores beside one busy process ran a tango step 3.5x slower than alone, because every
parallel region waits for the thread that shares its core; one thread ran it 1.7x slower, the fair share.
So a run started as one process, with neither `OMP_NUM_THREADS` nor `train.threads` set, samples for
about two seconds how much CPU other processes use on the cores it may run on (its affinity; `/proc/stat`'s
per-core counters less its own `/proc/self/stat` time, so its own earlier work never counts) and takes the
rest, at least one. When it leaves a core to another process it also sets `OMP_WAIT_POLICY=PASSIVE`, so its
threads sleep rather than spin against that process. The choice and its reason are printed once and kept in
`env.json`; a resumed run replays the count it recorded there.
"""
from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import Callable

SAMPLE_SECONDS = 2.0


@dataclass(frozen=True)
class Threads:
    count: int
    reason: str
    wait_policy: str | None = None  # the OMP_WAIT_POLICY this choice sets, where it sets one


def read_core_jiffies(cores: set[int], path: str = "/proc/stat") -> int:
    """The busy time (user, nice, system, irq, softirq, steal; in clock ticks) of the cores in `cores`."""
    total = 0
    with open(path, encoding="ascii") as f:
        for line in f:
            name, *fields = line.split()
            if name.startswith("cpu") and name[3:].isdigit() and int(name[3:]) in cores:
                user, nice, system, _idle, _iowait, irq, softirq, steal = (int(x) for x in fields[:8])
                total += user + nice + system + irq + softirq + steal
    return total


def read_own_jiffies(path: str = "/proc/self/stat") -> int:
    """This process's own CPU time (utime + stime over all its threads, in clock ticks)."""
    with open(path, encoding="ascii") as f:
        fields = f.read().rsplit(")", 1)[1].split()  # the name in parentheses may hold spaces
    return int(fields[11]) + int(fields[12])  # fields 14 and 15 of proc(5), counted from the state


def busy_elsewhere(cores: set[int], seconds: float = SAMPLE_SECONDS, read_cores: Callable[[set[int]], int] = read_core_jiffies,
                   read_own: Callable[[], int] = read_own_jiffies, sleep: Callable[[float], None] = time.sleep,
                   clock: Callable[[], float] = time.monotonic, hz: int | None = None) -> float:
    """Cores' worth of CPU that other processes used on `cores` over about `seconds`."""
    return busy_during(lambda: sleep(seconds), cores, read_cores, read_own, clock, hz)[1]


def busy_during(work: Callable, cores: set[int] | None = None, read_cores: Callable[[set[int]], int] = read_core_jiffies,
                read_own: Callable[[], int] = read_own_jiffies, clock: Callable[[], float] = time.monotonic,
                hz: int | None = None) -> tuple:
    """(`work()`'s result, the cores' worth of CPU other processes used on `cores`, this process's affinity by
    default, while it ran): what timed work shared its cores with. The load is None where /proc is not readable."""
    cores = allowed_cores() if cores is None else cores
    try:
        hz = hz or os.sysconf("SC_CLK_TCK")
        cores0, own0, t0 = read_cores(cores), read_own(), clock()
    except (OSError, ValueError):
        return work(), None
    result = work()
    try:
        cores1, own1, t1 = read_cores(cores), read_own(), clock()
    except (OSError, ValueError):
        return result, None
    return result, max(0.0, ((cores1 - cores0) - (own1 - own0)) / hz / max(t1 - t0, 1e-9))


def busy_note(busy: float | None, cores: int) -> str | None:
    """`cotrain check`'s line beside its estimate when other processes kept half a core or more busy while it
    timed the rollout (the estimate is then the shared machine's, slower than the machine alone)."""
    if busy is None or busy < 0.5:
        return None
    return (f"busy      other processes kept {busy:.1f} of the {cores} cores busy while the rollout was timed: "
            "a run on the machine alone is faster than estimated")


def free_cores(cores: int, busy: float) -> int:
    """The cores left when other processes keep `busy` cores' worth busy: a core counts as taken from half of
    one up (a 1-thread spin loop reads about 1.0; a shell, an editor or a browser tab reads a few hundredths)."""
    return max(1, cores - int(busy + 0.5))


def choose_threads(environ: dict, setting: int | None, replayed: int | None = None,
                   measure: Callable[[set[int]], float] = busy_elsewhere, affinity: set[int] | None = None) -> Threads:
    """The run's threads: `OMP_NUM_THREADS` if set, else `train.threads` (`setting`), else the count a resumed
    run recorded (`replayed`), else the cores of its affinity that other processes leave free."""
    if environ.get("OMP_NUM_THREADS"):
        return Threads(_count(environ["OMP_NUM_THREADS"]), f"OMP_NUM_THREADS={environ['OMP_NUM_THREADS']}")
    if setting:
        return Threads(setting, f"train.threads={setting}")
    if replayed:
        return Threads(replayed, f"{replayed} as the run's earlier part recorded in env.json")
    cores = affinity if affinity is not None else allowed_cores()
    try:
        busy = measure(cores)
    except (OSError, ValueError):  # no /proc (not Linux) or a format we do not know: every core
        return Threads(len(cores), f"all {len(cores)} cores (the load of other processes is not readable here)")
    free = free_cores(len(cores), busy)
    if free == len(cores):
        return Threads(free, f"all {len(cores)} cores: other processes used {busy:.2f} cores over {SAMPLE_SECONDS:g} s")
    policy = None if environ.get("OMP_WAIT_POLICY") else "PASSIVE"
    return Threads(free, f"{free} of {len(cores)} cores: other processes used {busy:.2f} cores over {SAMPLE_SECONDS:g} s"
                   + ("; OMP_WAIT_POLICY=PASSIVE, so idle threads sleep rather than spin" if policy else ""), policy)


def _count(text: str) -> int:
    try:
        return max(1, int(text.split(",")[0]))
    except ValueError:
        return 1


def allowed_cores() -> set[int]:
    """The cores this process may run on."""
    try:
        return set(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return set(range(os.cpu_count() or 1))


CHOSEN: Threads | None = None  # this process's choice, for env.json (`precision.machine`)


def chosen_line() -> str | None:
    """The line a run prints beside its precision, where this process chose its threads."""
    return f"threads: {CHOSEN.count} ({CHOSEN.reason})" if CHOSEN else None


def apply_threads(choice: Threads) -> None:
    """Set the choice before torch loads (the wait policy is read once, when OpenMP starts) and remember it."""
    global CHOSEN
    if choice.wait_policy:
        os.environ["OMP_WAIT_POLICY"] = choice.wait_policy
    import torch

    torch.set_num_threads(choice.count)
    CHOSEN = choice
