"""``turboyolo audit --data D --weights W``: likely label mistakes, ranked, from out-of-sample predictions.

The options are the fields of :class:`turboyolo.audit.job.AuditArgs` (and the run directory's); the job
is :func:`turboyolo.audit.job.run_audit`.
"""

from __future__ import annotations

import argparse

from turboyolo.audit.job import GROUPS, AuditRequest, run_audit
from turboyolo.options import add_flags, add_input_flags, read_flags


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_input_flags(parser, "cfg", "weights", "data", required=("data",))
    add_flags(parser, GROUPS)


def run(args: argparse.Namespace) -> int:
    groups = read_flags(args, GROUPS)
    report = run_audit(AuditRequest(args.data, args.weights, args.cfg, groups["audit"], groups["run_dir"]))
    print(report.summary())
    return 0
