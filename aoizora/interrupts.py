"""Ending on SIGINT and SIGTERM: promptly, in one line, with no process left behind.

The command line (:mod:`aoizora.cli`) calls :func:`install_handlers` first thing:

* SIGINT (Ctrl-C) and SIGTERM (``kill``, ``timeout``, a job scheduler, a container
  stop) raise :class:`Interrupted` in the main thread. It unwinds every ``with``
  block -- the worker pool (:mod:`aoizora.fanout`) is killed on the way out -- and
  the CLI prints one line (:func:`interrupted_line`: what was interrupted, and that
  finished work is cached and a rerun resumes) and exits 130 or 143 (128 + the
  signal's number, what a shell reports for a death by that signal).
* The main thread runs a Python handler only between bytecodes. When it sits in a
  long native call that releases the GIL (an XLA compile in ``--workers 1``), a
  watchdog thread woken through :func:`signal.set_wakeup_fd` ends the process
  after :data:`GRACE_S` itself: it kills the registered worker pools, prints the
  line and leaves with :func:`os._exit`.
* libtpu installs its own failure-signal handlers when its plugin starts; on
  SIGTERM they print a stack trace and "RAW: Remote crash gathering disabled for
  SIGTERM" before the process dies. libtpu reads the absl flag
  ``--install_signal_handlers=false`` from ``LIBTPU_INIT_ARGS`` and then installs
  none (docs/facts.md, libtpu AOT topologies; ``tests/aoizora/test_interrupts.py``
  checks it): :func:`quiet_libtpu` adds it before libtpu starts, here and in
  every worker.

Workers (:func:`worker_start`, the pool's initializer) ignore SIGINT -- Ctrl-C
reaches the whole process group and the parent decides -- and die with their
parent, also when it is killed with SIGKILL: ``prctl(PR_SET_PDEATHSIG, SIGKILL)``
on Linux, and everywhere a thread that checks every :data:`PARENT_POLL_S` whether
the parent is still the one that started the worker. A worker that has died
holds no file descriptor, so a caller reading the parent's stdout and stderr
sees them close when the parent ends.

What is running is named with :func:`phase` (``with phase("compiles for v5e:2x2")``),
so the line can say what was interrupted.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import multiprocessing.util
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from types import FrameType
from typing import Any

__all__ = [
    "GRACE_S",
    "PAUSE_ENV",
    "PARENT_POLL_S",
    "Interrupted",
    "current_phase",
    "deferred",
    "end_now",
    "finished",
    "install_handlers",
    "interrupted_line",
    "kill_registered",
    "on_hard_exit",
    "pause_point",
    "phase",
    "phase_of",
    "quiet_libtpu",
    "reassert_handlers",
    "resume_note",
    "set_resume_note",
    "worker_start",
]

GRACE_S = 1.0  # how long the main thread may take to unwind before the watchdog ends it
PARENT_POLL_S = 0.5  # how often a worker checks that its parent is alive (non-Linux)
LIBTPU_QUIET_FLAG = "--install_signal_handlers=false"
PAUSE_ENV = "AOIZORA_PAUSE_AT"
_PR_SET_PDEATHSIG = 1  # <linux/prctl.h>
_SIGNALS = (signal.SIGINT, signal.SIGTERM)


class Interrupted(BaseException):
    """SIGINT or SIGTERM arrived: raised in the main thread, caught by the CLI.

    A ``BaseException``, like ``KeyboardInterrupt``: ``except Exception`` blocks
    (a failed candidate, a bad cache entry) do not swallow it.
    """

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum

    @property
    def exit_code(self) -> int:
        """128 + the signal's number: 130 for SIGINT, 143 for SIGTERM."""
        return 128 + self.signum


class _State:
    """What the handlers share: the phase, the note, who prints the line, what to kill."""

    def __init__(self) -> None:
        self.prog = "aoizora"
        self.phase = "start-up"
        self.resume_note = "nothing was written; rerun the command"
        self.received: int | None = None
        self.interrupted_phase: str | None = None  # the phase when the signal came
        self.printed = False
        self.lock = threading.Lock()
        self.done = threading.Event()
        self.killers: list[Callable[[], None]] = []
        self.installed = False
        self.deferring = 0  # > 0 inside deferred(): a signal waits for the block's end
        self.pending: int | None = None


_state = _State()


