"""The hostile suite: programs that try to escape, exhaust, fool or outlive the sandbox
(cotrain.sandbox). Each must end with the right verdict, reach nothing outside, leave the parent alive
and the machine clean. These tests fail, never skip, where bubblewrap is missing: `make install`
installs it."""
import glob
import os
import shutil
import tempfile
import time
import uuid
from pathlib import Path

import pytest

from cotrain import sandbox

REPO = Path(__file__).resolve().parents[1]
FAST = sandbox.Limits(wall_s=2.0, cpu_s=1)
ADD_ONE = "def f(x):\n    return x + 1\n"


def run(code: str, inputs=((1,),), limits=FAST) -> sandbox.Run:
    return sandbox.run_program(code, "f", [list(i) for i in inputs], limits)


def values(result: sandbox.Run) -> list:
    return [o.get("value") if o else None for o in result.outputs]


# this module's sandbox users, one range per pytest-xdist worker, apart from those of other test files
TEST_UID = 61500 + 100 * int(os.environ.get("PYTEST_XDIST_WORKER", "gw0")[2:] or 0)


def sandbox_processes(where: Path) -> list[str]:
    """Processes of this module's sandbox users (root), or started on a job under `where`, that can
    still run code. Left out: zombies, and processes whose memory is already released (an empty
    command line): dead, they wait to be reaped. bubblewrap's own intermediate processes end so, and
    this machine's init reaps them within seconds, more under load."""
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            uid = os.stat(f"/proc/{pid}").st_uid
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            state = Path(f"/proc/{pid}/status").read_text()
        except OSError:
            continue
        if "\nState:\tZ" in state or "\nState:\tX" in state or not cmd.strip():
            continue
        if TEST_UID <= uid < TEST_UID + 64 or str(where) in cmd:
            found.append(f"{pid} {uid} {cmd[:80]}")
    return found


@pytest.fixture(autouse=True)
def machine_left_clean(monkeypatch, tmp_path_factory):
    """Each test's runs use their own users and their own temporary directory (one the sandbox users
    may enter); after the test, none of their processes is alive and none of their directories is left."""
    # pytest's own base directory first: made lazily under tempfile's directory, it would otherwise land in
    # this test's, which is removed after it (later tests of a one-process run then lost their tmp_path)
    tmp_path_factory.getbasetemp()
    where = Path(tempfile.mkdtemp(prefix="cotrain-sandbox-test-"))
    os.chmod(where, 0o755)
    monkeypatch.setattr(sandbox, "SANDBOX_UID", TEST_UID)
    monkeypatch.setattr(tempfile, "tempdir", str(where))
    try:
        yield
        deadline = time.monotonic() + 20  # under load, a killed PID namespace takes seconds to go
        while sandbox_processes(where) and time.monotonic() < deadline:  # killed processes take a moment to go
            time.sleep(0.05)
        assert sandbox_processes(where) == [], "a sandboxed process outlived its run"
        assert not list(where.glob("cotrain-sandbox-*")), "a run left its directory behind"
    finally:
        shutil.rmtree(where, ignore_errors=True)


def test_bubblewrap_is_in_use():
    assert sandbox.isolation() == "bubblewrap", "install bubblewrap (`make install` does: apt-get install bubblewrap)"


def test_a_correct_program_passes_far_inside_its_limits():
    result = run(ADD_ONE, [(1,), (2,), (-5,)])
    assert result.status == "ok" and sandbox.passed(result, [2, 3, -4]) == [True, True, True]
    assert sandbox.passed(result, [2, 3, 0]) == [True, True, False]
    assert result.wall_s < FAST.wall_s / 4  # verdicts do not hang on the machine's speed
    assert sandbox.passed(run("def f(x):\n    return [x, (x, 'a')]\n"), [[1, [1, "a"]]]) == [True]
    assert sandbox.passed(run("def f(x):\n    return 2.0\n"), [2]) == [False]  # types compared too


