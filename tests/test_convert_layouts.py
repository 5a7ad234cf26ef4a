"""l3convert's judgement of a source tree: a tree laid out as another dataset, or a class that
holds 16-bit label maps among colour images, is refused by `folder`, a small dataset is planned in enough shards for every worker, and an unfinished
conversion is named as such."""

import os

import numpy as np
import pytest

from l3codec.converters import convert
from l3codec.converters.cli import main as l3convert
from l3codec.converters.layouts import find_layout
from l3codec.converters.pipeline import AUTO_SHARDS_PER_SPLIT, plan_shards
from l3codec.dataset import open_dataset

from dataset_trees import cityscapes_tree, folder_tree, save_png


def test_folder_refuses_a_cityscapes_tree_and_names_the_command(tmp_path, capsys):
    cityscapes_tree(tmp_path / "city")
    assert l3convert(["folder", str(tmp_path / "city"), str(tmp_path / "dst"), "--no-progress"]) == 2
    error = capsys.readouterr().err
    assert "laid out as cityscapes" in error and "l3convert cityscapes SRC DST" in error
    assert not (tmp_path / "dst").exists()
    forced = find_layout("folder", str(tmp_path / "city"), force=True)
    assert forced.class_names == ["gtFine", "leftImg8bit"]


def test_folder_refuses_an_imagenet_tree(tmp_path, capsys):
    for split in ("train", "val"):
        for wnid in ("n01440764", "n01443537"):
            save_png(os.fspath(tmp_path / "net" / split / wnid / "a.png"), np.zeros((4, 4), np.uint8))
    assert l3convert(["folder", str(tmp_path / "net"), str(tmp_path / "dst"), "--no-progress"]) == 2
    assert "laid out as imagenet" in capsys.readouterr().err


def test_a_plain_class_tree_is_still_a_folder(tmp_path):
    folder_tree(tmp_path / "src", classes=("train", "val"))  # class names that are split names
    assert find_layout("folder", str(tmp_path / "src")).class_names == ["train", "val"]


def test_folder_refuses_a_class_of_photographs_holding_a_16_bit_label_map(tmp_path, capsys):
    from PIL import Image

    rng = np.random.default_rng(0)
    for i in range(5):  # grey and colour, PNG and JPEG: all 8-bit, one kind
        save_png(os.fspath(tmp_path / "src" / "cats" / f"{i}.png"), rng.integers(0, 256, (8, 8, 3), dtype=np.uint8))
    Image.fromarray(rng.integers(0, 256, (8, 8), dtype=np.uint8)).save(tmp_path / "src" / "cats" / "grey.jpg")
    assert find_layout("folder", str(tmp_path / "src")).class_names == ["cats"]
    save_png(os.fspath(tmp_path / "src" / "cats" / "3_instanceIds.png"), np.full((8, 8), 26001, np.uint16))
    assert l3convert(["folder", str(tmp_path / "src"), str(tmp_path / "dst"), "--no-progress"]) == 2
    error = capsys.readouterr().err
    assert "mixes 16-bit single-channel images with colour ones (3_instanceIds.png, 0.png)" in error
    assert "--force" in error
    assert not (tmp_path / "dst").exists()
    assert len(find_layout("folder", str(tmp_path / "src"), force=True).splits["train"]) == 7
    save_png(os.fspath(tmp_path / "maps" / "a_labelIds.png"), np.zeros((8, 8), np.uint8))  # label maps alone pass
    save_png(os.fspath(tmp_path / "maps" / "a_instanceIds.png"), np.full((8, 8), 26001, np.uint16))
    assert len(find_layout("folder", str(tmp_path / "maps")).splits["train"]) == 2


def test_the_workers_compile_ahead_for_the_sample_depths_the_folder_holds(tmp_path):
    from l3codec.converters.pipeline import _compile_list

    folder_tree(tmp_path / "photos")
    assert find_layout("folder", str(tmp_path / "photos")).image_bits == (8,)
    save_png(os.fspath(tmp_path / "maps" / "a_labelIds.png"), np.zeros((8, 8), np.uint8))
    save_png(os.fspath(tmp_path / "maps" / "a_instanceIds.png"), np.full((8, 8), 26001, np.uint16))
    maps = find_layout("folder", str(tmp_path / "maps"))
    assert maps.image_bits == (8, 16)
    assert set(_compile_list(maps, "fast", verify=True)) == {
        (verb, "fast", bits, channels) for verb in ("encode", "decode") for bits, channels in ((8, 3), (16, 1))}


def test_auto_shard_size_gives_every_worker_a_shard_on_a_small_dataset(tmp_path):
    classes = tuple(f"c{n}" for n in range(AUTO_SHARDS_PER_SPLIT))
    folder_tree(tmp_path / "src", per_class=4, classes=classes)
    for parent, _, files in os.walk(tmp_path / "src"):
        for name in files:  # about 0.5 MB a file (bytes after the image): a 32 MB split
            with open(os.path.join(parent, name), "ab") as file:
                file.write(bytes(500_000))
    layout = find_layout("folder", str(tmp_path / "src"))
    assert len(plan_shards(layout, 256_000_000)) == 1  # a fixed large size: one shard, one busy worker
    assert AUTO_SHARDS_PER_SPLIT <= len(plan_shards(layout, None)) <= 2 * AUTO_SHARDS_PER_SPLIT


def test_inspect_on_an_unfinished_conversion_says_so(tmp_path, capsys):
    folder_tree(tmp_path / "src")
    convert("folder", tmp_path / "src", tmp_path / "dst", workers=0, progress=False)
    os.remove(tmp_path / "dst" / "manifest.json")  # the state a run killed before its manifest leaves
    os.makedirs(tmp_path / "dst" / ".l3convert", exist_ok=True)
    (tmp_path / "dst" / ".l3convert" / "plan.json").write_text("{}")
    assert l3convert(["inspect", str(tmp_path / "dst")]) == 2
    assert "unfinished l3convert conversion" in capsys.readouterr().err
    with pytest.raises(FileNotFoundError, match="--resume"):
        open_dataset(tmp_path / "dst", "train")
