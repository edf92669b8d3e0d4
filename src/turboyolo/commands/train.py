"""``turboyolo train``: train a Darknet .cfg on a data set (PyTorch-YOLOv3's flags work unchanged).

The flags come from the fields of :class:`turboyolo.train.config.TrainConfig`; the loop is
:func:`turboyolo.train.fit.fit`.
"""

from __future__ import annotations

import argparse

from turboyolo.options import add_input_flags
from turboyolo.train.config import RECIPES, TrainConfig, add_flags
from turboyolo.train.fit import fit


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_input_flags(parser, "cfg", "weights", "data")
    parser.add_argument("--resume", help="checkpoint (weights/last.pt) to continue exactly where it stopped")
    parser.add_argument("--config", help="a run's config.yaml, a recipe file or a packaged recipe "
                        f"({', '.join(RECIPES)}; darknet: Darknet-exact training): every option it holds "
                        "(cfg, data and weights too), flags given as well win")
    parser.add_argument("--hyp", help="YAML file of augmentation and loss values (any of their flags' names, "
                        "e.g. mosaic: 0.5); flags given as well win")
    add_flags(parser)


def run(args: argparse.Namespace) -> int:
    result = fit(TrainConfig.from_flags(args))
    print(f"run directory: {result.run_dir}")
    return 0
