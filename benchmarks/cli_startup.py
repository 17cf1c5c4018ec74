"""How long ``wonder`` takes before it does anything: ``wonder --help`` and an API command's
imports, beside a bare interpreter and ``import ray`` measured in the same run.

Each case is a fresh ``python`` process, run ``--runs`` times (default 7) in turn with the others
so a busy machine slows them alike; the figures are the median wall time and the median CPU time
(user + system) of the process, and each case's CPU time as a ratio to the bare interpreter's.
``--before PATH``: also time ``--help`` of another checkout (a ``cluster/cli.py`` of an older
tree) with ``PYTHONPATH=PATH``.

Prints one line per case, then ONE JSON object as the last line.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

CASES: dict[str, list[str]] = {
    "python": ["-c", "pass"],
    "wonder --help": ["-m", "cluster.cli", "--help"],
    "wonder --version": ["-m", "cluster.cli", "--version"],
    "api command imports": [
        "-c",
        "import cluster.cli.entry, cluster.cli.conversations, cluster.cli.tail, cluster.cli.agents",
    ],
    "import ray": ["-c", "import ray"],
}


def run_once(args: list[str], pythonpath: Path) -> tuple[float, float]:
    """Wall and CPU seconds of one fresh interpreter running ``args``."""
    env = {**os.environ, "PYTHONPATH": str(pythonpath)}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    subprocess.run([sys.executable, *args], env=env, cwd=pythonpath, check=True,
                   stdout=subprocess.DEVNULL)  # fmt: skip
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--before", type=Path, help="a checkout to time `--help` of as well")
    options = parser.parse_args()
    cases = {name: (args, ROOT) for name, args in CASES.items()}
    if options.before:
        cases["wonder --help (before)"] = (CASES["wonder --help"], options.before.resolve())
    samples: dict[str, list[tuple[float, float]]] = {name: [] for name in cases}
    load_before = os.getloadavg()[0]
    for _ in range(options.runs):
        for name, (args, path) in cases.items():
            samples[name].append(run_once(args, path))
    floor = statistics.median(cpu for _, cpu in samples["python"])
    load = [load_before, os.getloadavg()[0]]
    summary: dict[str, object] = {"runs": options.runs, "load_1m": load}
    for name, found in samples.items():
        wall = statistics.median(w for w, _ in found)
        cpu = statistics.median(c for _, c in found)
        summary[name] = {"wall_s": round(wall, 3), "cpu_s": round(cpu, 3),
                         "cpu_vs_python": round(cpu / floor, 2)}  # fmt: skip
        print(f"{name:<24} wall {wall:6.3f} s   cpu {cpu:6.3f} s   cpu x{cpu / floor:5.2f}")
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
