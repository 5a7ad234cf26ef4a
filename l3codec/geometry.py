"""Decode-time augmentation geometry: which region of a sample to decode, what size to give it, flipped or not.

One Crop is drawn per sample and applied to every image-like field of it (the image and
its label maps), so they always keep the same geometry. The region is what the decoder
decodes (only the tiles it touches); a different output size means a resize on the
device afterwards (bilinear for images, nearest for label maps). numpy only, no torch.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .format import L3Error


@dataclass(frozen=True)
class Crop:
    """One sample's geometry: decode region (y, x, h, w), output size (h, w), horizontal flip."""

    region: tuple
    size: tuple
    flip: bool = False

    @property
    def resized(self) -> bool:
        return tuple(self.region[2:]) != tuple(self.size)


def _pair(size) -> tuple:
    if isinstance(size, (int, np.integer)):
        size = (size, size)
    height, width = (int(v) for v in size)
    if height < 1 or width < 1:
        raise L3Error(f"crop size must be positive, not {size}")
    return height, width


def _check_flip(probability) -> None:
    if not 0 <= probability <= 1:
        raise L3Error(f"flip is a probability in 0..1, not {probability!r}")


def _flip(probability: float, rng) -> bool:
    return bool(probability > 0 and rng.random() < probability)


@dataclass(frozen=True)
class Full:
    """The whole image, optionally flipped with probability `flip`."""

    flip: float = 0.0

    def __post_init__(self):
        _check_flip(self.flip)

    def __call__(self, height: int, width: int, rng: np.random.Generator) -> Crop:
        return Crop((0, 0, height, width), (height, width), _flip(self.flip, rng))


@dataclass(frozen=True)
class RandomCrop:
    """A window of `size` (h, w) at a uniformly random place; images smaller than it are an error."""

    size: tuple
    flip: float = 0.0

    def __post_init__(self):
        _pair(self.size)
        _check_flip(self.flip)

    def __call__(self, height: int, width: int, rng: np.random.Generator) -> Crop:
        h, w = _pair(self.size)
        if h > height or w > width:
            raise L3Error(f"crop {h}x{w} is larger than the {height}x{width} image")
        y, x = int(rng.integers(0, height - h + 1)), int(rng.integers(0, width - w + 1))
        return Crop((y, x, h, w), (h, w), _flip(self.flip, rng))


@dataclass(frozen=True)
class CenterCrop:
    """The central window of `size` (validation); never flipped."""

    size: tuple

    def __post_init__(self):
        _pair(self.size)

    def __call__(self, height: int, width: int, rng: np.random.Generator) -> Crop:
        h, w = _pair(self.size)
        if h > height or w > width:
            raise L3Error(f"crop {h}x{w} is larger than the {height}x{width} image")
        return Crop(((height - h) // 2, (width - w) // 2, h, w), (h, w), False)


@dataclass(frozen=True)
class RandomResizedCrop:
    """torchvision's RandomResizedCrop boxes: a random area fraction in `scale` and aspect ratio in
    `ratio` (log-uniform), ten tries, then the central box of the clamped ratio; resized to `size`."""

    size: tuple
    scale: tuple = (0.08, 1.0)
    ratio: tuple = (3 / 4, 4 / 3)
    flip: float = 0.0

    def __post_init__(self):
        """Refused at construction, not at the first sample: torchvision only warns on a reversed range."""
        _pair(self.size)
        _check_flip(self.flip)
        low, high = self.scale
        if not 0 < low <= high <= 1:
            raise L3Error(f"scale is an area fraction range (low, high) with 0 < low <= high <= 1, not {self.scale}")
        low, high = self.ratio
        if not 0 < low <= high:
            raise L3Error(f"ratio is an aspect ratio range (low, high) with 0 < low <= high, not {self.ratio}")

    def __call__(self, height: int, width: int, rng: np.random.Generator) -> Crop:
        return Crop(self.box(height, width, rng), _pair(self.size), _flip(self.flip, rng))

    def box(self, height: int, width: int, rng: np.random.Generator) -> tuple:
        area = height * width
        log_ratio = (math.log(self.ratio[0]), math.log(self.ratio[1]))
        for _ in range(10):
            target_area = area * rng.uniform(self.scale[0], self.scale[1])
            aspect = math.exp(rng.uniform(*log_ratio))
            w = int(round(math.sqrt(target_area * aspect)))
            h = int(round(math.sqrt(target_area / aspect)))
            if 0 < w <= width and 0 < h <= height:
                return int(rng.integers(0, height - h + 1)), int(rng.integers(0, width - w + 1)), h, w
        in_ratio = width / height
        if in_ratio < min(self.ratio):
            w, h = width, max(1, int(round(width / min(self.ratio))))
        elif in_ratio > max(self.ratio):
            h, w = height, max(1, int(round(height * max(self.ratio))))
        else:
            w, h = width, height
        return (height - h) // 2, (width - w) // 2, h, w

