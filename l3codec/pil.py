"""Pillow plugin for L3 images: ``import l3codec.pil`` registers it.

After the import, ``Image.open("x.l3")`` reads L3 files and ``image.save("x.l3")``
writes them. Save options are passed to :func:`l3codec.encode`::

    image.save("x.l3", mode="fast", tile_width=256)  # also tile_height, transform

Pillow modes map to L3 images as follows (both ways):

    "L" <-> 1 channel uint8     "I;16" <-> 1 channel uint16    "LA" <-> 2 channels uint8
    "RGB" <-> 3 channels uint8  "RGBA" <-> 4 channels uint8

Opening reads only the header; pixels are decoded (and checksums verified) on
``load()``, so a truncated or corrupt file raises :class:`l3codec.L3Error` (a
``ValueError``) there. Pillow has no mode for 16-bit images with 2-4 channels:
opening one raises :class:`l3codec.L3Error` right away; read those with
:func:`l3codec.imread` instead.

Saving follows the pixel policy of the ``l3`` tool (one function,
:func:`l3codec.sources.image_array`), and warns (``UserWarning``) whenever it converts: "P"
is stored expanded to "RGB" ("RGBA" when it has transparency) and "PA" to "RGBA", since L3
stores no palette; "L"/"RGB" with a transparent colour become "LA"/"RGBA"; "1" is stored as
"L" (0/255); "CMYK" is converted to "RGB". "I;16L"/"I;16B" are stored as "I;16", and "I" as
"I;16" when all values fit in 0..65535 (the values unchanged, so without a warning).
Any other mode ("YCbCr", "F", ...) raises ``OSError``: convert it yourself first.
"""

from __future__ import annotations

import warnings

import numpy as np
from PIL import Image, ImageFile

from . import format as fmt
from . import sources
from .codec import decode, encode
from .format import L3Error

FORMAT = "L3"
MIME = "image/x-l3"
ENCODE_OPTIONS = ("mode", "tile_width", "tile_height", "transform")

# (channels, bits) -> Pillow mode
_MODES = {(1, 8): "L", (1, 16): "I;16", (2, 8): "LA", (3, 8): "RGB", (4, 8): "RGBA"}


def _accept(prefix: bytes) -> bool:
    return prefix[:4] == fmt.MAGIC


class L3ImageFile(ImageFile.ImageFile):
    format = FORMAT
    format_description = "L3 lossless image"

    def _open(self) -> None:
        prefix = self.fp.read(fmt.HEADER_SIZE)
        if prefix[:4] != fmt.MAGIC:
            raise SyntaxError("not an L3 image")
        _, info = fmt.parse_header(prefix)
        width, height, channels, bits = info.width, info.height, info.channels, info.bits
        if (channels, bits) not in _MODES:
            raise L3Error(
                f"Pillow has no mode for {bits}-bit images with {channels} channels; "
                "use l3codec.imread instead"
            )
        self._size = (width, height)
        self._mode = _MODES[channels, bits]
        self.info["l3_mode"] = info.mode
        self.tile = [ImageFile._Tile(FORMAT, (0, 0, width, height), 0, None)]


class L3Decoder(ImageFile.PyDecoder):
    """Reads the whole file from the tile offset and decodes it with l3codec.decode."""

    _pulls_fd = True

    def decode(self, buffer):
        assert self.fd is not None
        pixels = decode(self.fd.read())
        if pixels.dtype == np.uint16:
            pixels = pixels.astype("<u2", copy=False)
        self.set_as_raw(pixels.tobytes())
        return -1, 0


def _as_array(im: Image.Image) -> np.ndarray:
    """The pixels of im as an array l3codec can encode, under the l3 tool's pixel policy."""
    try:
        pixels, notes = sources.image_array(im)
    except sources.UnreadableSource as error:
        raise OSError(f"cannot write mode {im.mode} as L3: {error}") from None
    if notes:
        # stacklevel 4: the caller of Image.save, through Pillow's save and _save
        warnings.warn(f"L3 plugin, saving a {im.mode} image: {'; '.join(notes)}", UserWarning, stacklevel=4)
    return pixels


def _save(im: Image.Image, fp, filename) -> None:
    options = {key: im.encoderinfo[key] for key in ENCODE_OPTIONS if key in im.encoderinfo}
    fp.write(encode(_as_array(im), **options))


Image.register_open(FORMAT, L3ImageFile, _accept)
Image.register_decoder(FORMAT, L3Decoder)
Image.register_save(FORMAT, _save)
Image.register_extension(FORMAT, ".l3")
Image.register_mime(FORMAT, MIME)
