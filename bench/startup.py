"""Time from the command to the first optimizer step of ``turboyolo train``, cold and warm.

The command runs in a child Python with a global optimizer step hook: at the end of the first
``optimizer.step()`` it records the wall seconds since the command started and the CPU seconds of its
whole process tree (itself, its live loader workers and the reaped ones), then ends the run. Each line
the run prints is stamped with the same two clocks, so the phases of the start show (scan, anchors,
pipeline measurement, model, first batch).

"Cold" deletes the data set's scan cache and the fitted-anchor cache in ``$TURBOYOLO_CACHE`` first
(the OS page cache is left alone); "warm" is the run after it. On a shared machine read the CPU
seconds: wall times grow with other jobs' load.

Usage::

    PYTHONPATH=src .venv/bin/python bench/startup.py --data /work/scale/s10k/scale.data \
        --cfg /work/scale/tiny80.cfg [--runs cold,warm] [--json out.json] [-- extra train flags]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

PRELUDE = r"""
import functools, importlib, json, os, resource, sys, time
from torch.optim.optimizer import register_optimizer_step_post_hook

def tree_cpu():
    me, ticks = os.getpid(), os.sysconf("SC_CLK_TCK")
    parents, cpu = {}, {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            fields = open(f"/proc/{name}/stat").read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        parents[int(name)] = int(fields[1])
        cpu[int(name)] = (int(fields[11]) + int(fields[12])) / ticks
    def inside(pid):
        while pid in parents and pid != me:
            pid = parents[pid]
        return pid == me
    live = sum(c for pid, c in cpu.items() if pid != me and inside(pid))
    own = resource.getrusage(resource.RUSAGE_SELF)
    reaped = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + reaped.ru_utime + reaped.ru_stime + live

T0 = float(os.environ["STARTUP_T0"])

def stamp(text):
    sys.__stdout__.write(json.dumps({"wall": time.time() - T0, "cpu": tree_cpu(), "line": text}) + "\n")
    sys.__stdout__.flush()

class Stamped:
    def __init__(self):
        self.buffer = ""
    def write(self, text):
        self.buffer += text
        while "\n" in self.buffer:
            line, self.buffer = self.buffer.split("\n", 1)
            stamp(line.rsplit("\r", 1)[-1])  # a progress bar's redraws: its last state
        return len(text)
    def flush(self):
        pass
    def isatty(self):
        return False

STEPS = []

def first_step(optimizer, args, kwargs):
    if STEPS:
        return
    STEPS.append(1)
    own = resource.getrusage(resource.RUSAGE_SELF)
    sys.__stdout__.write(json.dumps({"first_step": True, "wall": time.time() - T0, "cpu": tree_cpu(),
                                     "main_cpu": own.ru_utime + own.ru_stime,
                                     "maxrss_mb": own.ru_maxrss / 1024})
                         + "\n")
    sys.__stdout__.flush()
    if not os.environ.get("STARTUP_CONTINUE"):
        os._exit(0)

def timed(function, label):
    @functools.wraps(function)
    def run(*args, **kwargs):
        wall, cpu = time.time() - T0, tree_cpu()
        try:
            return function(*args, **kwargs)
        finally:
            sys.__stdout__.write(json.dumps({"timed": label, "wall": time.time() - T0, "cpu": tree_cpu(),
                                             "wall_s": time.time() - T0 - wall, "cpu_s": tree_cpu() - cpu})
                                 + "\n")
            sys.__stdout__.flush()
    return run

register_optimizer_step_post_hook(first_step)
sys.stdout = Stamped()
stamp("python and torch imported")
for spec in json.loads(os.environ.get("STARTUP_TIMED", "[]")):  # "module:Class.function"
    module, _, qualname = spec.partition(":")
    owner = importlib.import_module(module)
    *parents, name = qualname.split(".")
    for parent in parents:
        owner = getattr(owner, parent)
    setattr(owner, name, timed(getattr(owner, name), qualname))
"""

# The console script imports the package before torch (its environment defaults, OMP_WAIT_POLICY and
# THP_MEM_ALLOC_ENABLE, are set before torch loads), so this child does too, before the prelude's torch.
TURBOYOLO = "import turboyolo\n" + PRELUDE + r"""
from turboyolo.cli import main
sys.argv = ["turboyolo", *json.loads(os.environ["STARTUP_ARGS"])]
code = main(sys.argv[1:])
stamp(f"ended (exit {code})")
"""


def clear_caches(data: str | Path, cache: Path) -> None:
    """The scan cache and report files of ``data``'s two splits, every fitted-anchor cache entry and every
    kept start-of-run pipeline measurement."""
    from turboyolo.data.scan import _cache_file

    os.environ["TURBOYOLO_CACHE"] = str(cache)
    for split in ("train", "val"):
        scan = _cache_file(Path(data), split)
        for path in (scan, scan.with_suffix(".txt")):
            path.unlink(missing_ok=True)
    for kept in ("anchors", "pipeline"):
        shutil.rmtree(cache / kept, ignore_errors=True)


class TreeMemory:
    """Samples, every ``interval`` seconds in a thread, the PSS of process ``pid`` and its descendants
    (a forked worker's shared pages counted once, unlike an RSS sum); ``peak_mb`` is the largest sum
    seen, ``peak_main_mb`` the process's own largest PSS, ``processes`` the most processes at once."""

    def __init__(self, pid: int, interval: float = 0.5):
        self.pid, self.interval = pid, interval
        self.peak_mb = self.peak_main_mb = 0.0
        self.processes = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _tree(self) -> list[int]:
        children: dict[int, list[int]] = {}
        for name in os.listdir("/proc"):
            if name.isdigit():
                try:
                    ppid = int(Path(f"/proc/{name}/stat").read_text().rsplit(")", 1)[1].split()[1])
                except (OSError, IndexError, ValueError):
                    continue
                children.setdefault(ppid, []).append(int(name))
        tree, todo = [], [self.pid]
        while todo:
            pid = todo.pop()
            tree.append(pid)
            todo.extend(children.get(pid, ()))
        return tree

    @staticmethod
    def _pss_mb(pid: int) -> float:
        try:
            for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
                if line.startswith("Pss:"):
                    return int(line.split()[1]) / 1024
        except (OSError, ValueError):
            pass
        return 0.0

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            tree = self._tree()
            sizes = {pid: self._pss_mb(pid) for pid in tree}
            self.peak_mb = max(self.peak_mb, sum(sizes.values()))
            self.peak_main_mb = max(self.peak_main_mb, sizes.get(self.pid, 0.0))
            self.processes = max(self.processes, sum(1 for size in sizes.values() if size))

    def stop(self) -> dict:
        self._stop.set()
        self._thread.join()
        return {"tree_pss_peak_mb": round(self.peak_mb, 1), "main_pss_peak_mb": round(self.peak_main_mb, 1),
                "tree_processes_max": self.processes}


def time_to_first_step(args: list[str], env: dict[str, str] | None = None, timeout: float = 3600, *,
                       child: str = TURBOYOLO, python: str = sys.executable, timed: tuple[str, ...] = (),
                       finish: bool = False) -> dict:
    """Run ``turboyolo ARGS`` (or another ``child`` script built on :data:`PRELUDE`, which reads
    ``STARTUP_ARGS``) in ``python`` until its first optimizer step; the result: ``wall``, ``cpu``
    (process tree), ``maxrss_mb`` at that step, ``memory`` (the tree's PSS until that step, see
    :class:`TreeMemory`), ``lines`` (each printed line with its wall and CPU stamps) and ``timed`` (one
    entry per call of each ``"module:Class.function"`` in ``timed``: its wall and CPU seconds).
    ``finish``: let the run go on to its end after the first step (a checkpoint), instead of ending it."""
    env = dict(os.environ if env is None else env)
    env["STARTUP_T0"] = repr(time.time())
    env["STARTUP_ARGS"] = json.dumps(args)
    env["STARTUP_TIMED"] = json.dumps(list(timed))
    if finish:
        env["STARTUP_CONTINUE"] = "1"
    proc = subprocess.Popen([python, "-c", child], env=env, stdout=subprocess.PIPE, text=True,
                            start_new_session=True)
    memory = TreeMemory(proc.pid)
    result: dict = {"lines": [], "timed": []}
    try:
        deadline = time.time() + timeout
        for raw in proc.stdout:
            try:
                item = json.loads(raw)
            except ValueError:  # written past the stamping (a C library, os.write)
                item = {"line": raw.rstrip("\n")}
            if item.get("first_step"):
                result.update(wall=item["wall"], cpu=item["cpu"], main_cpu=item["main_cpu"],
                              maxrss_mb=item["maxrss_mb"], memory=memory.stop())
            elif "timed" in item:
                result["timed"].append(item)
            else:
                result["lines"].append(item)
            if time.time() > deadline:
                break
    finally:
        if "memory" not in result:
            result["memory"] = memory.stop()
        if finish:
            try:
                result["exit"] = proc.wait(timeout=max(1.0, deadline - time.time()))
            except subprocess.TimeoutExpired:
                result["exit"] = None
        try:
            os.killpg(proc.pid, signal.SIGKILL)  # the run's own session: its loader workers too
        except ProcessLookupError:
            pass
        proc.wait()
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", required=True)
    parser.add_argument("--cfg", required=True)
    parser.add_argument("--runs", default="cold,warm", help="comma-separated: cold, warm")
    parser.add_argument("--json", type=Path, help="write the results here")
    parser.add_argument("--quiet", action="store_true", help="only the summary, not every stamped line")
    args, extra = parser.parse_known_args()
    extra = [a for a in extra if a != "--"]
    cache = Path(os.environ.get("TURBOYOLO_CACHE") or Path.home() / ".cache" / "turboyolo")
    results = {}
    with tempfile.TemporaryDirectory() as project:
        for run in args.runs.split(","):
            if run == "cold":
                clear_caches(args.data, cache)
            train = ["train", "--cfg", args.cfg, "--data", args.data, "--img-size", "320", "--batch", "8",
                     "--subdivisions", "1", "--max-batches", "2", "--epochs", "1", "--evaluation-interval",
                     "0", "--project", project, "--name", run, *extra]
            result = time_to_first_step(train)
            results[run] = result
            if not args.quiet:
                for item in result["lines"]:
                    print(f"{item['wall']:8.1f} s {item['cpu']:8.1f} cpu  {item['line'][:150]}")
            print(f"{run}: first step at {result.get('wall', float('nan')):.1f} s wall, "
                  f"{result.get('cpu', float('nan')):.1f} CPU s, max RSS {result.get('maxrss_mb', 0):.0f} MB")
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
