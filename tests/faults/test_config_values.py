"""Configuration values as a user writes them wrong: every value of a ``--config`` / ``--hyp`` file, a
data.yaml, a Darknet ``.data``, a ``.cfg`` and a checkpoint's config is held to its type and range, and the
error names the file and the key (issue 31, round three); YAML aliases cannot blow a file up.

Each case fails before any training starts, so the tests are fast; none leaves a run directory.
"""

from __future__ import annotations

import pytest

from synth import make_dataset, micro_cfg


@pytest.fixture
def setup(tmp_path):
    data = make_dataset(tmp_path / "data", 2, 1)
    cfg = micro_cfg(tmp_path / "micro.cfg", batch=2)
    return tmp_path, cfg, data


def _train(cli, tmp_path, cfg, data, *extra):
    return cli("train", "--cfg", cfg, "--data", data, "--workers", 0, "--project", tmp_path / "runs",
               "--epochs", 1, "--evaluation-interval", 0, *extra)


def _no_run_dir(tmp_path):
    runs = tmp_path / "runs"
    assert not runs.exists() or not list(runs.iterdir())


@pytest.mark.parametrize(("text", "key", "said"), [
    ('epochs: "ten"', "epochs", "the text 'ten'"),
    ("epochs: 1.5", "epochs", "1.5"),  # trained "epoch 2/1.5"
    ("epochs: 0", "epochs", ">= 1"),
    ("lr: nan", "lr", "the text 'nan'"),  # a string
    ("lr: .nan", "lr", "not a finite number"),  # YAML's NaN
    ("optim: {lr: .inf}", "lr", "not a finite number"),
    ("augment: 'no'", "augment", "true or false"),
    ("seed: yes", "seed", "True"),  # YAML 1.1's yes is a bool, not 1
    ("aug_scale: [1]", "aug_scale", "a list of 2 numbers"),
    ("anchors: [10, 14, x]", "anchors", "the text 'x'"),
    ("img_size: 70", "img-size", "multiple of 32"),
    ("mosaic: 2", "mosaic", "probability"),
    ("cache: lots", "cache", "one of"),
])
def test_a_config_value_of_the_wrong_type_or_range_is_named(setup, cli, text, key, said):
    tmp_path, cfg, data = setup
    config = tmp_path / "recipe.yaml"
    config.write_text(text + "\n")
    run = _train(cli, tmp_path, cfg, data, "--config", config)
    run.assert_clean(1)
    assert f"--config {config}" in run.output and key in run.output and said in run.output, run.output
    _no_run_dir(tmp_path)


@pytest.mark.parametrize(("text", "said"), [
    ("mosaic: two", "the text 'two'"),
    ("degrees: .nan", "not a finite number"),
    ("fliplr: 1.5", "probability"),
    ("loss: {box_gain: '1 x'}", "the text '1 x'"),
])
def test_a_hyp_value_of_the_wrong_type_or_range_is_named(setup, cli, text, said):
    tmp_path, cfg, data = setup
    hyp = tmp_path / "hyp.yaml"
    hyp.write_text(text + "\n")
    run = _train(cli, tmp_path, cfg, data, "--hyp", hyp)
    run.assert_clean(1)
    assert f"--hyp {hyp}" in run.output and said in run.output, run.output


BOMB = 'a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]\n' + "".join(
    f"{name}: &{name} [{','.join([f'*{prev}'] * 9)}]\n" for prev, name in zip("abcdefgh", "bcdefghi"))


def test_a_yaml_alias_bomb_is_refused_before_it_grows(setup, cli):
    tmp_path, cfg, data = setup
    assert len(BOMB) < 400  # 9^9 = 387 million strings once expanded
    bomb = tmp_path / "bomb.yaml"
    bomb.write_text(BOMB)
    run = _train(cli, tmp_path, cfg, data, "--config", bomb)
    run.assert_clean(1)
    assert f"--config {bomb}" in run.output and "aliases expand" in run.output, run.output
    hyp = _train(cli, tmp_path, cfg, data, "--hyp", bomb)
    hyp.assert_clean(1)
    assert "aliases expand" in hyp.output
    (tmp_path / "bomb-data.yaml").write_text(f"train: {data.parent}/train.txt\nval: {data.parent}/valid.txt\n"
                                             + BOMB)
    as_data = _train(cli, tmp_path, cfg, tmp_path / "bomb-data.yaml")
    as_data.assert_clean(1)
    assert "bomb-data.yaml" in as_data.output and "aliases expand" in as_data.output


def test_numbers_written_as_yaml_1_1_text_still_read(setup):
    from turboyolo.train.config import read_config

    tmp_path, _, _ = setup
    recipe = tmp_path / "r.yaml"
    recipe.write_text("lr: 1e-3\nepochs: '12'\nweight_decay: 5.0e-4\n")  # 1e-3 is text to YAML 1.1
    assert read_config(recipe) == {"lr": 0.001, "epochs": 12, "weight_decay": 0.0005}


def test_aliases_within_the_bound_still_read(setup, cli):
    from turboyolo.formats.yamlfile import parse_yaml

    assert parse_yaml("base: &b {mosaic: 0.5}\naugment: {<<: *b, mixup: 0.1}", "x")["augment"] == {
        "mosaic": 0.5, "mixup": 0.1}
    with pytest.raises(Exception, match="cycle of aliases"):
        parse_yaml("&a [*a]", "x")


