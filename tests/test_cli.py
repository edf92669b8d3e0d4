from __future__ import annotations

import argparse
import re
import subprocess
import sys

import pytest

from turboyolo import __version__
from turboyolo.cli import COMMANDS, FlagParser, build_parser, main


def test_version(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["--version"])
    assert exit_info.value.code == 0 and __version__ in capsys.readouterr().out


@pytest.mark.parametrize("command", [name for name, _, _ in COMMANDS])
def test_every_subcommand_has_help(command, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main([command, "-h"])
    assert exit_info.value.code == 0
    assert "usage: turboyolo " + command in capsys.readouterr().out


def test_python_dash_m_entry_point():
    proc = subprocess.run([sys.executable, "-m", "turboyolo", "--version"], capture_output=True, text=True)
    assert proc.returncode == 0 and __version__ in proc.stdout


def test_underscore_aliases_for_hyphenated_flags():
    parser = FlagParser()
    parser.add_argument("--conf-thres", type=float)
    assert parser.parse_args(["--conf_thres", "0.3"]).conf_thres == 0.3
    assert parser.parse_args(["--conf-thres", "0.4"]).conf_thres == 0.4


def test_model_flag_spellings():
    parser = build_parser()
    for argv in (
        ["detect", "x.jpg", "--cfg", "a.cfg", "--weights", "w"],
        ["detect", "x.jpg", "--model", "a.cfg", "--pretrained_weights", "w"],
        ["detect", "x.jpg", "-m", "a.cfg", "--pretrained-weights", "w"],
    ):
        args = parser.parse_args(argv)
        assert (args.cfg, args.weights) == ("a.cfg", "w")


def test_bad_flag_exits_with_usage(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["detect", "--no-such-flag"])
    assert exit_info.value.code == 2 and "unrecognized arguments" in capsys.readouterr().err


def test_cfg_command_writes_generated_cfg(tmp_path, capsys):
    out = tmp_path / "custom.cfg"
    assert (
        main(["cfg", "yolov3", "--num-classes", "3", "--batch", "16", "--subdivisions", "4", "-o", str(out)])
        == 0
    )
    from turboyolo.formats.darknet_cfg import parse_cfg

    spec = parse_cfg(out)
    assert spec.num_classes == 3 and spec.net.batch == 16 and spec.net.subdivisions == 4
    assert (
        main(["cfg", "yolov3", "--num-classes", "3", "--batch", "10", "--subdivisions", "4", "-o", str(out)])
        == 1
    )
    assert "not divisible" in capsys.readouterr().err


@pytest.mark.parametrize("command", ["detect", "label", "export"])
def test_iou_thres_means_matching_iou_only(command, capsys):
    """--iou-thres is test's and train's matching IoU (PyTorch-YOLOv3's); the NMS IoU is --nms-thres."""
    with pytest.raises(SystemExit):
        main([command, "x.jpg", "--weights", "w", "--data", "d", "--iou-thres", "0.5"])
    assert "the IoU of NMS is --nms-thres" in capsys.readouterr().err
    args = build_parser("test").parse_args(["test", "--weights", "w", "--data", "d", "--iou-thres", "0.6",
                                            "--nms-thres", "0.3"])
    assert (args.iou_thres, args.nms_thres) == (0.6, 0.3)


def test_only_the_command_that_runs_is_imported():
    code = ("import sys; from turboyolo.cli import main\n"
            "try:\n    main(['-h'])\nexcept SystemExit:\n    pass\n"
            "assert 'torch' not in sys.modules\n"
            "assert not any(m.startswith('turboyolo.commands.') for m in sys.modules)")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


@pytest.mark.parametrize("command", [["detect", "x.jpg"], ["export"]])
def test_missing_weights_are_named(command, capsys):
    assert main(command) == 1
    assert "--weights is required" in capsys.readouterr().err


SHARED = ("--data", "--cfg", "--weights", "--img-size", "--device", "--amp", "--project", "--name",
          "--exist-ok", "--output")


def _options(parser: argparse.ArgumentParser, path: str):
    """(command path, option string, help without its default, option strings) of every flag, nested
    subcommands (``bench data``) included."""
    for action in parser._actions:  # argparse keeps no public list of a parser's actions
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _options(sub, f"{path} {name}")
        for flag in action.option_strings:
            yield path, flag, re.sub(r" \(default: [^)]*\)$", "", action.help or ""), action.option_strings


def test_shared_options_have_one_declaration_each():
    """--data, --cfg, --img-size, --device, --project, ... mean one thing, with one help text and the same
    spellings, in every command that takes them (declared once, in turboyolo.options)."""
    seen: dict[str, set] = {flag: set() for flag in SHARED}
    takers: dict[str, list] = {flag: [] for flag in SHARED}
    for name, _, _ in COMMANDS:
        for path, flag, text, spellings in _options(build_parser(only=name), name):
            if flag in SHARED and text != "==SUPPRESS==":
                seen[flag].add((text, tuple(spellings)))
                takers[flag].append(path)
    for flag in SHARED:
        assert len(seen[flag]) == 1, (flag, seen[flag])
    assert len(takers["--data"]) >= 7 and len(takers["--img-size"]) >= 8, takers  # each command taking it


def test_pytorch_yolov3_spellings_still_parse():
    parser = build_parser()
    args = parser.parse_args(["test", "-w", "w.pt", "-d", "d.data", "-m", "a.cfg", "--img_size", "320", "-v"])
    assert (args.weights, args.data, args.cfg, args.img_size) == ("w.pt", "d.data", "a.cfg", 320)
    args = parser.parse_args(["train", "--model", "a.cfg", "--pretrained_weights", "w", "-d", "d.data",
                              "--logdir", "logs"])
    assert (args.cfg, args.weights, args.data, args.project) == ("a.cfg", "w", "d.data", "logs")
    args = parser.parse_args(["bench", "data", "--data", "d", "--img-size", "64", "--n-cpu", "2"])
    assert (args.data, args.img_size, args.workers) == ("d", 64, 2)
    args = parser.parse_args(["prepare", "--data", "d", "--img_size", "64"])
    assert (args.data, args.img_size) == ("d", 64)