def test_errors_in_the_program_are_verdicts():
    assert run("def f(x) return").status == "load_error"
    assert run("def g(x):\n    return x\n").status == "load_error"  # no function f
    result = run("def f(x):\n    return 1 // x\n", [(1,), (0,), (2,)])
    assert result.status == "ok" and result.outputs[1] == {"ok": False, "error": "ZeroDivisionError"}
    assert sandbox.passed(result, [1, 0, 0]) == [True, False, True]


# ----------------------------------------------------------------------------- exhaustion


def test_infinite_loop():
    result = run("def f(x):\n    while True:\n        pass\n")
    assert result.status == "timeout" and sandbox.passed(result, [2]) == [False]


def test_sleep_past_the_wall_clock():
    result = run("import time\ndef f(x):\n    time.sleep(60)\n    return x + 1\n")
    assert result.status == "timeout" and result.wall_s < FAST.wall_s + 2


def test_fork_bomb():
    code = ("import os\ndef f(x):\n    while True:\n        try:\n            os.fork()\n"
            "        except OSError:\n            pass\n")
    result = run(code)
    assert result.status in ("timeout", "crash") and sandbox.passed(result, [2]) == [False]


def test_memory_bomb():
    # the default time limits: filling 512 MB took past FAST's 1 CPU second on a loaded 2-core AMD EPYC,
    # and this test is about the memory limit, which must come first
    result = run("def f(x):\n    a = []\n    while True:\n        a.append(bytearray(10 ** 7))\n",
                 limits=sandbox.Limits())
    assert result.status == "memory" and sandbox.passed(result, [2]) == [False]


def test_recursion_bomb():
    result = run("import sys\nsys.setrecursionlimit(10 ** 7)\ndef f(x):\n    return f(x) + 1\n")
    assert result.status in ("crash", "memory", "timeout", "ok") and sandbox.passed(result, [2]) == [False]


def test_disk_fill_stays_in_its_small_private_tmp():
    code = ("import os\ndef f(x):\n    n = 0\n    try:\n        while True:\n"
            "            with open(f'/tmp/fill{n}', 'wb') as h:\n                h.write(b'0' * (1 << 20))\n"
            "            n += 1\n    except OSError:\n        return n\n")
    result = run(code)
    written_mb = values(result)[0]
    assert written_mb is not None and written_mb <= FAST.tmp_mb, result
    assert not glob.glob("/tmp/fill*")


def test_output_flood():
    result = run("def f(x):\n    while True:\n        print('x' * 10000)\n")
    assert result.status == "output_limit" and sandbox.passed(result, [2]) == [False]


# ----------------------------------------------------------------------------- escape


def test_no_network():
    code = ("import socket\ndef f(x):\n    for host in ('1.1.1.1', '127.0.0.1'):\n        try:\n"
            "            socket.create_connection((host, 80), timeout=1)\n            return 'connected'\n"
            "        except OSError:\n            pass\n    return 'isolated'\n")
    assert values(run(code)) == ["isolated"]


@pytest.fixture
def outside(tmp_path):
    """A directory beside the repository, readable by everyone, holding `notes.md`: outside the repository and
    outside /tmp (which the sandbox replaces). In pytest's temporary directory where the repository's
    parent is not writable."""
    try:
        where = Path(tempfile.mkdtemp(prefix=".cotrain-test-outside-", dir=REPO.parent))
    except OSError:
        where = Path(tempfile.mkdtemp(dir=tmp_path))
    try:
        os.chmod(where, 0o755)  # only the sandbox, not the permissions, may keep its users out
        (where / "notes.md").write_text("a file outside the sandbox\n")
        yield where
    finally:
        shutil.rmtree(where, ignore_errors=True)


def test_files_outside_cannot_be_read(outside):
    targets = [str(REPO / "README.md"), str(REPO / "src" / "cotrain" / "sandbox.py"), os.path.expanduser("~/.bashrc"),
               str(outside / "notes.md"), "/etc/passwd", f"/proc/{os.getpid()}/environ"]
    assert any(Path(t).exists() for t in targets)
    code = ("def f(path):\n    try:\n        return open(path).read()[:20]\n    except OSError:\n        return None\n")
    assert values(run(code, [(t,) for t in targets])) == [None] * len(targets)


