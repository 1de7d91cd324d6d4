"""A run's threads from the cores other processes leave free (cotrain.threads), against a stubbed load."""
from __future__ import annotations

import json
import os
import time

import pytest

from cotrain import threads
from cotrain.threads import Threads, busy_elsewhere, choose_threads, free_cores, read_core_jiffies, read_own_jiffies


def test_busy_elsewhere_is_the_cores_time_less_our_own():
    """Over 2 s at 100 ticks a second the two cores gain 500 busy ticks, 100 of them ours: (500 - 100) / 100 / 2
    = 2.0 cores' worth used by others."""
    cores, own, clock = iter([1000, 1500]), iter([40, 140]), iter([10.0, 12.0])
    busy = busy_elsewhere({0, 1}, 2.0, read_cores=lambda c: next(cores), read_own=lambda: next(own),
                          sleep=lambda s: None, clock=lambda: next(clock), hz=100)
    assert busy == pytest.approx(2.0)
    # our own work alone (all of the cores' ticks are ours) reads 0, never below
    cores, own, clock = iter([1000, 1300]), iter([0, 400]), iter([0.0, 2.0])
    assert busy_elsewhere({0, 1}, 2.0, read_cores=lambda c: next(cores), read_own=lambda: next(own),
                          sleep=lambda s: None, clock=lambda: next(clock), hz=100) == 0.0


@pytest.mark.parametrize("cores,busy,free", [(2, 0.0, 2), (2, 0.04, 2), (2, 0.49, 2), (2, 0.5, 1), (2, 1.0, 1),
                                             (2, 3.7, 1), (16, 2.6, 13), (1, 1.0, 1)])
def test_free_cores_takes_a_core_from_half_of_one_up(cores, busy, free):
    assert free_cores(cores, busy) == free


def test_the_choice_in_order_of_what_is_set():
    never = lambda cores: pytest.fail("measured although the count was set")  # noqa: E731
    assert choose_threads({"OMP_NUM_THREADS": "3"}, 5, 4, measure=never) == Threads(3, "OMP_NUM_THREADS=3")
    assert choose_threads({}, 5, 4, measure=never) == Threads(5, "train.threads=5")
    assert choose_threads({}, None, 4, measure=never).count == 4
    # one busy process on the other core: one thread, and threads that sleep rather than spin
    one = choose_threads({}, None, measure=lambda cores: 1.02, affinity={0, 1})
    assert (one.count, one.wait_policy) == (1, "PASSIVE") and "1 of 2 cores" in one.reason
    assert choose_threads({"OMP_WAIT_POLICY": "ACTIVE"}, None, measure=lambda c: 1.02, affinity={0, 1}).wait_policy is None
    # alone: every core, and the wait policy as it is
    alone = choose_threads({}, None, measure=lambda cores: 0.03, affinity={0, 1})
    assert (alone.count, alone.wait_policy) == (2, None) and "all 2 cores" in alone.reason

    def unreadable(cores):
        raise OSError("no /proc")
    assert choose_threads({}, None, measure=unreadable, affinity={0, 1, 2}).count == 3


def test_the_proc_files_are_read(tmp_path):
    stat = tmp_path / "stat"
    stat.write_text("cpu  9 9 9 9 9 9 9 9 0 0\ncpu0 10 1 5 100 7 2 3 4 0 0\ncpu1 20 0 0 50 0 0 0 0 0 0\n"
                    "cpu2 1000 0 0 0 0 0 0 0 0 0\nintr 5\n")
    # busy = user + nice + system + irq + softirq + steal; idle and iowait are not; cpu2 is not ours
    assert read_core_jiffies({0, 1}, str(stat)) == (10 + 1 + 5 + 2 + 3 + 4) + 20
    own = tmp_path / "self"
    own.write_text("77 (a name (with) spaces) R 1 77 77 0 -1 4194304 10 0 0 0 123 45 0 0 20 0 3 0 1 2 3\n")
    assert read_own_jiffies(str(own)) == 123 + 45
    # this machine's own files parse, and our CPU time grows as we compute
    assert read_core_jiffies(set(os.sched_getaffinity(0))) >= 0
    before, t = read_own_jiffies(), time.process_time()
    while time.process_time() - t < 0.3:
        pass
    assert read_own_jiffies() - before >= 0.1 * os.sysconf("SC_CLK_TCK")


def test_a_resumed_run_replays_the_count_in_its_env_json(tmp_path, monkeypatch):
    from cotrain import cli

    chosen = []
    monkeypatch.setattr(threads, "apply_threads", chosen.append)
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    (tmp_path / "env.json").write_text(json.dumps({"threads": 1}))
    cli._choose_threads(None, tmp_path)
    assert chosen[-1] == Threads(1, "1 as the run's earlier part recorded in env.json")
    cli._choose_threads(3, tmp_path)  # train.threads wins over the record
    assert chosen[-1] == Threads(3, "train.threads=3")
    (tmp_path / "env.json").write_text("{not json")  # an unreadable record: chosen afresh
    monkeypatch.setattr(threads, "choose_threads", lambda env, s, r: choose_threads(env, s, r, measure=lambda c: 0.0))
    cli._choose_threads(None, tmp_path)
    assert "cores" in chosen[-1].reason


def test_a_run_says_its_threads_beside_its_precision_and_keeps_them(tmp_path, monkeypatch, capsys):
    from conftest import nano_config

    from cotrain.config import build_config
    from cotrain.recipes import sft

    monkeypatch.setattr(threads, "CHOSEN", Threads(1, "1 of 2 cores: a stand-in reason"))
    sft.run(build_config(nano_config("sft", train={"steps": 1}, checkpoint={"every": 0}, eval={"n": 2, "k": 0})), tmp_path)
    err = capsys.readouterr().err.splitlines()
    said = [i for i, line in enumerate(err) if line.startswith(("threads:", "precision:"))]
    assert [err[i].split(":")[0] for i in said] == ["threads", "precision"], err
    assert err[said[0]] == "threads: 1 (1 of 2 cores: a stand-in reason)"
    assert json.loads((tmp_path / "env.json").read_text())["threads_reason"] == "1 of 2 cores: a stand-in reason"


def test_the_load_beside_timed_work_and_check_s_note_on_it():
    """`busy_during` measures what other processes used while the work ran (the cores' time less this process's
    own), and `cotrain check` notes a load of half a core or more beside its estimate."""
    cores, own, now = iter([1000, 1000 + 300]), iter([50, 50 + 100]), iter([10.0, 12.0])
    result, busy = threads.busy_during(lambda: "done", {0, 1}, read_cores=lambda c: next(cores),
                                       read_own=lambda: next(own), clock=lambda: next(now), hz=100)
    assert result == "done" and busy == pytest.approx((300 - 100) / 100 / 2.0)  # 1.0 core of others

    def unreadable(_cores):
        raise OSError("no /proc here")

    assert threads.busy_during(lambda: 7, {0}, read_cores=unreadable) == (7, None)
    assert threads.busy_note(None, 2) is None and threads.busy_note(0.4, 2) is None
    note = threads.busy_note(1.0, 2)
    assert note.startswith("busy      other processes kept 1.0 of the 2 cores busy") and "faster than estimated" in note