@contextlib.contextmanager
def phase(what: str) -> Iterator[None]:
    """Name what runs inside the block (``"Stage 1 on v5e:2x2"``) for the interrupt line;
    an error leaving it keeps the innermost phase it left (:func:`phase_of`)."""
    before, _state.phase = _state.phase, what
    try:
        yield
    except Exception as exc:
        if not hasattr(exc, _PHASE_ATTR):
            with contextlib.suppress(AttributeError, TypeError):
                setattr(exc, _PHASE_ATTR, what)
        raise
    finally:
        _state.phase = before


_PHASE_ATTR = "aoizora_phase"  # where phase() marks an error that left it


def current_phase() -> str:
    """What :func:`phase` last named (``"start-up"`` before any)."""
    return _state.phase


def phase_of(exc: BaseException) -> str:
    """The innermost phase ``exc`` was raised in (the current phase if none).

    >>> try:
    ...     with phase("Stage 1 on v5p:8x8x8"):
    ...         raise MemoryError
    ... except MemoryError as exc:
    ...     phase_of(exc)
    'Stage 1 on v5p:8x8x8'
    """
    return str(getattr(exc, _PHASE_ATTR, None) or _state.phase)


def set_resume_note(note: str) -> None:
    """What the interrupt line says about finished work, e.g. ``"finished work is cached
    in ~/.cache/aoizora and a rerun resumes from it"``."""
    _state.resume_note = note


def resume_note() -> str:
    """What :func:`set_resume_note` last said about finished work (a default before)."""
    return _state.resume_note


def interrupted_line(signum: int) -> str:
    """The one line on stderr: the command, the signal, the phase and the resume note.

    >>> set_resume_note("rerun it")
    >>> with phase("the placement search on v5e:2x2"):
    ...     interrupted_line(signal.SIGTERM)
    'aoizora: interrupted by SIGTERM during the placement search on v5e:2x2; rerun it'
    """
    name = signal.Signals(signum).name
    during = _state.interrupted_phase or _state.phase
    return f"{_state.prog}: interrupted by {name} during {during}; {_state.resume_note}"


def on_hard_exit(kill: Callable[[], None]) -> Callable[[], None]:
    """Register ``kill`` (e.g. a pool's) for the watchdog's exit; returns the unregister."""
    _state.killers.append(kill)

    def unregister() -> None:
        with contextlib.suppress(ValueError):
            _state.killers.remove(kill)

    return unregister


def pause_point(name: str) -> None:
    """A test seam: when ``$AOIZORA_PAUSE_AT`` is ``name``, say so on stderr and wait
    there for a signal (the tests interrupt a phase too short to catch otherwise, e.g.
    the placement search of a tiny model, between two batches of replays)."""
    if os.environ.get(PAUSE_ENV) != name:
        return
    sys.stderr.write(f"[pause] {name}: waiting for a signal (${PAUSE_ENV})\n")
    sys.stderr.flush()
    while True:
        time.sleep(0.05)


def quiet_libtpu() -> None:
    """Ask libtpu (through ``LIBTPU_INIT_ARGS``) not to install its signal handlers.

    Only a libtpu that has not started yet reads it; other flags there are kept."""
    args = os.environ.get("LIBTPU_INIT_ARGS", "")
    if "install_signal_handlers" not in args:
        os.environ["LIBTPU_INIT_ARGS"] = f"{args} {LIBTPU_QUIET_FLAG}".strip()


def _say_once(signum: int) -> None:
    with _state.lock:
        if _state.printed:
            return
        _state.printed = True
    with contextlib.suppress(Exception):  # a closed stderr must not stop the exit
        sys.stderr.write(interrupted_line(signum) + "\n")
        sys.stderr.flush()


def finished(signum: int) -> None:
    """The CLI caught :class:`Interrupted`: print the line (once), stop the watchdog."""
    _say_once(signum)
    _state.done.set()


def _handler(signum: int, frame: FrameType | None) -> None:
    if _state.received is not None:
        return  # already unwinding; the watchdog bounds how long that takes
    _state.received = signum
    _state.interrupted_phase = _state.phase
    if _state.deferring:
        _state.pending = signum
        return
    raise Interrupted(signum)


@contextlib.contextmanager
def deferred() -> Iterator[None]:
    """Hold an interrupt until the block ends (then raise it): for steps that must not
    stop half-way, e.g. starting a worker process, which reads its start-up data from
    this one and prints a traceback if this one stops writing it."""
    _state.deferring += 1
    try:
        yield
    finally:
        _state.deferring -= 1
    if not _state.deferring and _state.pending is not None:
        signum, _state.pending = _state.pending, None
        raise Interrupted(signum)


