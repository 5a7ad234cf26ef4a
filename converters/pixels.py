"""What the converter adds to the pixel policy (l3codec/sources.py, which reads every source):
which files are images, which are lossy, and the optional downscaling (README, "Converting").
"""

from __future__ import annotations

import numpy as np

IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".bmp", ".gif", ".tif", ".tiff", ".webp", ".ppm", ".pgm", ".pbm")
LOSSY_SUFFIXES = (".jpg", ".jpeg", ".webp")


def target_size(height: int, width: int, *, max_side: int | None, resize_short: int | None) -> tuple:
    """(height, width) after downscaling (never up) so the long side <= max_side, short side <= resize_short."""
    scale = 1.0
    if resize_short is not None:
        scale = min(scale, resize_short / min(height, width))
    if max_side is not None:
        scale = min(scale, max_side / max(height, width))
    if scale >= 1.0:
        return height, width
    return max(1, round(height * scale)), max(1, round(width * scale))


def resize(array: np.ndarray, size: tuple, *, labels: bool) -> np.ndarray:
    """array resized to size (height, width): area averaging for images, nearest for label maps
    (so no new label values appear)."""
    import cv2

    if array.shape[:2] == tuple(size):
        return array
    interpolation = cv2.INTER_NEAREST if labels else cv2.INTER_AREA
    resized = cv2.resize(array, (size[1], size[0]), interpolation=interpolation)
    if array.ndim == 3 and resized.ndim == 2:
        resized = resized[:, :, None]
    return resized
