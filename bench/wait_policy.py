"""OpenMP's wait policy on the CPU: a long training run and ``turboyolo test``, with libgomp's default
(threads spin a while at each barrier before they sleep) and with ``OMP_WAIT_POLICY=PASSIVE`` (they
sleep at once), one run after the other, alternating, on the same files.

- ``train``: ``turboyolo train --img-size 320 --batch 8 --max-batches N`` with ``--workers`` as given;
  the wall and the process tree's CPU seconds from the end of step ``--skip`` to the end of step N (a
  global torch step hook), i.e. the steady state, the start-up left out.
- ``test``: ``turboyolo test --img-size 320 --device cpu`` of a checkpoint on the data's val split: the
  whole command's wall and CPU.

The setting is put in the child's environment before it imports torch (libgomp reads it once, when it
loads), and the child imports torch before turboyolo, so each run measures the policy it names although
``import turboyolo`` now defaults to PASSIVE (its default lands after libgomp has read the environment, in
the forked loader workers too). ``--workers`` takes numbers (the default, on a 2-core machine: 1).

    PYTHONPATH=src .venv/bin/python bench/wait_policy.py --data D.data --cfg tiny80.cfg \\
        --rounds 2 --workers 1 --steps 40 --skip 10 [--weights last.pt] --json out.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from startup import PRELUDE  # noqa: E402

CHILD = PRELUDE.replace("register_optimizer_step_post_hook(first_step)", "") + r"""
MARKS = {int(k) for k in os.environ["POLICY_MARKS"].split(",")}
count = [0]
def mark(optimizer, args, kwargs):
    count[0] += 1
    if count[0] in MARKS:
        item = {"step": count[0], "wall": time.time() - T0, "cpu": tree_cpu()}
        sys.__stdout__.write(json.dumps(item) + "\n")
        sys.__stdout__.flush()
register_optimizer_step_post_hook(mark)
from turboyolo.cli import main
code = main(json.loads(os.environ["STARTUP_ARGS"]))
sys.__stdout__.write(json.dumps({"end": code, "wall": time.time() - T0, "cpu": tree_cpu()}) + "\n")
"""


def run_child(args: list[str], policy: str | None, marks: tuple[int, ...] = (0,)) -> list[dict]:
    env = dict(os.environ)
    env.pop("OMP_WAIT_POLICY", None)
    if policy:
        env["OMP_WAIT_POLICY"] = policy
    env.update(STARTUP_T0=repr(time.time()), STARTUP_ARGS=json.dumps(args),
               POLICY_MARKS=",".join(map(str, marks)))
    out = subprocess.run([sys.executable, "-c", CHILD], env=env, capture_output=True, text=True, check=False)
    items = []
    for line in out.stdout.splitlines():
        try:
            item = json.loads(line)
        except ValueError:
            continue
        if isinstance(item, dict) and ("step" in item or "end" in item):
            items.append(item)
    if not items or items[-1].get("end") != 0:
        raise SystemExit(f"run failed: {args}\n{out.stderr[-3000:]}")
    return items


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", required=True)
    parser.add_argument("--cfg", required=True)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=150)
    parser.add_argument("--skip", type=int, default=10)
    parser.add_argument("--workers", nargs="+", default=["1"])
    parser.add_argument("--weights", help="a checkpoint: also time `turboyolo test` of it")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    policies = {"default": None, "PASSIVE": "PASSIVE"}
    rows: dict[str, list[dict]] = {}
    with tempfile.TemporaryDirectory() as project:
        for round_ in range(args.rounds):
            order = list(policies) if round_ % 2 == 0 else list(policies)[::-1]
            for workers in args.workers:
                for name in order:
                    train = ["train", "--cfg", args.cfg, "--data", args.data, "--img-size", "320", "--batch",
                             "8", "--subdivisions", "1", "--max-batches", str(args.steps), "--epochs", "1",
                             "--evaluation-interval", "0", "--workers", workers, "--project", project,
                             "--name", f"{name}{workers}{round_}"]
                    first, last, _ = run_child(train, policies[name], (args.skip, args.steps))
                    item = {"wall": last["wall"] - first["wall"], "cpu": last["cpu"] - first["cpu"]}
                    item = {k: v / (args.steps - args.skip) for k, v in item.items()}
                    rows.setdefault(f"train workers={workers} {name}", []).append(item)
                    print(f"round {round_} train workers={workers} {name}: {item['wall']:.3f} s "
                          f"({item['cpu']:.3f} CPU s) per step", flush=True)
            if args.weights:
                for name in order:
                    test = ["test", "--weights", args.weights, "--cfg", args.cfg, "--data", args.data,
                            "--img-size", "320", "--device", "cpu"]
                    (end,) = run_child(test, policies[name])
                    item = {"wall": end["wall"], "cpu": end["cpu"]}
                    rows.setdefault(f"test {name}", []).append(item)
                    print(f"round {round_} test {name}: {item['wall']:.1f} s ({item['cpu']:.1f} CPU s)",
                          flush=True)
    print("\n| run | median wall | median CPU | rounds (wall / CPU) |\n|---|---|---|---|")
    for key, items in rows.items():
        each = ", ".join(f"{i['wall']:.3f} / {i['cpu']:.3f}" for i in items)
        print(f"| {key} | {statistics.median(i['wall'] for i in items):.3f} | "
              f"{statistics.median(i['cpu'] for i in items):.3f} | {each} |")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
