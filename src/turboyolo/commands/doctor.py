"""``turboyolo doctor``: measure each stage on your data and hardware, name the bottleneck, suggest settings.

Data-only mode: ``--assume-step-ms T`` (a training step of T ms per mini-batch) or ``--assume-gpu h200``
(the step time of that GPU from the model's FLOPs) skips the step measurement, so the data side can be
judged on a machine whose own step is far too slow to ever wait for data (such as a small CPU).
Writes ``doctor.md`` and ``doctor.json`` into the run directory (``runs/doctor/exp``...). The options are
the fields of :class:`turboyolo.doctor.job.DoctorArgs`; the job is :func:`turboyolo.doctor.job.run_doctor`.
"""

from __future__ import annotations

import argparse

from turboyolo.doctor.job import GROUPS, DoctorRequest, run_doctor
from turboyolo.options import add_flags, add_input_flags, read_flags


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_input_flags(parser, "cfg", "data", required=("data",))
    add_flags(parser, GROUPS)


def run(args: argparse.Namespace) -> int:
    report = run_doctor(DoctorRequest(args.data, args.cfg, **read_flags(args, GROUPS)), log=print)
    print(report.summary())
    return 0
