"""Running untrusted code: each program in a sandbox it cannot escape, its verdict decided outside it.

A program is Python source that defines a function; a run calls that function once on each of a list of
inputs and returns what each call gave. Expected outputs never enter the sandbox: the trusted parent
compares them (`passed`), so nothing a program prints, no early `sys.exit(0)` or `os._exit`, no patched
`assert` or harness can turn a wrong answer into a pass. To fake a pass it must return the right value.

Isolation, strongest first (`isolation()` says which is in use):
  bubblewrap  `bwrap`: new user, PID, network, IPC and UTS namespaces; a filesystem of the Python
              install and /usr read-only, a private size-limited /tmp, nothing else (no project files,
              no home, no data); no network; everything it starts dies with it (PID namespace, parent
              death signal).
  rlimits     the resource limits alone, in a temporary directory, with a warning (no filesystem or
              network isolation): only where bubblewrap is missing. `make install` installs it.
Both add resource limits: CPU seconds, address space, processes (a dedicated user per pool slot when
run as root), file size (also the cap on captured output), no core dumps; and a wall-clock limit after
which the whole process group is killed.

Limits are set well above what a correct program needs (a call of the tiny code world takes
microseconds; the defaults allow seconds), so verdicts do not depend on the machine's speed.
"""
from __future__ import annotations

import ast
import builtins
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import warnings
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

SANDBOX_UID = 61000
"""Under root, pool slot k runs its programs as user SANDBOX_UID + k, so that the process limit counts
that slot's processes alone."""

_HARNESS = r'''
import json, os, random, sys
def main():
    job = json.load(open(sys.argv[1]))
    results = os.fdopen(os.dup(1), "w")   # the results channel: the program's own prints go to stderr
    os.dup2(2, 1)
    def say(row):
        results.write(json.dumps(row) + "\n")
        results.flush()
    namespace = {"__name__": "__main__"}
    try:
        exec(compile(job["code"], "<program>", "exec"), namespace)
        function = namespace[job["entry"]]
    except BaseException as e:
        say({"load_error": type(e).__name__ + ": " + str(e)[:200]})
        return
    say({"loaded": True})
    if job.get("test") is not None:       # record every call the test makes; the parent replays them
        def candidate(*args, **kwargs):
            key = repr((args, kwargs))
            try:
                value = function(*args, **kwargs)
            except BaseException as e:
                say({"key": key, "raise": type(e).__name__})
                raise
            say({"key": key, "value": repr(value)})
            return value
        scope = dict(namespace)             # the test's own calls by name are recorded too,
        scope[job["entry"]] = candidate     # the program's calls of itself are not
        try:
            exec(compile(job["test"], "<test>", "exec"), scope)
            random.seed(0)
            scope[job.get("check", "check")](candidate)
        except BaseException as e:
            say({"test_error": type(e).__name__})
        return
    for args in job["inputs"]:
        try:
            value = function(*args)
            try:
                say({"ok": True, "value": json.loads(json.dumps(value))})
            except (TypeError, ValueError):
                say({"ok": True, "repr": repr(value)[:1000]})
        except BaseException as e:
            say({"ok": False, "error": type(e).__name__})
main()
'''


@dataclass(frozen=True)
class Limits:
    """What one program may use. Defaults are far above what a correct program of the code tasks needs."""

    wall_s: float = 10.0          # wall-clock seconds for the whole run (all its calls)
    cpu_s: int = 5                # CPU seconds
    memory_mb: int = 512          # address space
    processes: int = 64           # processes of the program's user (threads count too; exiting ones a while)
    file_mb: int = 8              # largest file it may write, and the cap on captured output
    tmp_mb: int = 32              # size of its private /tmp (bubblewrap)


