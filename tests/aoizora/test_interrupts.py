"""Ctrl-C and SIGTERM at any phase of a real ``aoizora plan`` (SIGKILL too): clean, resumable.

A plan of the tiny Wan config on v5e:2x2 is started as a subprocess (the command a
user runs) and interrupted in each phase, found from its own progress lines: Stage 1
(a ``[stage 1 k/n]`` line: lowering is under way in the workers), the compiles (the
``[compile] ... on 2 processes`` line: the workers compile for seconds) and the
placement search (the ``[pause] search`` line of the ``$AOIZORA_PAUSE_AT`` seam: the
tiny search takes milliseconds, so it waits there, between its batches, for the
signal). Every run ended by SIGINT or SIGTERM must exit 130 / 143 with one line on
stderr naming the phase, print no traceback and no libtpu noise, and leave no
process behind (its pipes close with it); SIGKILL (in the compiles, where the workers
are busiest) leaves no process either. The runs
share one cache, so each resumes the last, and the final run writes the plan an
uninterrupted run writes, byte for byte.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from sim.topology import load_slice
from tests.aoizora.test_planner import MODEL

# The step only (--no-clip): these tests interrupt the step's phases, and a rerun must read
# all of them from the cache; the VAE's plan would add its own Stage 1 and compiles.
PLAN_ARGS = [
    "plan", "--model", MODEL, "--slice", "v5e:2x2", "--resolution", "256x256", "--frames", "5",
    "--top-k", "2", "--workers", "2", "--no-clip",
]  # fmt: skip
STAGE1 = r"^\[stage 1 +\d+/\d+\]"
COMPILES = r"^\[compile\] \d+ of \d+ candidates for v5e:2x2 on 2 processes"
SEARCH = r"^\[pause\] search:"
NOISE = ("Traceback", "RAW:", "SIGTERM received", "leaked semaphore", "KeyboardInterrupt")


def _stat(pid: int) -> tuple[int, str, str] | None:
    """(parent, state, start time) of a live process, from /proc."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    fields = text.rsplit(")", 1)[1].split()
    return int(fields[1]), fields[0], fields[19]


def _descendants(root: int) -> dict[int, str]:
    """Every process below ``root``: pid -> start time."""
    table = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit() and (got := _stat(int(entry))) is not None:
            table[int(entry)] = got
    found: dict[int, str] = {}
    frontier = {root}
    while frontier:
        kids = {pid for pid, (parent, _, _) in table.items() if parent in frontier}
        found.update({pid: table[pid][2] for pid in kids})
        frontier = kids
    return found


def _survivors(children: dict[int, str], *, within_s: float = 5.0) -> list[int]:
    """The ``children`` still running (not zombies, not a reused pid) after ``within_s``."""
    deadline = time.monotonic() + within_s
    while True:
        alive = []
        for pid, start in children.items():
            got = _stat(pid)
            if got is not None and got[1] != "Z" and got[2] == start:
                alive.append(pid)
        if not alive or time.monotonic() > deadline:
            return alive
        time.sleep(0.1)


# ``python -m aoizora ARGS``, with SIGINT as a terminal's foreground job has it: a shell
# starts a script's background jobs with SIGINT ignored, and a command keeps that (so
# would this test's commands, were pytest started that way).
AOIZORA_IN_FOREGROUND = (
    "import runpy, signal, sys; signal.signal(signal.SIGINT, signal.SIG_DFL); "
    "sys.argv[0] = 'aoizora'; runpy.run_module('aoizora', run_name='__main__', alter_sys=True)"
)


