"""The quick start's main job with nothing beside the checkout: `l3convert demo DIR` writes a small
Cityscapes-like tree (street scenes drawn from smooth noise, their labelIds and instanceIds maps),
converts it with `--verify`, reads it back through the training loader with two workers, checks
every pixel against its source PNG and prints where the time went.

The scenes are generated, deterministic for a seed, and photograph-like enough to exercise the
codec's paths (smooth gradients, textured regions, sharp boundaries), not to measure it: figures
come from bench/ on real photographs."""

from __future__ import annotations

import os
import sys
import time

import numpy as np

# Cityscapes labelIds of the regions drawn
SKY, BUILDING, VEGETATION, ROAD, SIDEWALK, CAR = 23, 11, 21, 7, 8, 26
CITIES = ("aachen", "bochum")
HEIGHT, WIDTH = 256, 512
GRAIN, SENSOR_NOISE = 12, 0.5  # a surface's texture and a camera's noise, in grey levels


def smooth_noise(rng, shape, scale: int) -> np.ndarray:
    """Noise in 0..1 with features about `scale` pixels wide: coarse noise, bilinearly upsampled."""
    coarse = rng.random((shape[0] // scale + 2, shape[1] // scale + 2))
    y = np.arange(shape[0]) / scale
    x = np.arange(shape[1]) / scale
    y0, x0 = y.astype(int), x.astype(int)
    fy, fx = (y - y0)[:, None], (x - x0)[None, :]
    top = coarse[y0][:, x0] * (1 - fx) + coarse[y0][:, x0 + 1] * fx
    bottom = coarse[y0 + 1][:, x0] * (1 - fx) + coarse[y0 + 1][:, x0 + 1] * fx
    return top * (1 - fy) + bottom * fy


def street_scene(rng, height: int = HEIGHT, width: int = WIDTH) -> tuple:
    """(RGB uint8 image, labelIds uint8, instanceIds uint16) of one generated street scene."""
    rows = np.arange(height)[:, None]
    horizon = int(height * rng.uniform(0.40, 0.55))
    labels = np.where(rows < horizon, SKY, ROAD).astype(np.uint8) * np.ones((1, width), np.uint8)
    labels[horizon + (height - horizon) // 2:, : width // 6] = SIDEWALK
    skyline = horizon - (smooth_noise(rng, (1, width), 48)[0] * horizon * 0.7).astype(int)
    labels[(rows < horizon) & (rows >= skyline[None, :])] = BUILDING
    trees = (smooth_noise(rng, (height, width), 24) > 0.72) & (rows < horizon + 10) & (rows > horizon // 3)
    labels[trees] = VEGETATION
    instances = labels.astype(np.uint16)
    for car in range(int(rng.integers(1, 4))):
        x0 = int(rng.integers(0, width - 90))
        y0 = int(rng.integers(horizon, height - 30))
        labels[y0:y0 + 28, x0:x0 + 80] = CAR
        instances[y0:y0 + 28, x0:x0 + 80] = CAR * 1000 + car
    colours = {SKY: (110, 160, 225), BUILDING: (150, 130, 115), VEGETATION: (70, 120, 50),
               ROAD: (95, 95, 100), SIDEWALK: (170, 160, 150), CAR: (30, 60, 140)}
    palette = np.zeros((256, 3), np.float64)
    for label, colour in colours.items():
        palette[label] = colour
    shade = smooth_noise(rng, (height, width), 64)[..., None] * 40 - 20  # light across the scene
    texture = (smooth_noise(rng, (height, width), 3)[..., None] - 0.5) * GRAIN  # surfaces' grain
    sky = (rows < horizon)[..., None] & (labels == SKY)[..., None]
    image = palette[labels] + shade + np.where(sky, rows[..., None] * 0.25, texture)
    image += rng.normal(0, SENSOR_NOISE, image.shape)
    return np.clip(image, 0, 255).astype(np.uint8), labels, instances


def write_tree(root: str, *, seed: int = 0, per_city: dict | None = None) -> list:
    """A Cityscapes tree under root: leftImg8bit and gtFine for train and val; the image paths written."""
    from PIL import Image

    rng = np.random.default_rng(seed)
    per_city = per_city or {"train": 4, "val": 2}
    written = []
    for split, count in per_city.items():
        for city in CITIES:
            for n in range(count):
                stem = f"{city}_{n:06d}_000019"
                image, labels, instances = street_scene(rng)
                images = os.path.join(root, "leftImg8bit", split, city)
                labels_dir = os.path.join(root, "gtFine", split, city)
                os.makedirs(images, exist_ok=True)
                os.makedirs(labels_dir, exist_ok=True)
                path = os.path.join(images, f"{stem}_leftImg8bit.png")
                Image.fromarray(image).save(path)
                Image.fromarray(labels).save(os.path.join(labels_dir, f"{stem}_gtFine_labelIds.png"))
                Image.fromarray(instances).save(os.path.join(labels_dir, f"{stem}_gtFine_instanceIds.png"))
                written.append(path)
    return written


def run(directory: str, *, workers: int = 2, seed: int = 0, out=None) -> int:
    """Generate, convert (verified), read back through the Loader, check; 0 when every pixel matches.
    Reports to out (default: sys.stdout)."""
    from . import first_use, warmup
    from .converters import convert
    from .format import L3Error

    out = out or sys.stdout
    timings = {}
    source, converted = os.path.join(directory, "cityscapes"), os.path.join(directory, "cityscapes-l3")
    if os.path.exists(converted):
        raise L3Error(f"{converted} exists: give the demo a new directory")

    started = time.perf_counter()
    paths = write_tree(source, seed=seed)
    timings["generate the source tree"] = time.perf_counter() - started
    print(f"wrote {len(paths)} scenes and their label maps ({WIDTH}x{HEIGHT}) to {source}", file=out)

    started, misses = time.perf_counter(), first_use.coordinator.misses
    for verb in warmup.VERBS:  # what the conversion and the loader use: compiled once, then cached
        for channels, bits in ((3, 8), (1, 8), (1, 16)):
            step_started = time.perf_counter()
            warmup.exercise(verb, "compact", bits, channels)
            if first_use.coordinator.misses > misses:  # compiling: how far it is
                print(f"l3codec: the {first_use.described((verb, 'compact', bits, channels))} is ready "
                      f"({time.perf_counter() - step_started:.1f} s)", file=sys.stderr, flush=True)
    timings["compile the codec (or load it from the cache)"] = time.perf_counter() - started

    started = time.perf_counter()
    summary = convert("cityscapes", source, converted, workers=0, verify=True, progress=False)
    timings["convert and verify"] = time.perf_counter() - started
    print(f"converted to {converted}:\n{summary}", file=out)

    started = time.perf_counter()
    mismatches, read = _read_back(converted, source, workers)
    timings[f"read back through the Loader ({workers} workers)"] = time.perf_counter() - started
    verdict = "every pixel equal to its source" if not mismatches else f"{mismatches} differ from their sources"
    print(f"read {read} samples (image, labelIds, instanceIds) back through the Loader: {verdict}", file=out)
    print("where the time went:", file=out)
    for step, seconds in timings.items():
        print(f"  {seconds:6.1f} s  {step}", file=out)
    print(f"next: l3convert inspect {converted}; train from it as README.md's 'Training from it' shows",
          file=out)
    return 1 if mismatches else 0


def _read_back(converted: str, source: str, workers: int) -> tuple:
    """(samples whose pixels differ from the source PNGs, samples read): the train split, whole frames."""
    from PIL import Image

    from .loader import Decode, L3Dataset, Loader

    fields = ("image", "labelIds", "instanceIds")
    dataset = L3Dataset(converted, split="train", fields=fields)
    loader = Loader(dataset, 2, shuffle=False, decode=Decode("cpu", device="cpu"), workers=workers)
    suffixes = {"image": "leftImg8bit/train/{city}/{key}_leftImg8bit.png",
                "labelIds": "gtFine/train/{city}/{key}_gtFine_labelIds.png",
                "instanceIds": "gtFine/train/{city}/{key}_gtFine_instanceIds.png"}
    mismatches = read = 0
    for batch in loader:
        for n, key in enumerate(batch["key"]):
            stem = key.rsplit("/", 1)[-1]
            city = stem.split("_", 1)[0]
            for field in fields:
                path = os.path.join(source, suffixes[field].format(city=city, key=stem))
                expected = np.asarray(Image.open(path))
                got = batch[field][n].numpy()
                got = got.transpose(1, 2, 0) if got.ndim == 3 else got
                mismatches += int(not np.array_equal(got, expected))
            read += 1
    return mismatches, read