@dataclass
class Run:
    """The outcome of one program on its inputs.

    Attributes:
        status: "ok" (every call returned or raised), "load_error" (the source did not define the
            function), "timeout" (wall or CPU limit), "memory", "output_limit" (it wrote more than
            `file_mb`), "crash" (it died otherwise, or ended before answering every call), or
            "sandbox_error" (the sandbox could not start it, `START_RETRIES` times: not the program's doing).
        outputs: per input, {"ok": True, "value": v} (or "repr" for a value JSON cannot hold),
            {"ok": False, "error": name} for a call that raised, or None for a call never answered.
        detail: a short reason (the load error, the signal, the tail of stderr).
        wall_s: seconds the run took.
        retries: the times it was started again because the sandbox could not start it.
    """

    status: str
    outputs: list = field(default_factory=list)
    detail: str = ""
    wall_s: float = 0.0
    retries: int = 0


START_RETRIES = 4
"""Times a program the sandbox could not start (bubblewrap refused to create its namespaces) is started
again, each after the processes of the sandbox's user are gone (a fork bomb's processes linger a moment
after it is killed, and count against the process limit that namespace creation needs): a program that
never started is never graded as the program's failure. Past these, its status is "sandbox_error"."""

RETRIES = {"starts": 0, "failed": 0}
"""Programs started again since the process began, and programs that never started (read by the
recipes that run code: `sandbox/retries`)."""


def isolation() -> str:
    """"bubblewrap" where `bwrap` is installed and works, else "rlimits"."""
    return "bubblewrap" if _bwrap() else "rlimits"


_BWRAP_OK: bool | None = None


def _bwrap() -> str | None:
    global _BWRAP_OK
    path = shutil.which("bwrap")
    if path is None:
        return None
    if _BWRAP_OK is None:
        user = SANDBOX_UID if os.geteuid() == 0 else None
        probe = subprocess.run([path, *_bwrap_args(None), _python(), "-I", "-S", "-c", "pass"], capture_output=True,
                               timeout=60, env={}, user=user, group=user, extra_groups=[] if user is not None else None)
        _BWRAP_OK = probe.returncode == 0
    return path if _BWRAP_OK else None


def _bwrap_args(job_dir: str | None, tmp_mb: int = 32) -> list[str]:
    args = ["--unshare-all", "--die-with-parent", "--new-session", "--ro-bind", "/usr", "/usr"]
    for top in ("/bin", "/lib", "/lib64", "/sbin"):
        if os.path.islink(top):
            args += ["--symlink", os.readlink(top), top]
        elif os.path.isdir(top):
            args += ["--ro-bind", top, top]
    prefix = os.path.dirname(os.path.dirname(_python()))
    if not prefix.startswith("/usr"):
        args += ["--ro-bind", prefix, prefix]
    args += ["--proc", "/proc", "--dev", "/dev", "--size", str(tmp_mb << 20), "--tmpfs", "/tmp", "--chdir", "/tmp"]
    if job_dir is not None:
        args += ["--ro-bind", job_dir, "/job"]
    return args


def _python() -> str:
    # A Python 3 under /usr where there is one (the sandbox user may not read the installation running
    # cotrain: a home directory's pyenv, say), else the interpreter running cotrain, by its real path.
    for candidate in (f"/usr/bin/python{sys.version_info[0]}.{sys.version_info[1]}", "/usr/bin/python3"):
        if os.path.exists(candidate):
            return os.path.realpath(candidate)
    return os.path.realpath(sys.executable)


