"""The package's layering (pyproject.toml [tool.importlinter]) holds: an import that breaks it fails here."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[1]


def test_import_contracts_are_kept():
    lint = Path(sys.executable).parent / "lint-imports"
    proc = subprocess.run([str(lint), "--config", str(ROOT / "pyproject.toml")], cwd=ROOT,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    assert "4 kept, 0 broken" in proc.stdout


def test_no_package_is_in_an_import_cycle_with_its_own_modules():
    """The sibling contract compares modules of one package; this holds the level above: no package's
    ``__init__`` imports a module that (through any chain) imports the package back."""
    import grimp

    graph = grimp.build_graph("turboyolo")
    packages = {name.rsplit(".", 1)[0] for name in graph.modules if "." in name}
    cycles = [(package, chain) for package in sorted(packages)
              for imported in sorted(graph.find_modules_directly_imported_by(package))
              if (chain := graph.find_shortest_chain(importer=imported, imported=package))]
    assert not cycles, cycles


def test_old_module_paths_still_import_and_warn():
    import importlib

    from turboyolo.data import anchors
    from turboyolo.infer import export, predict

    for old, moved in (("anchors", anchors), ("export", export), ("predict", predict)):
        sys.modules.pop(f"turboyolo.{old}", None)
        with pytest.warns(DeprecationWarning, match=f"turboyolo.{old} moved to {moved.__name__}"):
            assert importlib.import_module(f"turboyolo.{old}") is moved
    assert callable(predict.Predictor) and callable(anchors.kmeans_anchors)


def test_turboyolo_train_is_the_api_function_however_the_package_is_imported():
    import turboyolo
    from turboyolo import api
    from turboyolo.train import fit  # the training package and its modules import by name
    from turboyolo.train.config import TrainConfig

    assert turboyolo.train is api.train and callable(turboyolo.train)
    assert fit.fit is not None and TrainConfig is not None
    assert turboyolo.load is api.load and turboyolo.detect is api.detect
    assert type(sys.modules["turboyolo.train"]) is type(sys)  # a plain module, class untouched
    assert turboyolo.__version__ == "0.2.0"