def kill_registered() -> int:
    """Run every :func:`on_hard_exit` kill now (the worker pools', a child's): how many."""
    killers = list(_state.killers)
    for kill in killers:
        with contextlib.suppress(Exception):
            kill()
    return len(killers)


def _leave(code: int) -> None:
    # os._exit skips multiprocessing's exit hooks: unlink the pool's semaphores now (their
    # finalizers run at priority 0; the queues' thread joins, which could block, at -5),
    # or Python's resource tracker would warn about them as leaked.
    run_finalizers = getattr(multiprocessing.util, "_run_finalizers", None)
    with contextlib.suppress(Exception):
        if run_finalizers is not None:
            run_finalizers(0)
    with contextlib.suppress(Exception):
        sys.stdout.flush()
    os._exit(code)


def _hard_exit(signum: int) -> None:
    kill_registered()
    _say_once(signum)
    _leave(128 + signum)


def end_now(line: str, code: int) -> None:
    """End the command from any thread: kill what is registered, print ``line`` (unless
    an interrupt's line is out already) and exit with ``code`` (the memory bound's
    watchdog, when this process itself is over it)."""
    kill_registered()
    with _state.lock:
        printed, _state.printed = _state.printed, True
    if not printed:
        with contextlib.suppress(Exception):
            sys.stderr.write(line + "\n")
            sys.stderr.flush()
    _leave(code)


def _unraisable(unraisable: Any) -> None:
    """``sys.unraisablehook``: an :class:`Interrupted` raised where Python cannot pass it
    on -- the signal arrived while a ``__del__`` or a weakref callback ran -- is printed
    as "Exception ignored" with a traceback and swallowed, and the command would go on.
    End it now instead, as the watchdog would after :data:`GRACE_S`: the one line, no
    traceback."""
    if isinstance(unraisable.exc_value, Interrupted):
        _hard_exit(unraisable.exc_value.signum)
    _previous_unraisablehook(unraisable)


_previous_unraisablehook = sys.unraisablehook


def _watchdog(read_fd: int) -> None:
    while True:
        try:
            data = os.read(read_fd, 64)
        except OSError:
            return
        if not data:
            return
        hits = [b for b in data if b in _SIGNALS]
        if hits and not _state.done.wait(GRACE_S):
            _hard_exit(_state.received or hits[0])


def reassert_handlers() -> None:
    """Put this module's handlers back after a library replaced them (Ray's ``ray.init``
    installs its own SIGTERM handler); nothing unless :func:`install_handlers` ran."""
    if _state.installed and threading.current_thread() is threading.main_thread():
        for sig in _SIGNALS:
            if signal.getsignal(sig) is not signal.SIG_IGN:
                signal.signal(sig, _handler)


def install_handlers(prog: str) -> None:
    """SIGINT and SIGTERM end this process (the main thread) as described above.

    Call it from the main thread, before jax or libtpu start."""
    _state.prog = prog
    _state.installed = True
    quiet_libtpu()
    for sig in _SIGNALS:
        # A signal ignored from the start stays ignored: a shell starts a script's
        # background jobs with SIGINT ignored, so that Ctrl-C does not end them.
        if signal.getsignal(sig) is not signal.SIG_IGN:
            signal.signal(sig, _handler)
    sys.unraisablehook = _unraisable
    read_fd, write_fd = os.pipe()
    os.set_blocking(write_fd, False)
    signal.set_wakeup_fd(write_fd, warn_on_full_buffer=False)
    watchdog = threading.Thread(
        target=_watchdog, args=(read_fd,), name="aoizora-interrupt", daemon=True
    )
    watchdog.start()


# -- workers -------------------------------------------------------------------------


def _die_with_parent_linux() -> None:
    """``prctl(PR_SET_PDEATHSIG, SIGKILL)``: the kernel kills this process when its parent
    (the thread that spawned it) ends, however it ends."""
    if not sys.platform.startswith("linux"):
        return
    name = ctypes.util.find_library("c")
    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL(name, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)


def _watch_parent(parent_pid: int) -> None:
    event = threading.Event()
    while not event.wait(PARENT_POLL_S):
        if os.getppid() != parent_pid:
            os._exit(1)


def worker_start(parent_pid: int) -> None:
    """A pool worker's initializer: ignore Ctrl-C, quiet libtpu, die with ``parent_pid``."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    quiet_libtpu()
    _die_with_parent_linux()
    if os.getppid() != parent_pid:  # the parent ended before the line above ran
        os._exit(1)
    threading.Thread(
        target=_watch_parent, args=(parent_pid,), name="aoizora-parent-watch", daemon=True
    ).start()