def run_program(code: str, entry: str, inputs: list[list], limits: Limits = Limits(), slot: int = 0,
                test: str | None = None) -> Run:
    """Run `code`, then call its function `entry` on each input (a list of positional arguments); with
    `test` (source defining `check(candidate)`), run that instead and record every call it makes of the
    function (`run_tests` replays them). Never raises on anything the program does."""
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="cotrain-sandbox-") as tmp:
        job_dir = os.path.join(tmp, "job")
        os.mkdir(job_dir)
        with open(os.path.join(job_dir, "job.json"), "w") as f:
            json.dump({"code": code, "entry": entry, "inputs": inputs, "test": test}, f)
        with open(os.path.join(job_dir, "harness.py"), "w") as f:
            f.write(_HARNESS)
        os.chmod(tmp, 0o755)
        for name in ("job.json", "harness.py"):
            os.chmod(os.path.join(job_dir, name), 0o644)
        bwrap = _bwrap()
        python = [_python(), "-I", "-S", "-B"]
        if bwrap:
            command = [bwrap, *_bwrap_args(job_dir, limits.tmp_mb), *python, "/job/harness.py", "/job/job.json"]
            cwd = None
        else:
            warnings.warn("cotrain.sandbox: bubblewrap (bwrap) is not installed: untrusted code runs with resource "
                          "limits only, without filesystem or network isolation", stacklevel=2)
            work = os.path.join(tmp, "work")
            os.mkdir(work)
            os.chmod(work, 0o777)
            command = [*python, os.path.join(job_dir, "harness.py"), os.path.join(job_dir, "job.json")]
            cwd = work
        out_path, err_path = os.path.join(tmp, "stdout"), os.path.join(tmp, "stderr")
        user = SANDBOX_UID + slot if os.geteuid() == 0 else None
        for retries in range(START_RETRIES + 1):
            if retries:  # the sandbox could not start it: wait for its user's last processes to go, then again
                RETRIES["starts"] += 1
                _wait_for_processes(user, 0.05 * 2 ** retries)
            started = _start(command, limits, user, cwd, out_path, err_path)
            if isinstance(started, str):  # not even spawned
                return Run("crash", [None] * len(inputs), started, time.monotonic() - t0, retries)
            returncode, timed_out = started
            flooded = max(os.path.getsize(out_path), os.path.getsize(err_path)) >= limits.file_mb << 20
            stdout = _read_head(out_path, limits.file_mb << 20)
            stderr = _read_tail(err_path, 2000)
            if not _not_started(returncode, stdout, stderr):
                break
        else:
            RETRIES["failed"] += 1
            return Run("sandbox_error", [None] * len(inputs), f"the sandbox could not start it {START_RETRIES + 1} times: "
                       f"{stderr.strip().splitlines()[-1][:200] if stderr.strip() else returncode}",
                       time.monotonic() - t0, retries)
    run = (_recorded(returncode, timed_out, flooded, stdout, stderr, time.monotonic() - t0) if test is not None
           else _verdict(returncode, timed_out, flooded, stdout, stderr, len(inputs), time.monotonic() - t0))
    run.retries = retries
    return run


def _start(command: list[str], limits: Limits, user: int | None, cwd: str | None, out_path: str,
           err_path: str) -> tuple[int, bool] | str:
    """Run `command` under the limits to its end or its wall-clock limit (its whole process group killed
    then): (return code, timed out), or why it could not even be spawned."""
    with open(out_path, "wb") as out, open(err_path, "wb") as err:
        try:
            proc = subprocess.Popen(_limited(command, limits, user is not None), stdin=subprocess.DEVNULL,
                                    stdout=out, stderr=err, cwd=cwd, env={"PATH": "/usr/bin:/bin", "PYTHONHASHSEED": "0"},
                                    start_new_session=True, user=user, group=user,
                                    extra_groups=[] if user is not None else None, close_fds=True)
        except OSError as e:
            return f"could not start: {e}"
        timed_out = False
        try:
            proc.wait(timeout=limits.wall_s)
        except subprocess.TimeoutExpired:
            timed_out = True
        _kill_group(proc)
    return proc.returncode, timed_out


def _not_started(returncode: int, stdout: str, stderr: str) -> bool:
    """Whether the sandbox itself failed before the program ran: bubblewrap (or prlimit) exited with its
    own complaint and the harness never wrote a line (it writes one as soon as the program is loaded)."""
    lines = stderr.strip().splitlines()
    return returncode != 0 and not stdout.strip() and bool(lines) and lines[-1].startswith(("bwrap:", "prlimit:"))