def test_files_outside_cannot_be_written_or_deleted(tmp_path, outside):
    marker = f"escaped-{uuid.uuid4().hex}"
    writes = [str(REPO / marker), os.path.expanduser(f"~/{marker}"), f"/tmp/{marker}", str(tmp_path / marker)]
    code = ("import os, shutil\ndef f(path):\n    for act in (lambda: open(path, 'w').write('x'), lambda: os.remove(path),\n"
            "                lambda: shutil.rmtree(path)):\n        try:\n            act()\n        except Exception:\n"
            "            pass\n    return 0\n")
    keep = REPO / "README.md"
    run(code, [(w,) for w in writes] + [(str(keep),), (str(outside),), (str(REPO / "src"),)])
    assert not any(Path(w).exists() for w in writes)
    assert keep.is_file() and (REPO / "src" / "cotrain" / "sandbox.py").is_file() and (outside / "notes.md").is_file()


def test_the_parent_cannot_be_signalled():
    code = ("import os, signal\ndef f(pid):\n    for target in (pid, os.getppid(), -1, 1):\n        try:\n"
            "            os.kill(target, signal.SIGKILL)\n        except OSError:\n            pass\n    return 0\n")
    run(code, [(os.getpid(),)])
    assert os.getpid() > 0  # still here: the test process was the target


def test_a_detached_child_does_not_outlive_the_run():
    code = ("import os, time\ndef f(x):\n    if os.fork() == 0:\n        os.setsid()\n        if os.fork() == 0:\n"
            "            time.sleep(60)\n        os._exit(0)\n    return x + 1\n")
    result = run(code)
    assert sandbox.passed(result, [2]) == [True]
    # machine_left_clean checks that no process of it remains


# ----------------------------------------------------------------------------- faking a pass


@pytest.mark.parametrize("code", [
    "print('PASSED')\nprint('{\"ok\": true, \"value\": 2}')\ndef f(x):\n    return 0\n",    # prints a pass
    "import sys\nsys.exit(0)\ndef f(x):\n    return x + 1\n",                               # exits before defining f
    "import sys\ndef f(x):\n    sys.exit(0)\n",                                                 # exits in the call
    "import os\ndef f(x):\n    os._exit(0)\n",                                                 # exits without cleanup
    "import builtins\nbuiltins.AssertionError = Exception\nassert False\ndef f(x):\n    return 0\n",  # patches assert
    "import json\njson.dumps = lambda *a, **k: '{\"ok\": true, \"value\": 2}'\ndef f(x):\n    return 0\n",  # patches the harness
    "import os\nos.write(1, b'{\"ok\": true}\\n' * 5)\ndef f(x):\n    return 0\n",                  # forges result rows
    "import os\nfor fd in range(3, 20):\n    try:\n        os.write(fd, b'{\"ok\": true, \"value\": \"2\"}\\n')\n"
    "    except OSError:\n        pass\ndef f(x):\n    return 0\n",                                  # writes to every fd
    "import os, signal\ndef f(x):\n    os.kill(os.getpid(), signal.SIGKILL)\n",                # kills the harness
])
def test_a_wrong_program_cannot_fake_a_pass(code):
    result = run(code, [(1,), (5,)])
    assert sandbox.passed(result, [2, 6]) == [False, False], result


def test_many_programs_in_parallel_one_bad_one_does_not_stall_the_rest():
    jobs = [(ADD_ONE, "f", [[i]]) for i in range(20)]
    jobs[3] = ("def f(x):\n    while True:\n        pass\n", "f", [[3]])
    t0 = time.monotonic()
    results = sandbox.run_many(jobs, limits=sandbox.Limits(wall_s=3.0, cpu_s=2), workers=2)
    assert [sandbox.passed(r, [i + 1])[0] for i, r in enumerate(results)] == [i != 3 for i in range(20)]
    assert results[3].status == "timeout" and time.monotonic() - t0 < 15


