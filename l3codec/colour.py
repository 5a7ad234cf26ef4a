"""The reversible subtract-green colour transform, per pixel.

Chroma is stored as (R - G + half) mod 2**bits, so near-grey pixels sit mid-range
instead of on the 0/max seam, where they would mislead the MED predictor.
"""

from .jit import device


@device
def subtract_green(red, green, blue, bits):
    half = 1 << (bits - 1)
    mask = (1 << bits) - 1
    return (red - green + half) & mask, green, (blue - green + half) & mask


@device
def add_green(red_diff, green, blue_diff, bits):
    half = 1 << (bits - 1)
    mask = (1 << bits) - 1
    return (red_diff + green - half) & mask, green, (blue_diff + green - half) & mask