def _wait_for_processes(user: int | None, pause: float, timeout: float = 10.0) -> None:
    """Sleep `pause`, then until `user` has no process left (at most `timeout` seconds; without a user of
    the sandbox's own, the pause alone)."""
    time.sleep(pause)
    deadline = time.monotonic() + timeout
    while user is not None and _count_processes(user) and time.monotonic() < deadline:
        time.sleep(0.02)


def run_many(jobs: list[tuple[str, str, list[list]]], limits: Limits = Limits(), workers: int | None = None) -> list[Run]:
    """`run_program` on each (code, entry, inputs), `workers` at a time (default: the CPU count), in order.
    One slow or crashing program holds one slot until its wall-clock limit, never the run."""
    workers = max(1, workers or os.cpu_count() or 1)
    slots = list(range(workers))
    lock = threading.Lock()

    def one(job):
        with lock:
            slot = slots.pop()
        try:
            return run_program(*job, limits=limits, slot=slot)
        finally:
            with lock:
                slots.append(slot)

    with ThreadPoolExecutor(max_workers=workers) as pool:
        return list(pool.map(one, jobs))


def passed(run: Run, expected: list) -> list[bool]:
    """Per input, whether the call returned the expected value (compared in the trusted parent, after
    the same JSON round trip the outputs took)."""
    out = []
    for got, want in zip(run.outputs + [None] * (len(expected) - len(run.outputs)), expected):
        try:
            want = json.loads(json.dumps(want))
        except (TypeError, ValueError):
            out.append(False)
            continue
        out.append(bool(got and got.get("ok") and "value" in got and got["value"] == want
                        and type(got["value"]) is type(want)))
    return out


def run_tests(code: str, entry: str, test: str, context: str = "", limits: Limits = Limits(), slot: int = 0) -> Run:
    """Whether `code` passes a test suite written as assertions, `check(candidate)` (HumanEval's form),
    with the verdict decided outside the sandbox. Never raises on anything the program does.

    The sandbox runs the test against the program and records each call of `entry` the test makes:
    its arguments, and the value returned (as `repr`) or the exception raised. The parent then runs the
    same test (trusted code: `context`, e.g. the task's prompt with its helper functions, then `test`)
    against a stand-in that answers each call from the record, read with `ast.literal_eval`. The
    program's only way to pass is thus to have returned the right values; a call the record lacks fails.
    The test's calls of `entry` by name count as calls of the candidate (in both runs). Both runs seed
    `random` with 0 before `check`.

    Returns:
        The Run; `status` "ok" when the replayed test passed, "failed" when it did not, or the
        sandbox's status when the program did not run to the end ("timeout", "memory", ...).
        `detail` says why.
    """
    run = run_program(code, entry, [], limits, slot, test=test)
    if run.status != "recorded":
        return run
    calls: dict[str, list[dict]] = {}
    for row in run.outputs:
        calls.setdefault(row["key"], []).append(row)
    namespace: dict = {"__name__": "__cotrain_replay__"}

    def candidate(*args, **kwargs):
        queue = calls.get(repr((args, kwargs)))
        if not queue:
            raise _Unrecorded(repr((args, kwargs))[:200])
        row = queue.pop(0)
        if "raise" in row:
            error = getattr(builtins, row["raise"], None)
            raise error() if isinstance(error, type) and issubclass(error, Exception) else _Unrecorded(row["raise"])
        return ast.literal_eval(row["value"])

    state = random.getstate()  # the replay seeds the global generator: leave it as the caller had it
    try:
        exec(compile(context + "\n" + test, "<test>", "exec"), namespace)  # trusted: the task's own text
        namespace[entry] = candidate
        random.seed(0)
        namespace.get("check", lambda c: None)(candidate)
    except _Unrecorded as e:
        return Run("failed", [], f"a call the program did not answer: {e}", run.wall_s)
    except (AssertionError, Exception) as e:
        return Run("failed", [], f"{type(e).__name__}: {str(e)[:200]}", run.wall_s)
    finally:
        random.setstate(state)
    return Run("ok", [], "passed", run.wall_s)


class _Unrecorded(Exception):
    """The replayed test made a call the program's record does not answer."""