# ----------------------------------------------------------------------------- assertion tests (HumanEval's form)

TEST = "def check(candidate):\n    assert candidate(2) == 3\n    assert [candidate(x) for x in range(3)] == [1, 2, 3]\n"


def test_assertion_tests_are_replayed_outside_the_sandbox():
    assert sandbox.run_tests(ADD_ONE, "f", TEST, limits=FAST).status == "ok"
    assert sandbox.run_tests("def f(x):\n    return x + 2\n", "f", TEST, limits=FAST).status == "failed"
    # right on the first call only: the second assertion fails in the replay
    half = "def f(x):\n    return 3 if x == 2 else 0\n"
    assert sandbox.run_tests(half, "f", TEST, limits=FAST).status == "failed"
    raises = "def f(x):\n    raise ValueError\n"
    expects = "def check(candidate):\n    try:\n        candidate(1)\n    except ValueError:\n        return\n    assert False\n"
    assert sandbox.run_tests(raises, "f", expects, limits=FAST).status == "ok"
    assert sandbox.run_tests(ADD_ONE, "f", expects, limits=FAST).status == "failed"
    loops = "def f(x):\n    while True:\n        pass\n"
    assert sandbox.run_tests(loops, "f", TEST, limits=FAST).status == "timeout"


@pytest.mark.parametrize("code", [
    "import builtins\nbuiltins.AssertionError = type('Nope', (Exception,), {})\ndef f(x):\n    return 0\n",
    "def f(x):\n    import sys\n    sys.modules['__main__'].__dict__['check'] = lambda c: None\n    return 0\n",
    "import os\nos.write(1, b'{\"key\": \"((2,), {})\", \"value\": \"3\"}\\n')\ndef f(x):\n    return 0\n",
    "class Liar(int):\n    def __eq__(self, other):\n        return True\ndef f(x):\n    return Liar(0)\n",
    "import os\ndef f(x):\n    os._exit(0)\n",
])
def test_a_wrong_program_cannot_fake_an_assertion_test(code):
    assert sandbox.run_tests(code, "f", TEST, limits=FAST).status != "ok"


def test_humaneval_references_pass_and_a_mutant_fails():
    import gzip
    import json

    from cotrain.tasks.mathdata import shipped_data_dir

    data = shipped_data_dir() / "humaneval.jsonl.gz"
    rows = {r["task_id"]: r for r in map(json.loads, gzip.open(data, "rt"))}
    for task in ("HumanEval/0", "HumanEval/32", "HumanEval/33", "HumanEval/38", "HumanEval/53"):
        row = rows[task]  # 32, 38: random inputs and helpers from the prompt; 33: the test calls the entry by name
        run = sandbox.run_tests(row["prompt"] + row["canonical_solution"], row["entry_point"], row["test"],
                                context=row["prompt"])
        assert run.status == "ok", (task, run)
    row = rows["HumanEval/53"]  # add(x, y): x + y
    wrong = row["prompt"] + row["canonical_solution"].replace("x + y", "x - y")
    assert sandbox.run_tests(wrong, row["entry_point"], row["test"], context=row["prompt"]).status == "failed"


# ----------------------------------------------------------------------------- the humaneval task


def test_humaneval_task_reads_programs_as_models_write_them():
    from cotrain.tasks import make_task
    from cotrain.tasks.code import extract_program

    task = make_task("humaneval")
    problems = task.problems("test")
    assert len(problems) == 164 and len({p.meta["task_id"] for p in problems}) == 164
    add = next(p for p in problems if p.meta["task_id"] == "HumanEval/53")
    assert task.grade(add.solution, add) == 1.0                                    # a body continuing the prompt
    fenced = "Here it is:\n```python\ndef add(x: int, y: int):\n    return y + x\n```\nDone."
    assert task.grade(fenced, add) == 1.0                                          # a chat model's whole function
    assert task.grade("```python\ndef add(x, y):\n    return x * y\n```", add) == 0.0
    assert task.grade("    return x - y\n", add) == 0.0
    assert task.grade("", add) == 0.0 and task.grade("```", add) == 0.0
    assert task.extract_answer(fenced) == "def add(x: int, y: int):\n    return y + x"
    assert extract_program("P\n", "```\nx = 1\n```", "f") == "P\nx = 1\n"
    assert extract_program("P\n", None, "f") == "P\n"


