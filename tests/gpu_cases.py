"""A small matrix of GPU test batches, shared by the simulator and real-GPU tests."""

import numpy as np

import l3codec
from images import make_image

# (kind, height, width, channels, dtype, mode, tile_width, tile_height, transform); tiny, with partial
# edge tiles; fast rows of several groups with a short last one, every colour transform in both modes
IMAGES = [
    ("smooth_noise", 13, 21, 3, np.uint8, "compact", 16, 32, "subtract-green"),
    ("labels", 35, 18, 1, np.uint16, "compact", 16, 32, "none"),
    ("noise", 5, 17, 2, np.uint8, "compact", 16, 32, "none"),
    ("gradient", 9, 20, 4, np.uint16, "compact", 16, 32, "rg-mean"),
    ("smooth_noise", 11, 19, 3, np.uint16, "fast", 16, 8, "subtract-green"),
    ("labels", 10, 17, 1, np.uint8, "fast", 16, 8, "none"),
    ("constant", 3, 5, 4, np.uint8, "fast", 16, 8, "none"),
    ("smooth_noise", 4, 150, 3, np.uint8, "fast", 144, 8, "rg-mean"),
    ("extremes", 1, 1, 1, np.uint8, "compact", 16, 32, "none"),
    ("labels", 9, 40, 1, np.uint16, "fast", 32, 8, "none"),  # 16-bit sparse and bitmap groups
    ("flat_graphics", 14, 40, 3, np.uint8, "compact", 32, 32, "rg-mean"),  # palette tiles and members
    ("flat_graphics", 12, 40, 4, np.uint8, "fast", 32, 8, "subtract-green"),
    # LZ streams (docs/FORMAT.md §5.2): a plane (and the compact 16-bit labels above: one), and a
    # palette's index plane
    ("text", 12, 64, 3, np.uint16, "fast", 64, 8, "rg-mean"),
    ("text", 12, 64, 2, np.uint16, "fast", 64, 8, "none"),
    # pixel LZ streams (§5.3): a tile's channels interleaved in one block, dealt out to raw planes
    ("coloured_text", 12, 64, 3, np.uint8, "fast", 64, 8, "rg-mean"),
    ("coloured_text", 12, 40, 4, np.uint16, "compact", 32, 32, "none"),
    # compact tiles of two bands (version 9): coded rows, and LZ, palette or raw planes across the band's edge
    ("smooth_noise", 45, 17, 1, np.uint8, "compact", 16, 64, "none"),
    ("coloured_text", 40, 32, 3, np.uint8, "compact", 32, 64, "rg-mean"),
    # a 1-channel compact palette tile (format 10's kind 10 codes the labels above smaller than a palette)
    ("text", 35, 18, 1, np.uint16, "compact", 16, 32, "none"),
]


def encoded_images(seed=3):
    images, datas = [], []
    for kind, h, w, c, dtype, mode, tw, th, transform in IMAGES:
        image = make_image(kind, h, w, c, dtype, seed)
        images.append(image)
        datas.append(l3codec.encode(image, mode=mode, tile_width=tw, tile_height=th, transform=transform))
    return images, datas


def crop_regions(images, seed=4):
    """One random window per image."""
    rng = np.random.default_rng(seed)
    regions = []
    for image in images:
        height, width = image.shape[:2]
        y, x = int(rng.integers(0, height)), int(rng.integers(0, width))
        regions.append((y, x, int(rng.integers(1, height - y + 1)), int(rng.integers(1, width - x + 1))))
    return regions
