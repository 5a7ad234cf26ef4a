"""The pixel policy: how a source file becomes the exact array that is encoded (README, "Converting").

Pillow decodes (it refuses truncated files, where libjpeg through OpenCV would fill grey), except
16-bit colour PNGs, which Pillow narrows to 8 bits: OpenCV reads those unchanged. 16-bit stays 16-bit,
grayscale stays one channel, palettes are expanded (to RGBA when they hold transparency), RGBA and
LA keep alpha, CMYK and YCbCr are converted to RGB and say so. EXIF orientation is ignored (pixels
as stored, as torchvision's ImageFolder and OpenCV's IMREAD_UNCHANGED give them) unless asked.
"""

from __future__ import annotations

import numpy as np

from l3codec.format import MAX_PIXELS

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".bmp", ".tif", ".tiff", ".webp", ".ppm", ".pgm", ".pbm")
LOSSY_SUFFIXES = (".jpg", ".jpeg", ".webp")


class SourceError(Exception):
    """A source file that cannot be read as an image (reported and skipped, never fatal)."""


def _png_is_16bit_colour(data: bytes) -> bool:
    # IHDR follows the signature: length, type, width, height, bit depth (byte 24), colour type (25)
    return data[:8] == PNG_SIGNATURE and len(data) > 25 and data[24] == 16 and data[25] in (2, 6)


def _opencv_16bit(data: bytes) -> np.ndarray:
    import cv2

    array = cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_UNCHANGED)
    if array is None:
        raise SourceError("OpenCV cannot decode this 16-bit PNG (corrupt or truncated)")
    code = cv2.COLOR_BGRA2RGBA if array.shape[2] == 4 else cv2.COLOR_BGR2RGB
    return cv2.cvtColor(array, code)


def decode_source(data: bytes, *, exif_transpose: bool = False) -> tuple:
    """(HW or HWC uint8/uint16 array, list of notes such as 'cmyk-converted') from a file's bytes."""
    import io

    from PIL import Image, ImageOps

    Image.MAX_IMAGE_PIXELS = MAX_PIXELS
    if _png_is_16bit_colour(data):
        return _opencv_16bit(data), []
    notes = []
    try:
        image = Image.open(io.BytesIO(data))
        image.load()
        if exif_transpose:
            transposed = ImageOps.exif_transpose(image)
            if transposed is not image:
                notes.append("exif-transposed")
                image = transposed
        mode = image.mode
        if mode in ("L", "LA", "RGB", "RGBA", "I;16", "I;16L", "I;16B"):
            array = np.asarray(image)
        elif mode in ("P", "PA"):
            target = "RGBA" if mode == "PA" or "transparency" in image.info else "RGB"
            array = np.asarray(image.convert(target))
            notes.append("palette-expanded")
        elif mode == "1":
            array = np.asarray(image.convert("L"))
            notes.append("bilevel-to-0-255")
        elif mode in ("CMYK", "YCbCr", "LAB", "HSV"):
            array = np.asarray(image.convert("RGB"))
            notes.append(f"{mode.lower()}-converted")
        elif mode == "I":
            # 16-bit grayscale PNG/TIFF in older Pillow versions; anything wider is not an L3 image
            wide = np.asarray(image)
            if wide.size and (wide.min() < 0 or wide.max() > 0xFFFF):
                raise SourceError("32-bit integer image (mode I) with values beyond 16 bits")
            array = wide.astype(np.uint16)
        else:
            raise SourceError(f"unsupported pixel mode {mode!r}")
    except SourceError:
        raise
    except Image.DecompressionBombError as error:
        raise SourceError(f"larger than L3's {MAX_PIXELS} pixels: {error}") from error
    except Exception as error:  # noqa: BLE001 - Pillow raises many types for bad files
        raise SourceError(f"{type(error).__name__}: {error}") from error
    if array.dtype.byteorder == ">" or (array.dtype == np.uint16 and not array.dtype.isnative):
        array = array.astype(np.uint16)
    return np.ascontiguousarray(array), notes


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
