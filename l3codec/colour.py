"""The reversible colour transforms, per pixel (docs/FORMAT.md §3).

Chroma is stored as (difference + half) mod 2**bits, so near-grey pixels sit mid-range
instead of on the 0/max seam, where they would mislead the predictors.
Transform 1, subtract-green: R - G, G, B - G. Transform 2, rg-mean: R - G, G, B - (R + G) / 2.
"""

from .format import TRANSFORM_SUBTRACT_GREEN
from .jit import device


@device(cpu_inline=True)
def subtract_green(red, green, blue, bits):
    half = 1 << (bits - 1)
    mask = (1 << bits) - 1
    return (red - green + half) & mask, green, (blue - green + half) & mask


@device(cpu_inline=True)
def add_green(red_diff, green, blue_diff, bits):
    half = 1 << (bits - 1)
    mask = (1 << bits) - 1
    return (red_diff + green - half) & mask, green, (blue_diff + green - half) & mask


@device(cpu_inline=True)
def subtract_rg_mean(red, green, blue, bits):
    half = 1 << (bits - 1)
    mask = (1 << bits) - 1
    return (red - green + half) & mask, green, (blue - ((red + green) >> 1) + half) & mask


@device(cpu_inline=True)
def add_rg_mean(red_diff, green, blue_diff, bits):
    half = 1 << (bits - 1)
    mask = (1 << bits) - 1
    red = (red_diff + green - half) & mask
    return red, green, (blue_diff + ((red + green) >> 1) - half) & mask


@device(cpu_inline=True)
def forward_colour(transform, red, green, blue, bits):
    """The three colour planes' samples of one pixel under transform (1 or 2)."""
    if transform == TRANSFORM_SUBTRACT_GREEN:
        return subtract_green(red, green, blue, bits)
    return subtract_rg_mean(red, green, blue, bits)


@device(cpu_inline=True)
def inverse_colour(transform, first, green, third, bits):
    """R, G, B of one pixel from its colour planes' samples under transform (1 or 2)."""
    if transform == TRANSFORM_SUBTRACT_GREEN:
        return add_green(first, green, third, bits)
    return add_rg_mean(first, green, third, bits)