# ----------------------------------------------------------------------------- the tiny code world


def test_codeworld_formats_references_and_splits():
    import json

    from cotrain.tasks.codeworld import CodeWorldTask, expression, program_of, run_reference

    assert expression(["add 3", "keep even", "sum"]) == "sum([v for v in [v+3 for v in x] if v%2==0])"
    assert run_reference(["add 3", "keep even", "sum"], [1, 2, 3]) == 4 + 6
    assert run_reference(["keep >4", "reverse", "max"], [1, 2]) == 0  # max of nothing is 0
    assert program_of("\n  return x[::-1]  \nignored") == "def f(x):\n    return x[::-1]\n"
    task = CodeWorldTask()
    train, test, ood = task.problems("train", 40), task.problems("test", 10), task.problems("ood", 10)
    descriptions = {p.question.split("|")[0] for p in train}
    assert not descriptions & {p.question.split("|")[0] for p in test}
    assert all(p.question.startswith("|") and p.question.count("|") == 3 for p in ood)  # examples only
    for p in train[:6] + ood[:2]:
        assert len(json.loads(p.answer)) == 8 and task.grade(p.solution, p) == 1.0
    assert task.grade("return x", train[0]) == 0.0 and task.grade("", train[0]) == 0.0
    assert task.grade("return (", train[0]) == 0.0 and task.grade(None, train[0]) == 0.0
    assert task.extract_answer(" return x \n") == "return x"



def test_correct_programs_right_after_a_fork_bomb_on_a_loaded_machine_pass():
    """Right after a fork bomb is stopped its processes linger under the sandbox's user for a moment, and
    bubblewrap cannot create a new program's namespaces then ("Resource temporarily unavailable"). With two
    busy processes holding the cores, twice: a fork bomb, then at once 8 correct programs. Every one must
    pass: a program the sandbox could not start is started again after those processes are gone (counted
    in `Run.retries` and `sandbox.RETRIES`), never graded as failing."""
    import multiprocessing

    bomb = ("import os\ndef f(x):\n    while True:\n        try:\n            os.fork()\n"
            "        except OSError:\n            pass\n")
    busy = [multiprocessing.Process(target=_spin, daemon=True) for _ in range(2)]
    for p in busy:
        p.start()
    try:
        results = []
        for _ in range(2):
            assert run(bomb).status in ("timeout", "crash")
            results += [run("def f(x):\n    return x + 1\n") for _ in range(8)]
    finally:
        for p in busy:
            p.terminate()
    assert [r.status for r in results] == ["ok"] * 16, [(r.status, r.detail) for r in results]
    assert all(sandbox.passed(r, [2]) == [True] for r in results)
    assert sum(r.retries for r in results) <= sandbox.RETRIES["starts"]


def _spin() -> None:
    while True:
        pass


def test_a_sandbox_that_cannot_start_a_program_is_told_from_the_program_failing():
    """bubblewrap's own complaint, with no line from the harness, is the sandbox failing; a program that
    crashed after loading, or printed the same words itself after the harness spoke, is not."""
    refused = "bwrap: Creating new namespace failed: Resource temporarily unavailable\n"
    assert sandbox._not_started(1, "", refused)
    assert not sandbox._not_started(1, '{"loaded": true}\n', refused)      # the program ran
    assert not sandbox._not_started(0, "", refused)                       # it exited cleanly
    assert not sandbox._not_started(1, "", "Traceback ...\nZeroDivisionError\n")
