"""Run ``make test``'s pytest sessions in lanes: the lanes at once, each lane's sessions in turn.

``python tests/lanes.py --lane "ARGS" --lane "ARGS" "ARGS" ...``: each ``--lane`` is a list of
pytest sessions, each given as one string of pytest arguments. The first lane's output goes to this
process's output as it comes (the suite's progress); every other session writes to a log file under
``--logs`` whose path is printed when it starts, and the whole log is printed when it ends (in
one piece, so lanes never interleave their lines). Each session has its own local Ray, as every
pytest session of this project does (``tests/conftest.py``).

Why lanes: the suite is bound by CPU work, but a third of its run the 2-core machine is waiting
(nodes started and killed by the multi-node tier, ``wonder up`` and its model, servers starting).
A second lane beside the main session uses that time (docs/benchmarks.md;
``benchmarks/suite_time.py`` measures it against one lane). Two Rays on one machine stay apart: each
session records its Ray's address in its own temp dir, where Ray's job server looks for it.

The exit status is 0 when every session passed, else the first failed session's status; the last
lines name each session with its status and wall time.
"""

from __future__ import annotations

import argparse
import shlex
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

ROOT = Path(__file__).resolve().parent.parent


@dataclass
class Session:
    lane: int
    index: int
    args: list[str]
    rc: int | None = None
    wall_s: float = 0.0
    log: Path | None = None
    summary: str = ""
    # Set when the session began and ended (time.monotonic()), for whoever times the lanes.
    began: float = 0.0
    ended: float = 0.0

    @property
    def name(self) -> str:
        return f"lane {self.lane + 1}, session {self.index + 1}"


@dataclass
class Lanes:
    """Lanes of sessions, run by ``run``; ``sessions`` holds their outcomes once it returns."""

    lanes: list[list[list[str]]]
    logs: Path
    python: str = sys.executable
    stream_first: bool = True  # the first lane's output to this process's (else to a log too)
    side_nice: int = 5  # niceness of every lane but the first (0: as the first)
    sessions: list[Session] = field(default_factory=list)
    _print_lock: threading.Lock = field(default_factory=threading.Lock)

    def run(self) -> int:
        self.logs.mkdir(parents=True, exist_ok=True)
        threads = [
            threading.Thread(target=self._run_lane, args=(i, lane), name=f"lane-{i + 1}")
            for i, lane in enumerate(self.lanes)
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        failed = [s for s in self.sessions if s.rc != 0]
        self._say("")
        for session in sorted(self.sessions, key=lambda s: (s.lane, s.index)):
            self._say(
                f"[lanes] {session.name}: rc {session.rc} in {session.wall_s:.0f} s: "
                f"pytest {shlex.join(session.args)}: {session.summary}"
            )
        return next((s.rc or 1 for s in failed), 0)

    def _run_lane(self, lane: int, sessions: list[list[str]]) -> None:
        for index, args in enumerate(sessions):
            session = Session(lane, index, args)
            self.sessions.append(session)
            self._run_session(session)

    def _run_session(self, session: Session) -> None:
        command = [self.python, "-m", "pytest", *session.args]
        if session.lane > 0 and self.side_nice:
            # The side lanes yield the CPU to the main one when both want it (their Ray and
            # servers inherit it): the main lane's tests keep their pace, the side lanes take
            # what the main one leaves.
            command = ["nice", "-n", str(self.side_nice), *command]
        session.began = time.monotonic()
        if session.lane == 0 and self.stream_first:
            self._say(f"[lanes] {session.name}: pytest {shlex.join(session.args)}")
            child = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, text=True)
            assert child.stdout is not None
            tail = self._stream(child.stdout)
            session.rc = child.wait()
        else:
            session.log = self.logs / f"lane{session.lane + 1}-session{session.index + 1}.log"
            self._say(
                f"[lanes] {session.name}: pytest {shlex.join(session.args)} "
                f"(output in {session.log}, printed when it ends)"
            )
            with open(session.log, "w") as sink:
                session.rc = subprocess.call(
                    command, cwd=ROOT, stdout=sink, stderr=subprocess.STDOUT
                )
            text = session.log.read_text(errors="replace")
            tail = text.strip().splitlines()[-1] if text.strip() else ""
            if self.stream_first:
                with self._print_lock:
                    sys.stdout.write(f"\n[lanes] ===== {session.name} (pytest output) =====\n")
                    sys.stdout.write(text)
                    sys.stdout.write(f"[lanes] ===== end of {session.name} =====\n\n")
                    sys.stdout.flush()
        session.ended = time.monotonic()
        session.wall_s = session.ended - session.began
        session.summary = tail
        self._say(f"[lanes] {session.name}: rc {session.rc} in {session.wall_s:.0f} s: {tail}")

    def _stream(self, out: TextIO) -> str:
        last = ""
        for line in out:
            with self._print_lock:
                sys.stdout.write(line)
                sys.stdout.flush()
            if line.strip():
                last = line.strip()
        return last

    def _say(self, line: str) -> None:
        with self._print_lock:
            print(line, flush=True)


def parse_lanes(argv: list[str] | None = None) -> tuple[list[list[list[str]]], Path]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument(
        "--lane",
        action="append",
        nargs="+",
        required=True,
        metavar="SESSION",
        help="one lane: its pytest sessions in order, each one string of pytest arguments",
    )
    parser.add_argument("--logs", type=Path, default=None, help="where side sessions log")
    args = parser.parse_args(argv)
    lanes = [[shlex.split(session) for session in lane] for lane in args.lane]
    logs = args.logs or Path(tempfile.mkdtemp(prefix="wonder-lanes-"))
    return lanes, logs


def main() -> None:
    lanes, logs = parse_lanes()
    sys.exit(Lanes(lanes, logs).run())


if __name__ == "__main__":
    main()