@pytest.mark.parametrize(("line", "said"), [
    ("nc: two", "nc: 'two'"),
    ("nc: 1.5", "whole number"),
    ("nc: 0", "at least 1"),
    ("names: {a: apple}", "`names` id 'a'"),
    ("names: 5", "`names` must be a list"),
    ("names: [null]", "`names` entry 0"),
    ("path: 5", "`path` must be a folder"),
    ("val: ''", "`val` holds an empty path"),  # was the whole data set folder, train images included
])
def test_a_data_yaml_value_of_the_wrong_type_is_named(setup, cli, line, said):
    tmp_path, cfg, data = setup
    root = data.parent
    names = "" if line.startswith("names") else "names: [c0]\n"
    yaml_file = tmp_path / "set.yaml"
    yaml_file.write_text(f"train: {root}/train.txt\nval: {root}/valid.txt\n{names}{line}\n")
    run = _train(cli, tmp_path, cfg, yaml_file)
    run.assert_clean(1)
    assert str(yaml_file) in run.output and said in run.output, run.output
    _no_run_dir(tmp_path)


@pytest.mark.parametrize("classes", ["two", "1.5", "0", "-1"])
def test_a_darknet_data_class_count_that_is_not_a_count_is_named(setup, cli, classes):
    tmp_path, cfg, data = setup
    bad = tmp_path / "bad.data"
    bad.write_text(data.read_text().replace("classes=1", f"classes = {classes}"))
    run = _train(cli, tmp_path, cfg, bad)
    run.assert_clean(1)
    assert f"{bad}: classes = {classes}" in run.output and "class count" in run.output, run.output


def test_a_darknet_data_path_without_a_value_is_named(setup, cli):
    tmp_path, cfg, data = setup
    bad = tmp_path / "bad.data"
    bad.write_text("".join(line if not line.startswith("valid") else "valid =\n"
                           for line in data.read_text().splitlines(keepends=True)))
    run = _train(cli, tmp_path, cfg, bad)
    run.assert_clean(1)
    assert f"{bad}: `valid =` has no value" in run.output, run.output  # was the .data file's folder


@pytest.mark.parametrize(("old", "new", "said"), [
    ("learning_rate=0.001", "learning_rate=nan", "not a finite number"),
    ("momentum=0.9", "momentum=inf", "not a finite number"),
    ("width=64", "width=1e9", "outside 32..16384"),
    ("max_batches=0", "max_batches=-5", "must be >= 0"),
    ("size=3", "size=0", "size=0 must be >= 1"),
])
def test_a_cfg_value_out_of_range_is_named(setup, cli, old, new, said):
    tmp_path, cfg, data = setup
    text = cfg.read_text()
    assert old in text
    bad = tmp_path / "bad.cfg"
    bad.write_text(text.replace(old, new, 1))
    run = _train(cli, tmp_path, bad, data)
    run.assert_clean(1)
    assert str(bad) in run.output and said in run.output, run.output


def test_an_unknown_config_name_lists_the_packaged_recipes(setup, cli):
    from turboyolo.train.config import RECIPES

    tmp_path, cfg, data = setup
    run = _train(cli, tmp_path, cfg, data, "--config", "treez")
    run.assert_clean(1)
    assert "--config treez" in run.output and "packaged recipe" in run.output
    assert RECIPES and all(name in run.output for name in RECIPES), run.output


def test_a_flag_that_is_not_a_finite_number_is_refused(setup, cli):
    tmp_path, cfg, data = setup
    for flag in ("--degrees", "--time-limit", "--translate"):
        run = _train(cli, tmp_path, cfg, data, flag, "nan")
        run.assert_clean(1)
        assert f"{flag} (" in run.output and "not a finite number" in run.output, run.output
    _no_run_dir(tmp_path)


def test_the_python_api_holds_keywords_to_their_types(setup):
    from turboyolo.api import train
    from turboyolo.errors import ConfigError

    tmp_path, cfg, data = setup
    with pytest.raises(ConfigError, match=r"--epochs \(epochs\): expected an integer, got 1.5"):
        train(cfg=cfg, data=data, epochs=1.5, project=str(tmp_path / "runs"))
    _no_run_dir(tmp_path)


@pytest.mark.parametrize("value", ["''", "5", "[null]"])
def test_an_unlabeled_entry_that_is_not_a_path_is_named(setup, cli, tiny_model, value):
    tmp_path, _, data = setup
    cfg, weights, _, _ = tiny_model
    yaml_file = tmp_path / "set.yaml"
    yaml_file.write_text(f"train: {data.parent}/train.txt\nval: {data.parent}/valid.txt\nnames: [a, b]\n"
                         f"unlabeled: {value}\n")
    run = cli("label", "--data", yaml_file, "--cfg", cfg, "--weights", weights,
              "--project", tmp_path / "runs")
    run.assert_clean(1)
    assert f"{yaml_file}: `unlabeled` must be an image folder" in run.output, run.output  # '' was every image
    _no_run_dir(tmp_path)
