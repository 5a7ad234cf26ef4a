"""Regenerate the golden files after a deliberate format change (and bump VERSION).

    python tests/golden/make_golden.py

Each case writes NAME.l3 and NAME.npy (the expected pixels). tests/golden/v1/ to v9/ keep files
of format versions 1 to 9 as they were written then (never regenerated): version-1 compact files and
every version-2 to -9 file must still decode, version-1 fast files must be refused.
"""

import pathlib
import sys

import numpy as np

HERE = pathlib.Path(__file__).parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE.parent.parent))

import l3codec  # noqa: E402
from images import make_image  # noqa: E402

# name: (kind, height, width, channels, dtype, encode options)
CASES = {
    "gray8_compact": ("smooth_noise", 37, 45, 1, np.uint8, {"mode": "compact", "tile_width": 32, "tile_height": 32}),
    "rgb8_compact": ("smooth_noise", 40, 70, 3, np.uint8, {"mode": "compact", "tile_width": 48, "tile_height": 32,
                                                            "transform": "subtract-green"}),
    "rgba8_fast": ("gradient", 33, 20, 4, np.uint8, {"mode": "fast", "tile_width": 16, "tile_height": 8,
                                                     "transform": "subtract-green"}),
    "rgb8_fast_rg_mean": ("smooth_noise", 40, 150, 3, np.uint8,
                          {"mode": "fast", "tile_width": 144, "tile_height": 16, "transform": "rg-mean"}),
    "rgb8_compact_rg_mean": ("smooth_noise", 40, 70, 3, np.uint8, {"mode": "compact", "tile_width": 48,
                                                                    "tile_height": 32, "transform": "rg-mean"}),
    "labels8_fast": ("labels", 64, 25, 1, np.uint8, {"mode": "fast", "tile_width": 256, "tile_height": 32}),
    "labels16_fast": ("labels", 40, 9, 1, np.uint16, {"mode": "fast", "tile_width": 144, "tile_height": 16}),
    "gray16_fast": ("smooth_noise", 9, 70, 1, np.uint16, {"mode": "fast", "tile_width": 80, "tile_height": 8}),
    "rgb16_fast": ("smooth_noise", 19, 50, 3, np.uint16, {"mode": "fast", "tile_width": 32, "tile_height": 16}),
    "labels8_compact": ("labels", 64, 80, 1, np.uint8, {"mode": "compact", "tile_width": 64, "tile_height": 32}),
    "labels16_compact": ("labels", 35, 33, 1, np.uint16, {"mode": "compact", "tile_width": 16, "tile_height": 32}),
    "la8_compact_noise": ("noise", 9, 17, 2, np.uint8, {"mode": "compact", "tile_width": 16, "tile_height": 32}),
    "one_pixel_fast": ("extremes", 1, 1, 3, np.uint16, {"mode": "fast"}),
    # palette tiles (version 4): 3 and 4 channels with members, 16-bit, coded and raw index planes
    "flat8_compact_palette": ("flat_graphics", 37, 96, 3, np.uint8, {"mode": "compact", "tile_width": 48,
                                                                     "tile_height": 32, "transform": "rg-mean"}),
    "flat8_fast_palette": ("flat_graphics", 20, 90, 4, np.uint8, {"mode": "fast", "tile_width": 32, "tile_height": 8,
                                                                  "transform": "subtract-green"}),
    "flat16_fast_palette": ("flat_graphics", 16, 40, 2, np.uint16, {"mode": "fast", "tile_width": 16,
                                                                    "tile_height": 16}),
    # LZ streams (version 6): plain planes in both modes, 8- and 16-bit, and a palette's index plane
    "text8_compact_lz": ("text", 40, 256, 3, np.uint8, {"mode": "compact", "tile_width": 128, "tile_height": 32,
                                                        "transform": "rg-mean"}),
    "text8_fast_lz": ("text", 40, 256, 1, np.uint8, {"mode": "fast", "tile_width": 256, "tile_height": 8}),
    "text16_fast_lz": ("text", 32, 128, 4, np.uint16, {"mode": "fast", "tile_width": 128, "tile_height": 16,
                                                       "transform": "subtract-green"}),
    "text16_compact_palette_lz": ("text", 32, 96, 1, np.uint16, {"mode": "compact", "tile_width": 96,
                                                                 "tile_height": 32}),
    # pixel LZ streams (version 7): a tile's channels interleaved in one block, and members. Version 8
    # codes most of these cases' LZ blocks (kinds 8 and 9); small blocks stay plain (labels, the flat palette)
    "colour_text8_compact_pixel_lz": ("coloured_text", 40, 256, 3, np.uint8, {"mode": "compact", "tile_width": 128,
                                                                              "tile_height": 32,
                                                                              "transform": "rg-mean"}),
    "colour_text16_fast_pixel_lz": ("coloured_text", 24, 128, 4, np.uint16, {"mode": "fast", "tile_width": 64,
                                                                             "tile_height": 16}),
    # compact tiles of several bands (version 9): coded rows whose band starts without a row above, a
    # partial last band and tile; and colour text whose LZ and palette tiles span bands
    "gray8_compact_bands": ("smooth_noise", 90, 40, 1, np.uint8, {"mode": "compact", "tile_width": 32,
                                                                  "tile_height": 64}),
    "colour_text8_compact_bands": ("coloured_text", 100, 96, 3, np.uint8, {"mode": "compact", "tile_width": 48,
                                                                           "tile_height": 96,
                                                                           "transform": "rg-mean"}),
    # compact's stream kind 10 (version 10): every coded compact case above is kind 10 now; these add
    # 16-bit samples, a biased and an unbiased stream side by side, and the reference encoder's own tiles
    "gray16_compact_v2": ("smooth_noise", 70, 100, 1, np.uint16, {"mode": "compact", "tile_width": 64,
                                                                  "tile_height": 64}),
    "rgb8_compact_v2_default_tiles": ("smooth_noise", 40, 1100, 3, np.uint8, {"mode": "compact"}),
}
# columns repeated, so that label regions span whole fast groups (zero groups between edges); the
# 8-bit map's regions then repeat their left neighbours enough for the encoder's LZ search (lz_may_pay),
# whose streams it keeps: dots8_fast holds the 8-bit sparse groups and zero groups instead
WIDENED = {"labels8_fast": 16, "labels16_fast": 16}


def dots(height, width, seed):
    """Isolated samples of random values (1 in 80) on a ramp across the columns: fast predicts the ramp
    exactly, so sparse groups lie between groups of zero residuals, and no value dominates or repeats
    its left neighbour (the encoder does not look for LZ matches)."""
    rng = np.random.default_rng(seed)
    image = np.tile(np.arange(width) % 256, (height, 1)).astype(np.uint8)
    at = rng.random((height, width)) < 1 / 80
    image[at] = rng.integers(0, 256, int(at.sum()))
    return image


CASES["dots8_fast"] = ("dots", 48, 384, 1, np.uint8, {"mode": "fast", "tile_width": 128, "tile_height": 16})


def main():
    for name, (kind, height, width, channels, dtype, options) in CASES.items():
        image = dots(height, width, 7) if kind == "dots" else make_image(kind, height, width, channels, dtype, seed=7)
        image = np.repeat(image, WIDENED.get(name, 1), axis=1)
        (HERE / f"{name}.l3").write_bytes(l3codec.encode(image, **options))
        np.save(HERE / f"{name}.npy", image)
        print(name, image.shape, image.dtype, options)


if __name__ == "__main__":
    main()