# ----------------------------------------------------------------------------- internals


def _limited(command: list[str], limits: Limits, own_user: bool) -> list[str]:
    # The resource limits, set by util-linux `prlimit` before it execs the command (no code runs in
    # the parent's forked child: the pool's threads make preexec functions unsafe). Without a user of
    # its own, the process limit counts every process of the caller's user: leave room above them.
    processes = limits.processes if own_user else _count_processes(os.getuid()) + limits.processes
    prlimit = shutil.which("prlimit")
    if prlimit is None:
        raise RuntimeError("cotrain.sandbox needs util-linux's prlimit")
    return [prlimit, f"--cpu={limits.cpu_s}:{limits.cpu_s + 1}", f"--as={limits.memory_mb << 20}", f"--nproc={processes}",
            f"--fsize={limits.file_mb << 20}", "--core=0", "--nofile=64", "--", *command]


def _count_processes(uid: int) -> int:
    count = 0
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                if os.stat(f"/proc/{pid}").st_uid == uid:
                    count += 1
            except OSError:
                pass
    return count


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    proc.wait()


def _read_head(path: str, limit: int) -> str:
    with open(path, "rb") as f:
        return f.read(limit).decode("utf-8", "replace")


def _read_tail(path: str, limit: int) -> str:
    with open(path, "rb") as f:
        f.seek(max(0, os.path.getsize(path) - limit))
        return f.read().decode("utf-8", "replace")


def _recorded(returncode: int, timed_out: bool, flooded: bool, stdout: str, stderr: str, wall: float) -> Run:
    # The record of a test run: "recorded" (the test ran to its end in the sandbox, passing or not)
    # with the call rows, or the status that stopped it.
    rows = _rows(stdout)
    if rows and "load_error" in rows[0]:
        return Run("load_error", [], str(rows[0]["load_error"]), wall)
    base = _verdict(returncode, timed_out, flooded, "", stderr, 0, wall)
    if base.status in ("timeout", "output_limit", "memory"):
        return base
    calls = [r for r in rows if isinstance(r.get("key"), str) and ("value" in r and isinstance(r["value"], str) or
                                                                   "raise" in r and isinstance(r["raise"], str))]
    return Run("recorded", calls, base.detail, wall)


def _rows(stdout: str) -> list[dict]:
    rows = []
    for line in stdout.split("\n"):
        try:
            row = json.loads(line)
        except ValueError:
            continue
        if isinstance(row, dict):
            rows.append(row)
    return rows


def _verdict(returncode: int, timed_out: bool, flooded: bool, stdout: str, stderr: str, n: int, wall: float) -> Run:
    # Python ignores SIGXFSZ: a write past the file-size limit raises instead, so a full output file
    # (`flooded`) is what tells an output flood.
    rows = _rows(stdout)
    loaded = bool(rows) and rows[0].get("loaded") is True
    if rows and "load_error" in rows[0]:
        return Run("load_error", [None] * n, str(rows[0]["load_error"]), wall)
    outputs = [r if isinstance(r, dict) and "ok" in r else None for r in rows[1:1 + n]] if loaded else []
    outputs += [None] * (n - len(outputs))
    errors = {o.get("error") for o in outputs if o and not o.get("ok")}
    tail = stderr[-300:].strip()
    # killed by a signal: a negative code directly, 128 + signal through bubblewrap
    killed = -returncode if returncode < 0 else returncode - 128 if returncode > 128 else 0
    if timed_out or killed == signal.SIGXCPU:
        status = "timeout"
    elif flooded or killed == signal.SIGXFSZ:
        status = "output_limit"
    elif "MemoryError" in errors or "MemoryError" in tail:
        status = "memory"
    elif returncode == 0 and all(o is not None for o in outputs):
        status = "ok"
    else:
        status = "crash"
    detail = f"exit {returncode}" + (f"; {tail.splitlines()[-1][:200]}" if tail else "")
    return Run(status, outputs, detail, wall)
