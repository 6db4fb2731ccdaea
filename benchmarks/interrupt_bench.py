"""How quickly a command ends on Ctrl-C and SIGTERM, in each phase (target: 2 s).

Starts real ``aoizora`` commands on the tiny Wan config (one cache directory, so
each run resumes the last), waits for a phase's progress line, sends the signal and
times two things: until the command's process has exited, and until its stdout and
stderr are closed (every process holding them has ended too). Prints one row a run
with the exit code and the interrupt line, and the load average.

    python benchmarks/interrupt_bench.py            # plan: Stage 1, compiles, search; whatif
    python benchmarks/interrupt_bench.py --ray      # the same plan runs with --ray

The placement search of the tiny config takes milliseconds, so that row waits at the
``$AOIZORA_PAUSE_AT=search`` seam (between batches of replays) for the signal.
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# ``python -m aoizora ARGS`` with SIGINT as a foreground job has it (a script's background
# job starts with SIGINT ignored, and the command keeps that).
_FOREGROUND = (
    "import runpy, signal, sys; signal.signal(signal.SIGINT, signal.SIG_DFL); "
    "sys.argv[0] = 'aoizora'; runpy.run_module('aoizora', run_name='__main__', alter_sys=True)"
)
TINY = ["--model", "wan-tiny", "--resolution", "256x256", "--frames", "5", "--top-k", "2"]
PHASES = [
    ("Stage 1", ["plan", "--slice", "v5e:2x2"], r"^\[stage 1 +\d+/", None),
    ("compiles", ["plan", "--slice", "v5e:2x2"], r"^\[compile\] \d+ of", None),
    ("search", ["plan", "--slice", "v5e:2x2"], r"^\[pause\] search", "search"),
    ("what-if Stage 1", ["whatif", "--slices", "v5e:2x4"], r"^\[stage 1 +\d+/", None),
    ("what-if compiles", ["whatif", "--slices", "v5e:2x4"], r"^\[compile\] \d+ of", None),
    # validate prints nothing while it predicts: the signal goes 3 s after the start, into
    # the predictions of the shipped file's rows ten times over (about 25 s).
    ("validate", ["validate", "{rows}"], "", None),
]


def _many_rows(directory: Path) -> Path:
    """The shipped measurement file with its rows ten times (new row ids)."""
    lines = (ROOT / "validation" / "measurements.csv").read_text(encoding="utf-8").splitlines()
    rows = [ln for ln in lines if ln and not ln.startswith(("#", "row_id"))]
    header = next(ln for ln in lines if ln.startswith("row_id"))
    copies = [f"x{k}-{row}" for k in range(10) for row in rows]
    path = directory / "measurements.csv"
    path.write_text("\n".join([header, *copies]) + "\n", encoding="utf-8")
    return path


def _interrupt(argv: list[str], pattern: str, pause: str | None, sig: int) -> dict[str, object]:
    env = {k: v for k, v in os.environ.items() if k != "AOIZORA_PAUSE_AT"}
    if pause:
        env["AOIZORA_PAUSE_AT"] = pause
    proc = subprocess.Popen(
        [sys.executable, "-c", _FOREGROUND, *argv], stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True, env=env,
    )  # fmt: skip
    lines: list[str] = []
    seen = threading.Event()
    regex = re.compile(pattern)

    def read() -> None:
        assert proc.stderr is not None
        for line in proc.stderr:
            lines.append(line.rstrip("\n"))
            if regex.search(line):
                seen.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    out_reader = threading.Thread(target=lambda: proc.stdout and proc.stdout.read(), daemon=True)
    out_reader.start()
    if not pattern:
        time.sleep(3.0)
    while pattern and not seen.wait(1.0):
        if proc.poll() is not None:
            return {"error": f"ended before a line {pattern!r}", "tail": lines[-3:]}
    t0 = time.perf_counter()
    proc.send_signal(sig)
    code = proc.wait()
    exited = time.perf_counter() - t0
    reader.join()
    out_reader.join()
    closed = time.perf_counter() - t0
    said = [line for line in lines if "interrupted" in line]
    return {"code": code, "exit_s": exited, "pipes_closed_s": closed, "line": said[-1:] or None}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ray", action="store_true", help="plan with --ray (local cluster)")
    args = parser.parse_args()
    print(f"load average {os.getloadavg()}")
    worst = 0.0
    for sig in (signal.SIGINT, signal.SIGTERM):
        # A cache of its own for each signal: every phase still has work to interrupt.
        with tempfile.TemporaryDirectory(prefix="aoizora-interrupt-") as tmp:
            rows = str(_many_rows(Path(tmp)))
            for name, argv, pattern, pause in PHASES:
                argv = [rows if a == "{rows}" else a for a in argv]
                common = [*TINY] if argv[0] in ("plan", "whatif") else []
                common += ["--cache-dir", tmp]
                extra = ["--out", str(Path(tmp) / "plan.json")] if argv[0] == "plan" else []
                ray = ["--ray"] if args.ray and argv[0] == "plan" else []
                got = _interrupt([*argv, *common, *extra, *ray], pattern, pause, sig)
                if "error" in got:
                    print(f"{sig.name:7} {name:17} {got}")
                    continue
                worst = max(worst, float(got["pipes_closed_s"]))  # type: ignore[arg-type]
                print(
                    f"{sig.name:7} {name:17} exit {got['code']} after {got['exit_s']:.2f} s, "
                    f"pipes closed after {got['pipes_closed_s']:.2f} s: {got['line']}"
                )
    print(f"slowest end: {worst:.2f} s (target 2 s); load average {os.getloadavg()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
