"""The default path stays plain (docs/ARCHITECTURE.md): a default ``turboyolo detect`` and a short default
``turboyolo train``, run as a user types them, import neither the Darknet-exact engine (``turboyolo.exact``)
nor the tuned CPU kernels (``turboyolo.model.cpu_kernels``), and no turboyolo module they import calls
ctypes, a private ``torch._*`` name or ``torch.ops.*``; and the same command twice writes the same files.
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from synth import make_dataset, micro_cfg, random_batch_norm

SRC = Path(__file__).parents[1] / "src"
OPT_IN = ("turboyolo.exact", "turboyolo.model.cpu_kernels")  # engines a run has to ask for
# torch modules without an underscore that PyTorch does not document either
UNDOCUMENTED = ("torch.multiprocessing.reductions",)
# the one module a default run may import although it reaches past PyTorch's documented API, and why; the
# scan below fails on any other
ALLOWED = {"turboyolo.data.loader": (
    "loader workers (forked processes only: _worker_init) register a ForkingPickler reducer that sends "
    "small tensors inside the pickle and hands every other tensor to PyTorch's own reducer, "
    "torch.multiprocessing.reductions.reduce_tensor (undocumented): a shared-memory handle per small "
    "tensor cost the main process ~1 ms per image on the device path. It changes how bytes travel, never "
    "their values (tests/data/test_loader.py)")}


def _command(cache: Path, *args: str, importtime: bool = False) -> subprocess.CompletedProcess:
    """``python -m turboyolo ARGS`` as a user runs it (this checkout's code, ``cache`` as its cache)."""
    env = {**os.environ, "PYTHONPATH": str(SRC), "TURBOYOLO_CACHE": str(cache)}
    flags = ["-X", "importtime"] if importtime else []
    return subprocess.run([sys.executable, *flags, "-m", "turboyolo", *map(str, args)], capture_output=True,
                          text=True, env=env, timeout=600)


def _imported(stderr: str) -> set[str]:
    """The modules ``python -X importtime`` reports (``import time: self | cumulative | name``)."""
    return {line.rsplit("|", 1)[1].strip() for line in stderr.splitlines()
            if line.startswith("import time:") and "|" in line} - {"imported package"}


def private_uses(path: Path) -> list[str]:
    """What the module at ``path`` uses beyond documented public APIs: ``ctypes``, a ``torch`` name with a
    private part (``torch._foreach_copy_``, ``torch.nn.modules.batchnorm._BatchNorm``, ``from torch._x
    import``), ``torch.ops.*`` and :data:`UNDOCUMENTED`, each as ``line: dotted.name``."""
    tree = ast.parse(path.read_text(), str(path))
    names: dict[str, str] = {}  # local name -> the dotted torch path it stands for
    found = []

    def check(dotted: str, line: int) -> None:
        parts = dotted.split(".")
        private = any(p.startswith("_") and not (p.startswith("__") and p.endswith("__")) for p in parts)
        beyond = private or parts[1:2] == ["ops"] or dotted.startswith(UNDOCUMENTED)
        if parts[0] == "ctypes" or (parts[0] == "torch" and beyond):
            found.append(f"{line}: {dotted}")

    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                check(alias.name, node.lineno)
                names[alias.asname or alias.name.split(".")[0]] = alias.name if alias.asname else \
                    alias.name.split(".")[0]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            for alias in node.names:
                check(f"{node.module}.{alias.name}", node.lineno)
                names[alias.asname or alias.name] = f"{node.module}.{alias.name}"
    inner = {id(node.value) for node in ast.walk(tree) if isinstance(node, ast.Attribute)}
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and id(node) not in inner:  # whole chains only
            chain, value = [node.attr], node.value
            while isinstance(value, ast.Attribute):
                chain.append(value.attr)
                value = value.value
            if isinstance(value, ast.Name) and value.id in names:
                check(".".join([names[value.id], *reversed(chain)]), node.lineno)
    return sorted(set(found))


def _source(module: str) -> Path | None:
    relative = Path(*module.split("."))
    for path in (SRC / relative / "__init__.py", SRC / relative.with_suffix(".py")):
        if path.is_file():
            return path
    return None


def _assert_plain(imported: set[str], what: str) -> None:
    ours = sorted(name for name in imported if name == "turboyolo" or name.startswith("turboyolo."))
    assert "turboyolo.train.engine" in ours or "turboyolo.infer.predict" in ours, ours  # the scan saw the run
    assert not [name for name in ours if name.startswith(OPT_IN)], f"{what} imported an opt-in engine"
    uses = {name: found for name in ours if name not in ALLOWED and (path := _source(name))
            and (found := private_uses(path))}
    assert not uses, f"{what} imports modules beyond PyTorch's documented API: {uses}"


def test_the_scan_finds_private_torch_ctypes_and_ops(tmp_path):
    """The check below can fail: the opt-in engines are what it would refuse on the default path."""
    kernels = private_uses(SRC / "turboyolo" / "model" / "cpu_kernels.py")
    assert any("ctypes" in use for use in kernels) and any("torch.ops.mkldnn" in use for use in kernels)
    assert any("torch._nnpack_available" in use for use in kernels)
    assert any("ctypes" in use for use in private_uses(SRC / "turboyolo" / "exact" / "step.py"))
    loader = [use.split(": ")[1] for use in private_uses(SRC / "turboyolo" / "data" / "loader.py")]
    assert loader == ["torch.multiprocessing.reductions.reduce_tensor"]  # the one allowed: ALLOWED says why
    sample = tmp_path / "sample.py"
    sample.write_text("import torch\nfrom torch import nn\nimport torch.nn.functional as F\n"
                      "from torch._dynamo import config\nx = nn.modules.batchnorm._BatchNorm\n"
                      "torch._foreach_copy_([], [])\ny = torch.__version__\nz = F.conv2d\n")
    assert private_uses(sample) == ["4: torch._dynamo.config", "5: torch.nn.modules.batchnorm._BatchNorm",
                                    "6: torch._foreach_copy_"]


@pytest.mark.slow
def test_a_default_detect_and_train_stay_on_the_public_path(tmp_path):
    data = make_dataset(tmp_path / "data", 4, 2)
    cfg = micro_cfg(tmp_path / "m.cfg", batch=2)
    cache, runs = tmp_path / "cache", tmp_path / "runs"
    train = _command(cache, "train", "--cfg", cfg, "--data", data, "--project", runs, "--name", "t",
                     "--epochs", "1", "--max-batches", "2", "--device", "cpu", "--cache", "none",
                     "--augment-on", "cpu", "--workers", "0", importtime=True)
    assert train.returncode == 0, train.stderr[-3000:]
    _assert_plain(_imported(train.stderr), "turboyolo train")
    detect = _command(cache, "detect", tmp_path / "data" / "images" / "val", "--weights",
                      runs / "t" / "weights" / "last.pt", "--project", runs, "--name", "d", "--device", "cpu",
                      importtime=True)
    assert detect.returncode == 0, detect.stderr[-3000:]
    _assert_plain(_imported(detect.stderr), "turboyolo detect")


def _weights(tmp_path: Path) -> tuple[Path, Path]:
    """A micro network with trained-looking batch norm and its objectness priors: many boxes at a low
    threshold."""
    from turboyolo.formats.darknet_cfg import parse_cfg
    from turboyolo.model.darknet import Darknet
    from turboyolo.model.loading import init_head_priors, save_darknet_weights

    cfg = micro_cfg(tmp_path / "m.cfg", num_classes=2, batch=2)
    torch.manual_seed(3)
    model = Darknet(parse_cfg(cfg))
    random_batch_norm(model, seed=3)
    init_head_priors(model, {head.layer_index - 1 for head in model.heads})
    return cfg, save_darknet_weights(model, tmp_path / "m.weights")


@pytest.mark.slow
def test_the_same_detect_or_test_twice_writes_the_same_files(tmp_path):
    data = make_dataset(tmp_path / "data", 2, 6, num_classes=2, seed=4)
    cfg, weights = _weights(tmp_path)
    images = tmp_path / "data" / "images" / "val"
    outputs = []
    for name in ("a", "b"):
        run = _command(tmp_path / "cache", "detect", images, "--cfg", cfg, "--weights", weights,
                       "--conf-thres", "0.001", "--save-txt", "--save-conf", "--project", tmp_path / "runs",
                       "--name", name)
        assert run.returncode == 0, run.stderr[-3000:]
        folder = tmp_path / "runs" / name
        outputs.append({path.relative_to(folder): path.read_bytes() for path in sorted(folder.rglob("*"))
                        if path.is_file() and path.name != ".turboyolo-outputs.json"})
    assert outputs[0] == outputs[1] and len(outputs[0][Path("predictions.json")]) > 1000
    tests = [_command(tmp_path / "cache", "test", "--cfg", cfg, "--weights", weights, "--data", data)
             for _ in range(2)]
    assert all(run.returncode == 0 for run in tests), tests[0].stderr[-3000:]
    # what test reports, from its table on (the scan line before it says the second read its cache),
    # less the speed line (the time split: seconds, which differ from run to run)
    reports = ["\n".join(line for line in run.stdout[run.stdout.index("class "):].splitlines()
                         if not line.startswith("speed: ")) for run in tests]
    assert reports[0] == reports[1] and "mAP" in reports[0]
