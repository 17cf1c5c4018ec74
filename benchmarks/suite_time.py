"""How long ``make test`` takes, and where the machine's CPU goes meanwhile.

Runs the pytest sessions ``make test`` runs after its installs, in its two lanes
(``tests/lanes.py``): the main session (the Makefile's ``MAIN_SESSION``), and beside it, at nice 5,
the side sessions one after another (``SIDE_SESSIONS``: the multi-node and newcomer tiers, the
PostgreSQL integration files, the Phoenix session); both are read from the Makefile itself.
``--serial`` runs them all one after another instead, for comparison. Each session's output goes
to a log file in ``--out``. Meanwhile every process's CPU time is sampled from ``/proc`` (every
``--period`` seconds) and summed by kind of process: conversation actors, the local model (vLLM),
Serve, Ray's own services, idle Ray workers, the pytest processes, ...

Figures (the last line, one JSON object): each session's wall time and exit code, the total, the
machine's busy CPU-seconds against what its cores offered in that time (``busy_fraction``: below
1, some of the run waited on something other than the CPU), CPU-seconds by kind of process, and
the bound that CPU work sets: busy CPU-seconds / cores.

    python benchmarks/suite_time.py [--serial] [--out DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import tempfile
import threading
import time
from collections import defaultdict
from pathlib import Path

from harness import reporter

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from tests.lanes import Lanes  # how make test runs its sessions

progress = reporter("suite_time")
ROOT = Path(__file__).resolve().parent.parent

# Kinds of process, by what their command line holds (first match wins; an exited process may
# have left only its 15-character name, hence the short marks).
KINDS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("conversation actors", ("ray::Conversati",)),
    ("local model (vLLM)", ("VLLM::", "ray::ServeReplica:llm")),
    (
        "Serve (controller, proxy, gateway, embedder)",
        ("ray::ServeRepli", "ray::ServeCon", "ray::ProxyActor"),
    ),
    ("workflow coordinators", ("ray::WorkflowCo",)),
    ("executor (pool, dispatchers, task workers)", ("ray::Executor", "ray::execute_task")),
    ("idle Ray workers", ("ray::IDLE", "ray::Idle")),
    (
        "Ray's services (GCS, raylets, dashboard, agents, log monitor)",
        (
            "gcs_server",
            "raylet",
            "log_monitor",
            "dashboard",
            "ray::DashboardA",
            "ray::RuntimeEnv",
            "runtime_env",
            "--log_dir=",
        ),
    ),
    ("other Ray actors and tasks", ("ray::",)),
    ("pytest", ("pytest",)),
    ("wonder up (the newcomer tier)", ("wonder up", "wonder chat", "wonder down")),
    (
        "tests' servers (PostgreSQL, Redis, moto, Chromium, Phoenix, Node)",
        ("postgres", "redis-server", "moto_server", "chromium", "phoenix", "node "),
    ),
)


def kind_of(command: str) -> str:
    for kind, marks in KINDS:
        if any(mark in command for mark in marks):
            return kind
    return "other processes (kernel threads included)"


def make_variable(name: str) -> str:
    """A variable of the Makefile as make expands it."""
    rule = f"print-var: ; $(info $({name}))@:\n"  # printed as make has it, quotes kept
    done = subprocess.run(
        ["make", "-s", "--no-print-directory", "-f", "Makefile", "-f", "-", "print-var"],
        input=rule,
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=True,
    )
    return done.stdout.strip()


def lanes() -> list[list[list[str]]]:
    """The lanes of pytest sessions ``make test`` runs (each session a list of arguments)."""
    main = shlex.split(make_variable("MAIN_SESSION"))
    side = [shlex.split(session) for session in shlex.split(make_variable("SIDE_SESSIONS"))]
    return [[main], side]


class CpuSampler:
    """Every process's CPU time (utime + stime), the last value seen per pid, and the machine's."""

    def __init__(self, period_s: float) -> None:
        self.period_s = period_s
        self.hz = os.sysconf("SC_CLK_TCK")
        self._first: dict[int, int] = {}
        self._seen: dict[int, tuple[str, int]] = {}
        self._stop = threading.Event()
        self._machine_start = self._machine()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._snap(initial=True)
        self._thread.start()

    @staticmethod
    def _machine() -> tuple[int, int]:
        with open("/proc/stat") as stat:
            values = [int(v) for v in stat.readline().split()[1:]]
        return sum(values) - values[3] - values[4], sum(values)  # busy, all (idle, iowait out)

    def _snap(self, initial: bool = False) -> None:
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            pid = int(entry)
            try:
                with open(f"/proc/{pid}/stat") as stat:
                    raw = stat.read()
                with open(f"/proc/{pid}/cmdline", "rb") as cmd:
                    command = cmd.read().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
            fields = raw[raw.rindex(")") + 2 :].split()
            ticks = int(fields[11]) + int(fields[12])
            name = command or raw[raw.index("(") + 1 : raw.rindex(")")]
            if initial:
                self._first[pid] = ticks  # what ran before the run is not counted
            self._seen[pid] = (name, ticks)

    def _run(self) -> None:
        while not self._stop.wait(self.period_s):
            self._snap()

    def busy(self) -> tuple[float, float]:
        """Busy CPU-seconds, and CPU-seconds the cores offered, since the start."""
        now = self._machine()
        return (
            (now[0] - self._machine_start[0]) / self.hz,
            (now[1] - self._machine_start[1]) / self.hz,
        )

    def stop(self) -> dict[str, float]:
        self._stop.set()
        self._thread.join()
        self._snap()
        by_kind: dict[str, float] = defaultdict(float)
        for pid, (name, ticks) in self._seen.items():
            by_kind[kind_of(name)] += (ticks - self._first.get(pid, 0)) / self.hz
        return {k: round(v) for k, v in sorted(by_kind.items(), key=lambda kv: -kv[1])}


def report_progress(sampler: CpuSampler, started: float, stop: threading.Event) -> None:
    while not stop.wait(60):
        busy, offered = sampler.busy()
        progress(
            f"{time.monotonic() - started:.0f} s, machine busy {busy / max(offered, 1):.0%} so far"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--serial", action="store_true", help="every session one after another (one lane)"
    )
    parser.add_argument("--out", type=Path, default=None, help="where the logs go (a temp dir)")
    parser.add_argument("--period", type=float, default=3.0, help="CPU sampling period, s")
    args = parser.parse_args()
    out = args.out or Path(tempfile.mkdtemp(prefix="wonder-suite-"))
    planned = lanes()
    if args.serial:  # one lane: every session one after another
        planned = [[session for lane in planned for session in lane]]
    cores = os.cpu_count() or 1
    sampler = CpuSampler(args.period)
    started = time.monotonic()
    stop = threading.Event()
    threading.Thread(target=report_progress, args=(sampler, started, stop), daemon=True).start()
    progress(f"{sum(map(len, planned))} sessions in {len(planned)} lane(s); logs in {out}")
    run = Lanes(planned, out, stream_first=False)
    rc = run.run()
    stop.set()
    wall = time.monotonic() - started
    busy, offered = sampler.busy()
    by_kind = sampler.stop()
    print(
        json.dumps(
            {
                "sessions": {
                    s.name: {
                        "pytest": shlex.join(s.args),
                        "wall_s": round(s.wall_s),
                        "began_s": round(s.began - started),
                        "rc": s.rc,
                        "summary": s.summary,
                    }
                    for s in sorted(run.sessions, key=lambda s: (s.lane, s.index))
                },
                "rc": rc,
                "wall_s": round(wall),
                "cores": cores,
                "machine_busy_cpu_s": round(busy),
                "busy_fraction": round(busy / max(offered, 1), 3),
                "cpu_bound_s": round(busy / cores),
                "cpu_s_by_kind": by_kind,
                "logs": str(out),
            }
        )
    )


if __name__ == "__main__":
    main()
