"""``turboyolo doctor``: measure each stage on your data and hardware, name the bottleneck, suggest settings.

Data-only mode: ``--assume-step-ms T`` (a training step of T ms per mini-batch) or ``--assume-gpu h200``
(the step time of that GPU from the model's FLOPs) skips the step measurement, so the data side can be
judged on a machine whose own step is far too slow to ever wait for data (such as a small CPU).
Writes ``doctor.md`` and ``doctor.json`` into the run directory (``runs/doctor/exp``...). The job is
:func:`turboyolo.doctor.job.run_doctor`; this module maps the flags to its request.
"""

from __future__ import annotations

import argparse

from turboyolo.cli import add_model_flags, add_run_flags


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_model_flags(parser)
    add_run_flags(parser, "doctor")
    parser.add_argument("-d", "--data", required=True, help=".data file, data.yaml or image folder")
    parser.add_argument("--split", default="train", help="which split to measure")
    parser.add_argument("--device", default="auto", help="cpu, cuda, cuda:N or auto")
    parser.add_argument("--img-size", type=int, default=None, help="network input side (default: the cfg's)")
    parser.add_argument("--batch", type=int, default=None, help="images per iteration (default: the cfg's)")
    parser.add_argument("--subdivisions", type=int, default=None, help="mini-batches per iteration")
    parser.add_argument("--amp", default="auto", choices=("auto", "off", "bf16", "fp16"))
    parser.add_argument("--n-cpu", "--workers", dest="workers", type=int, default=None,
                        help="the loader workers you train with (default: CPUs - 1)")
    parser.add_argument("--worker-counts", default=None,
                        help="comma-separated worker counts to measure the loader at (default: 0,1,2,4,... "
                        "up to CPUs - 1)")
    parser.add_argument("--cache", default="none", choices=("none", "ram", "disk"),
                        help="the --cache you train with")
    parser.add_argument("--augment-on", default="cpu", choices=("cpu", "device"),
                        help="the --augment-on you train with")
    step = parser.add_mutually_exclusive_group()
    step.add_argument("--assume-step-ms", type=float, default=None,
                      help="data-only mode: take the training step as this many ms per mini-batch")
    step.add_argument("--assume-gpu", default=None, choices=("h200", "h100", "a100"),
                      help="data-only mode: take the step time of this GPU (from the model's FLOPs)")
    parser.add_argument("--images", type=int, default=32, help="images of the split used per stage")
    parser.add_argument("--repeats", type=int, default=3, help="timed repeats per stage (median)")


def run(args: argparse.Namespace) -> int:
    from turboyolo.doctor.job import DoctorRequest, run_doctor
    from turboyolo.errors import FlagError

    counts = None
    if args.worker_counts:
        try:
            counts = tuple(int(c) for c in args.worker_counts.split(","))
        except ValueError as err:
            raise FlagError(f"--worker-counts {args.worker_counts!r}: comma-separated integers") from err
    request = DoctorRequest(
        data=args.data, cfg=args.cfg, split=args.split, device=args.device, img_size=args.img_size,
        batch=args.batch, subdivisions=args.subdivisions, amp=args.amp, workers=args.workers,
        worker_counts=counts, cache=args.cache, augment_on=args.augment_on,
        assume_step_ms=args.assume_step_ms, assume_gpu=args.assume_gpu, images=args.images,
        repeats=args.repeats, run_dir=(args.project, args.name, args.exist_ok),
    )
    report = run_doctor(request)
    print(report.summary())
    return 0
