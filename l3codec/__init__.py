"""l3codec: a tile-parallel lossless image format with CPU (Numba) and GPU decoders."""

from .codec import check, decode, encode, imread, imwrite, info
from .format import MAX_PIXELS, VERSION, Info, L3Error

__version__ = "0.1.0"
__all__ = ["encode", "decode", "info", "check", "imread", "imwrite", "L3Error", "Info", "MAX_PIXELS", "VERSION"]
