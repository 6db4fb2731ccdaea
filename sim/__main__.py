"""``python -m sim``: replay a JSON flow file, or run the contention demo.

    python -m sim flows FILE.json [--out RESULT.json]
    python -m sim demo

Bad input exits with status 2 and one line on stderr, never a traceback.
"""

from __future__ import annotations

import argparse
import gc
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import NoReturn

from sim.demo import demo_report
from sim.errors import SimError
from sim.flowfile import format_output, read_flow_file, replay

__all__ = ["main"]


class _OneLineParser(argparse.ArgumentParser):
    """argparse, but usage errors are one line on stderr and exit status 2."""

    def error(self, message: str) -> NoReturn:
        sys.stderr.write(f"{self.prog}: error: {message} (see --help)\n")
        raise SystemExit(2)


def _parser() -> argparse.ArgumentParser:
    parser = _OneLineParser(prog="python -m sim", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_OneLineParser)
    flows = sub.add_parser(
        "flows",
        help="replay flows from a JSON file (format: sim/flowfile.py, docs/simulator.md)",
    )
    flows.add_argument("file", help="the flow file (JSON)")
    flows.add_argument("--out", help="write the result JSON here instead of printing it")
    sub.add_parser("demo", help="one all-gather on two placements of v5e:2x4")
    return parser


def _fail(message: str) -> int:
    sys.stderr.write("python -m sim: error: " + " ".join(message.split()) + "\n")
    return 2


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point; returns the exit status."""
    args = _parser().parse_args(argv)
    if args.command == "demo":
        print(demo_report())
        return 0
    # The run allocates ~10 objects per flow and frees none of them until it
    # ends, and none form cycles: the cyclic collector would only rescan them
    # (~5 % of a 10,000-flow run). As it was before returning (tests call main).
    collecting = gc.isenabled()
    gc.disable()
    try:
        output = replay(read_flow_file(args.file))
    except SimError as exc:  # the message names the field; the line names the file too
        message = str(exc)
        return _fail(message if repr(args.file) in message else f"{args.file}: {message}")
    except KeyboardInterrupt:  # Ctrl-C: one line, 128 + SIGINT, as aoizora's commands
        sys.stderr.write(f"python -m sim: interrupted by SIGINT replaying {args.file!r}\n")
        return 130
    except RecursionError:
        return _fail(f"{args.file!r} is nested too deeply to be a flow file")
    except MemoryError:
        return _fail(f"{args.file!r} is too large to replay in this machine's memory")
    finally:
        if collecting:
            gc.enable()
    text = format_output(output)
    if args.out is None:
        sys.stdout.write(text)
        return 0
    out = Path(args.out)
    tmp = out.with_name(f".{out.name}.tmp{os.getpid()}")
    try:  # whole or not at all: a kill leaves the old file, never half a new one
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, out)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        return _fail(f"cannot write {args.out!r}: {exc.strerror or exc}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
