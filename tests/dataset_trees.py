"""Tiny source trees for the converter and container tests: real PNG and JPEG files, with the arrays
they hold (JPEG pixels as Pillow decodes them)."""

from __future__ import annotations

import json
import os

import numpy as np
from PIL import Image

HEIGHT, WIDTH = 24, 40


def _random(rng, shape, dtype=np.uint8):
    return rng.integers(0, np.iinfo(dtype).max + 1, shape, dtype=dtype)


def save_png(path, array) -> np.ndarray:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    Image.fromarray(array).save(path)
    return array


def save_jpeg(path, array) -> np.ndarray:
    """Writes a JPEG; returns the pixels Pillow decodes from it (what the converter must keep)."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    Image.fromarray(array).save(path, quality=90)
    with Image.open(path) as image:
        return np.asarray(image)


def folder_tree(root, *, seed=0, per_class=3, classes=("cat", "dog")) -> dict:
    """root/{class}/{n}.png or .jpg; {relative path without suffix: (label, pixels)}."""
    rng = np.random.default_rng(seed)
    expected = {}
    for label, name in enumerate(classes):
        for n in range(per_class):
            if n % 3 == 2:
                pixels = save_jpeg(os.path.join(root, name, f"{n}.jpg"), _random(rng, (HEIGHT, WIDTH, 3)))
            elif n % 3 == 1:
                pixels = save_png(os.path.join(root, name, f"{n}.png"), _random(rng, (HEIGHT, WIDTH)))
            else:
                pixels = save_png(os.path.join(root, name, f"{n}.png"), _random(rng, (HEIGHT, WIDTH, 3)))
            expected[f"{name}/{n}"] = (label, pixels)
    return expected


def cityscapes_tree(root, *, seed=0, cities=("aachen", "bonn"), per_city=2, test_images=2) -> dict:
    """leftImg8bit + gtFine for train; test without labels. {split: {key: {field: pixels, 'json': bytes}}}."""
    rng = np.random.default_rng(seed)
    expected = {"train": {}, "test": {}}
    for split in ("train", "test"):
        for city in cities:
            count = per_city if split == "train" else test_images
            for n in range(count):
                stem = f"{city}_{n:06d}_000019"
                sample = {"image": save_png(os.path.join(root, "leftImg8bit", split, city,
                                                         f"{stem}_leftImg8bit.png"),
                                            _random(rng, (HEIGHT, WIDTH, 3)))}
                if split == "train":
                    base = os.path.join(root, "gtFine", split, city, f"{stem}_gtFine_")
                    sample["labelIds"] = save_png(base + "labelIds.png", _random(rng, (HEIGHT, WIDTH)) % 34)
                    # 16-bit instance ids (class * 1000 + instance), as Cityscapes stores them
                    sample["instanceIds"] = save_png(base + "instanceIds.png",
                                                     (_random(rng, (HEIGHT, WIDTH), np.uint16) % 34000))
                    sample["color"] = save_png(base + "color.png", _random(rng, (HEIGHT, WIDTH, 4)))
                    polygons = json.dumps({"imgHeight": HEIGHT, "imgWidth": WIDTH, "objects": [n]}).encode()
                    with open(base + "polygons.json", "wb") as file:
                        file.write(polygons)
                    sample["json"] = polygons
                expected[split][stem] = sample
    return expected


def imagenet_tree(root, *, seed=0, wnids=("n01440764", "n01443537"), per_class=2, flat_val=True) -> dict:
    """train/{wnid}/*.JPEG, val flat with LOC_val_solution.csv, LOC_synset_mapping.txt.

    {split: {key: (label, pixels)}}."""
    rng = np.random.default_rng(seed)
    expected = {"train": {}, "val": {}}
    for label, wnid in enumerate(wnids):
        for n in range(per_class):
            key = f"{wnid}_{n}"
            expected["train"][key] = (label, save_jpeg(os.path.join(root, "train", wnid, f"{key}.JPEG"),
                                                       _random(rng, (HEIGHT, WIDTH, 3))))
    lines = ["ImageId,PredictionString"]
    for n in range(len(wnids) * per_class):
        key = f"ILSVRC2012_val_{n + 1:08d}"
        label = n % len(wnids)
        folder = os.path.join(root, "val") if flat_val else os.path.join(root, "val", wnids[label])
        expected["val"][key] = (label, save_jpeg(os.path.join(folder, f"{key}.JPEG"),
                                                 _random(rng, (HEIGHT, WIDTH, 3))))
        lines.append(f"{key},{wnids[label]} 1 2 3 4")
    with open(os.path.join(root, "LOC_val_solution.csv"), "w") as file:
        file.write("\n".join(lines) + "\n")
    with open(os.path.join(root, "LOC_synset_mapping.txt"), "w") as file:
        file.write("".join(f"{wnid} class {i}, a name\n" for i, wnid in enumerate(wnids)))
    return expected


def converted_folder(root, samples: int, **options):
    """A folder tree of `samples` images (two classes) under root/src, converted to root/l3
    in this process (workers=0); options go to convert. Returns root/l3."""
    from l3codec.converters import convert

    folder_tree(root / "src", per_class=samples // 2)
    convert("folder", root / "src", root / "l3", workers=0, progress=False, **options)
    return root / "l3"