class _Run:
    """``aoizora plan`` as a subprocess, its stderr read line by line as it comes."""

    def __init__(
        self, cache: Path, out: Path, *, pause: str | None = None, clip: bool = False
    ) -> None:
        args = [a for a in PLAN_ARGS if not (clip and a == "--no-clip")]
        env = dict(os.environ)
        env.pop("AOIZORA_PAUSE_AT", None)
        if pause is not None:
            env["AOIZORA_PAUSE_AT"] = pause
        self.proc = subprocess.Popen(
            [sys.executable, "-c", AOIZORA_IN_FOREGROUND, *args, "--cache-dir", str(cache),
             "--out", str(out)],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
        )  # fmt: skip
        self.lines: list[str] = []
        self.stdout = ""
        self.changed = threading.Condition()
        self.readers = [
            threading.Thread(target=self._read_err, daemon=True),
            threading.Thread(target=self._read_out, daemon=True),
        ]
        for reader in self.readers:
            reader.start()

    def _read_err(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            with self.changed:
                self.lines.append(line.rstrip("\n"))
                self.changed.notify_all()

    def _read_out(self) -> None:
        assert self.proc.stdout is not None
        self.stdout = self.proc.stdout.read()

    def wait_for(self, pattern: str, timeout_s: float = 600.0) -> None:
        regex = re.compile(pattern)
        deadline = time.monotonic() + timeout_s
        with self.changed:
            while not any(regex.search(line) for line in self.lines):
                left = deadline - time.monotonic()
                assert left > 0 and self.proc.poll() is None, (
                    f"no line matching {pattern!r}; stderr so far:\n" + "\n".join(self.lines[-20:])
                )
                self.changed.wait(min(left, 1.0))

    def interrupt(self, sig: signal.Signals) -> tuple[int, dict[int, str]]:
        """Send ``sig``; return the exit code and the processes it had then."""
        children = _descendants(self.proc.pid)
        self.proc.send_signal(sig)
        code = self.proc.wait(timeout=60)
        for reader in self.readers:  # no process left holds its stdout or stderr
            reader.join(timeout=30)
            assert not reader.is_alive(), "a process left behind holds the plan's pipes"
        return code, children

    def finish(self) -> int:
        code = self.proc.wait(timeout=900)
        for reader in self.readers:
            reader.join(timeout=30)
        return code


def _reference_plan(cache_dir: Path, tmp_path: Path) -> bytes:
    """The plan of an uninterrupted run (the session's shared cache)."""
    out = tmp_path / "reference.json"
    run = _Run(cache_dir, out)
    assert run.finish() == 0, "\n".join(run.lines[-20:])
    return out.read_bytes()


def _add_session_entries(session: Path, cache: Path, kind: str) -> None:
    """Copy the entries of ``session``'s cache folder ``kind`` that ``cache`` lacks."""
    for entry in sorted((session / kind).glob("*/*")):
        target = cache / kind / entry.parent.name / entry.name
        if entry.is_file() and not target.exists():
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(entry, target)


@pytest.fixture(scope="module", autouse=True)
def _libtpu_describes_v5e() -> None:
    pytest.importorskip("libtpu")  # the phases need real TPU compiles
    load_slice("v5e:2x2")


def _check_clean_end(run: _Run, sig: signal.Signals, phase: str, cache: Path) -> None:
    """Exit 128 + the signal, the one line naming ``phase`` last, nothing else said."""
    code, children = run.interrupt(sig)
    where = f"{sig.name} in {phase}"
    assert code == 128 + sig, (where, code, run.lines[-10:])
    assert children, where  # there were workers to end
    assert not _survivors(children), where
    said = [line for line in run.lines if "interrupted" in line]
    assert said == [run.lines[-1]], (where, run.lines[-10:])
    assert said[0] == (
        f"aoizora plan: interrupted by {sig.name} during {phase}; finished work is cached "
        f"in {cache} and a rerun resumes from it"
    )
    text = "\n".join(run.lines)
    if [n for n in NOISE if n in text]:  # the whole output: an assert's repr is truncated
        pytest.fail(f"{where}: noise in the output:\n{text[-6000:]}", pytrace=False)


@pytest.mark.slow
def test_every_signal_in_every_phase_ends_cleanly_and_the_rerun_resumes(
    plan_cache_dir: Path, tmp_path: Path
) -> None:
    # One cache for every run: each resumes the last (Stage 1 was partly done when it
    # was interrupted the first time, the compiles were not), and the last run writes
    # the plan of an uninterrupted run.
    reference = _reference_plan(plan_cache_dir, tmp_path)
    cache, out = tmp_path / "cache", tmp_path / "plan.json"
    phases = [
        (STAGE1, None, "Stage 1 on v5e:2x2"),
        (COMPILES, None, "the compiles for v5e:2x2"),
        (SEARCH, "search", "the placement search on v5e:2x2"),
    ]
    for pattern, pause, phase in phases:
        # What the session's cache holds from the reference run joins this one once the
        # phase that makes it has been interrupted: the Stage-1 modules before the compiles
        # (the rest of Stage 1 is then scored, not lowered again), the compile results
        # before the search (its runs then wait on the search, not on libtpu). An entry
        # the interrupted runs wrote is kept, so the runs still resume from each other.
        if (kind := {COMPILES: "shardy", SEARCH: "compiled"}.get(pattern)) is not None:
            _add_session_entries(plan_cache_dir, cache, kind)
        # SIGKILL where the workers are busiest (each run costs seconds of CI time).
        kill = (signal.SIGKILL,) if pattern == COMPILES else ()
        for sig in (signal.SIGINT, signal.SIGTERM, *kill):
            run = _Run(cache, out, pause=pause)
            run.wait_for(pattern)
            if sig == signal.SIGKILL:
                code, children = run.interrupt(sig)
                # The workers die with the parent (PR_SET_PDEATHSIG) and the pipes close.
                assert code == -signal.SIGKILL and children and not _survivors(children)
            else:
                _check_clean_end(run, sig, phase, cache)
            assert not out.exists(), (sig, phase)  # no plan from an interrupted run
    final = _Run(cache, out)
    assert final.finish() == 0, "\n".join(final.lines[-20:])
    assert out.read_bytes() == reference
    # Stage 1 and the compiles were resumed, not redone: the last run read them.
    assert not [line for line in final.lines if re.search(STAGE1 + "|" + COMPILES, line)]


def test_libtpu_prints_nothing_on_sigterm_when_asked_not_to_install_handlers(
    tmp_path: Path,
) -> None:
    # docs/facts.md, libtpu AOT topologies: without the flag libtpu's handler prints a
    # stack trace and "RAW: Remote crash gathering disabled for SIGTERM"; with it, nothing.
    script = (
        "import sys, time\n"
        "from aoizora.interrupts import quiet_libtpu\n"
        "if sys.argv[1] == 'quiet':\n"
        "    quiet_libtpu()\n"
        "from aoizora.tpu import topology_devices\n"
        "from sim.topology import load_slice\n"
        "topology_devices(load_slice('v5e:2x2'))\n"
        "print('ready', flush=True)\n"
        "time.sleep(60)\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "LIBTPU_INIT_ARGS"}
    stderr = {}
    for mode in ("loud", "quiet"):
        proc = subprocess.Popen(
            [sys.executable, "-c", script, mode], stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, text=True, env=env,
        )  # fmt: skip
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        proc.send_signal(signal.SIGTERM)
        _, stderr[mode] = proc.communicate(timeout=60)
        assert proc.returncode in (-signal.SIGTERM, 128 + signal.SIGTERM)
    assert "Remote crash gathering disabled for SIGTERM" in stderr["loud"]  # the control
    assert stderr["quiet"] == ""


_RAY_DRIVER = """
import time
from aoizora.fanout import fan_out

def work(x):
    time.sleep(120)
    return x

with fan_out(ray="local") as pool:
    print("ready", flush=True)
    pool.map(work, [1, 2])
"""


@pytest.mark.slow
def test_a_local_ray_cluster_ends_with_its_driver_killed_by_sigkill() -> None:
    pytest.importorskip("ray")  # make test installs the extra aoizora[ray]
    proc = subprocess.Popen(
        [sys.executable, "-c", _RAY_DRIVER], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
        text=True,
    )  # fmt: skip
    assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
    time.sleep(2)  # the tasks are running in Ray's workers
    children = _descendants(proc.pid)
    proc.kill()
    proc.wait(timeout=60)
    # Ray's own processes die with the raylet; its agents only when they next poll it
    # (about a minute), unless our reaper kills them first.
    assert len(children) >= 4 and not _survivors(children, within_s=10.0)


_STUCK = """
import atexit, sys, time
import numpy as np
from aoizora.fanout import fan_out
from aoizora.interrupts import Interrupted, finished, install_handlers, phase
atexit.register(lambda: print("atexit ran", flush=True))
install_handlers("aoizora test")
a = np.ones((6000, 6000), dtype=np.float32)
try:
    with fan_out(workers=2) as pool, phase(
        "a long native call" if sys.argv[1] == "native" else "a Python loop"
    ):
        pool.map(abs, [-1, -2])  # two idle workers and the pool's semaphores
        print("ready", flush=True)
        while True:
            if sys.argv[1] == "native":
                a @ a  # BLAS, seconds a call on one thread, the GIL released, no signal checks
            else:
                time.sleep(0.01)
except Interrupted as exc:
    finished(exc.signum)
    sys.exit(exc.exit_code)
"""


@pytest.mark.parametrize("where", ["python", "native"])
def test_sigterm_ends_the_command_from_python_code_or_a_stuck_native_call(where: str) -> None:
    # In Python code the handler raises and the process unwinds (atexit runs); in a long
    # native call the handler cannot run, so the watchdog ends it (os._exit: no atexit).
    # Either way: exit 143 and the one line, naming the phase, the workers gone and no
    # semaphore left for Python's resource tracker to warn about.
    # One BLAS thread: the product then takes seconds on any host (on 13 fast cores a
    # threaded one returned within the grace period and the handler ran after it).
    one_thread = {k: "1" for k in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")}
    proc = subprocess.Popen(
        [sys.executable, "-c", _STUCK, where], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True, env={**os.environ, **one_thread},
    )  # fmt: skip
    assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
    time.sleep(0.5)
    children = _descendants(proc.pid)
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=120)
    phase = "a long native call" if where == "native" else "a Python loop"
    assert proc.returncode == 143
    assert err.splitlines() == [
        f"aoizora test: interrupted by SIGTERM during {phase}; nothing was written; rerun the "
        "command"
    ]
    assert ("atexit ran" in out) == (where == "python")
    assert len(children) >= 2 and not _survivors(children)


_IN_A_FINALIZER = """
import os, signal, sys, time
from aoizora.interrupts import Interrupted, finished, install_handlers, phase
install_handlers("aoizora test")


class Resource:
    def __del__(self) -> None:  # the signal lands while Python runs a finalizer
        os.kill(os.getpid(), signal.SIGTERM)
        for _ in range(1000):
            time.sleep(0.001)


try:
    with phase("a finalizer"):
        Resource()  # collected at once: __del__ runs here
        print("went on", flush=True)  # the swallowed interrupt must not let it go on
        time.sleep(30)
except Interrupted as exc:
    finished(exc.signum)
    sys.exit(exc.exit_code)
"""


def test_a_signal_during_a_finalizer_ends_the_command_in_one_line() -> None:
    # Python cannot raise out of __del__: it prints "Exception ignored ... Traceback" and
    # swallows the exception. The command still ends at once with only the line.
    proc = subprocess.run(
        [sys.executable, "-c", _IN_A_FINALIZER], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 143, proc.stderr
    assert "went on" not in proc.stdout
    assert proc.stderr.splitlines() == [
        "aoizora test: interrupted by SIGTERM during a finalizer; nothing was written; rerun "
        "the command"
    ]


@pytest.mark.parametrize("ignored", [True, False])
def test_a_signal_ignored_from_the_start_stays_ignored(ignored: bool) -> None:
    # A script's background job starts with SIGINT ignored so that Ctrl-C spares it.
    script = (
        "import signal, sys\n"
        "from aoizora.interrupts import install_handlers\n"
        "if sys.argv[1] == 'ignored':  # as a background job of a script starts\n"
        "    signal.signal(signal.SIGINT, signal.SIG_IGN)\n"
        "else:  # as from a terminal, however this test was started (nohup, a CI job)\n"
        "    signal.signal(signal.SIGINT, signal.default_int_handler)\n"
        "install_handlers('aoizora test')\n"
        "print(signal.getsignal(signal.SIGINT) is signal.SIG_IGN)\n"
    )
    mode = "ignored" if ignored else "default"
    out = subprocess.run(
        [sys.executable, "-c", script, mode], capture_output=True, text=True, check=True
    ).stdout
    assert out.strip() == str(ignored)


@pytest.mark.slow
def test_a_signal_during_the_vaes_buffer_assignment_ends_its_process_and_dump(
    plan_cache_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The clip's VAE memory is read from a compile in a child process (aoizora.
    buffer_assignment): a signal while it runs ends the command in one line, the child
    with it, and leaves no dump behind."""
    import shutil

    own = tmp_path / "tmp"  # the command's temporary files, apart from other tests'
    own.mkdir()
    monkeypatch.setenv("TMPDIR", str(own))
    out = tmp_path / "plan.json"
    for sig in (signal.SIGTERM, signal.SIGINT):
        shutil.rmtree(plan_cache_dir / "buffers", ignore_errors=True)  # read it afresh
        run = _Run(plan_cache_dir, out, pause="buffer assignment", clip=True)
        run.wait_for(r"^\[pause\] buffer assignment:")
        assert [p for p in os.listdir(own) if p.startswith("aoizora-buffers-")]  # its dump
        _check_clean_end(run, sig, "XLA's buffer assignment of the VAE decoder on v5e:2x2",
                         plan_cache_dir)  # fmt: skip
        dumps = [p for p in os.listdir(own) if p.startswith("aoizora-buffers-")]
        assert not out.exists() and dumps == [], (sig, dumps)
