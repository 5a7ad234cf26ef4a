"""Source images (PNG, JPEG, TIFF, GIF, BMP, WebP ...) read for encoding, under one pixel policy.

The ``l3`` tool (l3codec/cli.py), the Pillow plugin's save (l3codec/pil.py) and ``l3convert``
(converters/pipeline.py) all use it. Pillow decodes, and refuses truncated or corrupt files with
the reason (OpenCV 4.x fills the rest of a truncated JPEG with grey, 5.0 refuses it without
saying why); 16-bit colour (PNG, TIFF, PPM), which Pillow narrows to 8 bits, takes its pixels
from OpenCV once Pillow has checked the whole file.

- kept as stored: grey, grey+alpha, RGB and RGBA, 8 or 16 bits;
- a palette is expanded to its colours: RGB, RGBA where it has transparency (L3 stores no palette);
- 1-, 2- and 4-bit grey is scaled to 8 bits (a 1-bit 0/1 becomes 0/255);
- a transparent colour (PNG tRNS on grey or RGB) becomes an alpha channel (dropped on 16 bits);
- CMYK is converted to RGB;
- mode "I" is kept as 16 bits when every value fits, refused otherwise; any other mode
  (YCbCr, LAB, HSV, F ...) is refused: convert it first;
- of a multi-frame file (animated GIF or WebP, multi-page TIFF) only the first frame is kept;
- EXIF orientation is ignored (pixels as stored, as torchvision's ImageFolder gives them)
  unless ``exif_transpose=True``.

Each change is returned as a short note, the same text everywhere: the ``l3`` tool prints
``l3: PATH: note: ...``, the plugin warns, the converter counts them in its manifest.
"""

from __future__ import annotations

import io
import struct
import threading
import zlib

import numpy as np

from .format import DEFAULT_MAX_PIXELS

PALETTE_NOTE = "palette expanded to {layout} (L3 stores no palette)"
CMYK_NOTE = "CMYK converted to RGB"
LOW_BITS_NOTE = "{bits}-bit grey scaled to 8-bit (0..255)"
TRANSPARENT_COLOUR_NOTE = "transparent colour (tRNS) {outcome}"
EXIF_NOTE = "EXIF orientation applied"
FRAMES_NOTE = "first of {frames} frames kept"

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
_SIGNATURES = ((PNG_SIGNATURE, "PNG"), (b"\xff\xd8", "JPEG"), (b"GIF8", "GIF"), (b"BM", "BMP"),
               (b"II*\x00", "TIFF"), (b"MM\x00*", "TIFF"), (b"RIFF", "WebP"))
_ORIENTATION = 0x0112  # the EXIF tag
_KEPT_MODES = ("L", "LA", "RGB", "RGBA", "I;16", "I;16L", "I;16B")


class UnreadableSource(ValueError):
    """A source image that cannot be read, or only by losing data."""


def image_array(image) -> tuple:
    """(HW or HWC uint8/uint16 array, list of notes) from a loaded PIL Image, under the policy."""
    mode = image.mode
    notes = []
    if mode in ("P", "PA"):
        target = "RGBA" if mode == "PA" or "transparency" in image.info else "RGB"
        array = np.asarray(image.convert(target))
        notes.append(PALETTE_NOTE.format(layout=target))
    elif mode == "1":
        array = np.asarray(image.convert("L"))
        notes.append(LOW_BITS_NOTE.format(bits=1))
    elif mode == "CMYK":
        array = np.asarray(image.convert("RGB"))
        notes.append(CMYK_NOTE)
    elif mode in ("L", "RGB") and "transparency" in image.info:
        array = np.asarray(image.convert({"L": "LA", "RGB": "RGBA"}[mode]))
        notes.append(TRANSPARENT_COLOUR_NOTE.format(outcome="made an alpha channel"))
    elif mode == "I":
        wide = np.asarray(image)
        if wide.size and (wide.min() < 0 or wide.max() > 0xFFFF):
            raise UnreadableSource("mode I with values outside 0..65535")
        array = wide.astype(np.uint16)
    elif mode in _KEPT_MODES:
        array = np.asarray(image)
    else:
        raise UnreadableSource(f"pixel mode {mode} is outside the policy; convert it to "
                               f"one of {', '.join(_KEPT_MODES[:4])} or I;16 first")
    if "transparency" in image.info and not notes:  # 16-bit grey (I, I;16): Pillow has no 16-bit alpha mode
        notes.append(TRANSPARENT_COLOUR_NOTE.format(outcome="dropped"))
    if array.dtype.kind == "u" and not array.dtype.isnative:
        array = array.astype(array.dtype.newbyteorder("="))
    return np.ascontiguousarray(array), notes


def read(data: bytes, /, *, exif_transpose: bool = False, max_pixels: int = DEFAULT_MAX_PIXELS) -> tuple:
    """(HW or HWC RGB(A) array, list of notes) from an image file's bytes; UnreadableSource if bad.

    An image of more than max_pixels pixels is refused from its header, before it is decoded: a
    PNG of a few megabytes can hold gigabytes of pixels.

    A PNG is refused when a chunk's CRC is wrong, a chunk is cut short or IEND is missing, even
    if every pixel happens to be there: a damaged file is not a trusted source.
    """
    from PIL import Image, ImageOps

    if not data:
        raise UnreadableSource("empty file (0 bytes)")
    if data.startswith(PNG_SIGNATURE):
        problem = _png_structure_problem(data)
        if problem:
            raise UnreadableSource(f"truncated or corrupt PNG file ({problem})")
    try:
        with _open_image(data) as image:
            width, height = image.size
            if width * height > max_pixels:
                raise UnreadableSource(f"{width}x{height} is more than the {max_pixels} pixels allowed "
                                       "(--max-pixels, max_pixels=)")
            wide_samples, rawmode = _pillow_narrows(image), _rawmode(image)  # load() forgets both
            frames = getattr(image, "n_frames", 1)  # counting seeks, and comes back to frame 0
            image.load()  # the whole file: Pillow raises on truncated or corrupt data
            notes = [FRAMES_NOTE.format(frames=frames)] if frames > 1 else []
            orientation = image.getexif().get(_ORIENTATION, 1)
            if exif_transpose:
                transposed = ImageOps.exif_transpose(image)
                if transposed is not image:
                    notes.append(EXIF_NOTE)
                    image = transposed
            array, mode_notes = image_array(image)
            keyed = image.mode == "RGB" and "transparency" in image.info
            grey_alpha = rawmode.startswith("LA;16")  # Pillow opens it as 8-bit RGBA
    except UnreadableSource:
        raise
    except _BAD_DATA_ERRORS as error:
        kind = _signature_format(data)
        if kind is None:
            raise UnreadableSource("not an image format Pillow can read") from None
        reason = "Pillow cannot read it" if isinstance(error, Image.UnidentifiedImageError) else error
        raise UnreadableSource(f"truncated or corrupt {kind} file ({reason})") from None
    if wide_samples:
        array = _orient(_opencv_16bit(data), orientation if EXIF_NOTE in notes else 1)
        if grey_alpha:  # OpenCV expands grey+alpha to BGRA: grey is any of the first three
            array = np.ascontiguousarray(array[..., [0, 3]])
            mode_notes = []
        else:
            outcome = "made an alpha channel" if array.shape[2] == 4 else "dropped"
            mode_notes = [TRANSPARENT_COLOUR_NOTE.format(outcome=outcome)] if keyed else []
    elif rawmode.startswith(("L;2", "L;4")):  # Pillow scales these to 8 bits silently
        mode_notes.append(LOW_BITS_NOTE.format(bits=int(rawmode[2])))
    return array, notes + mode_notes


# What Pillow raises on bad data (a bug in our code raises something else and is not hidden).
_BAD_DATA_ERRORS = (OSError, SyntaxError, ValueError, EOFError, IndexError, struct.error, zlib.error)
_PILLOW_LIMIT = threading.Lock()


def _open_image(data: bytes):
    """Image.open without Pillow's process-wide decompression-bomb limit, which read() replaces
    with its own check of the header's size; the limit is lifted only around this call."""
    from PIL import Image

    with _PILLOW_LIMIT:
        limit, Image.MAX_IMAGE_PIXELS = Image.MAX_IMAGE_PIXELS, None
        try:
            return Image.open(io.BytesIO(data))
        finally:
            Image.MAX_IMAGE_PIXELS = limit


def _png_structure_problem(data: bytes) -> str | None:
    """What is wrong with a PNG's chunk structure (a CRC, a chunk cut short, no IEND), or None."""
    at = len(PNG_SIGNATURE)
    while at + 8 <= len(data):
        length, = struct.unpack_from(">I", data, at)
        kind = data[at + 4:at + 8]
        end = at + 8 + length + 4
        if end > len(data):
            return f"{kind.decode('latin-1')} chunk cut short"
        crc, = struct.unpack_from(">I", data, end - 4)
        if zlib.crc32(data[at + 4:end - 4]) != crc:
            return f"{kind.decode('latin-1')} chunk CRC mismatch"
        if kind == b"IEND":
            return None
        at = end
    return "file ends before its IEND chunk"


def _signature_format(data: bytes) -> str | None:
    """The format a file's first bytes announce, to name it when Pillow cannot read the rest."""
    for signature, kind in _SIGNATURES:
        if data.startswith(signature):
            return kind
    return None


def _rawmode(image) -> str:
    """How the file stores its samples, as Pillow names it ("L;2", "RGB;16B" ...), before load()."""
    if not image.tile:
        return ""
    args = image.tile[0].args
    return str(args[0] if isinstance(args, tuple) and args else args)


def _pillow_narrows(image) -> bool:
    """Whether Pillow would narrow 16-bit colour or grey+alpha samples to its 8-bit RGB(A) (PNG,
    TIFF, PPM)."""
    if image.mode not in ("RGB", "RGBA") or not image.tile:
        return False
    args = image.tile[0].args
    if image.format == "PPM":  # (rawmode, largest sample value)
        return isinstance(args, tuple) and len(args) > 1 and isinstance(args[1], int) and args[1] > 255
    return ";16" in _rawmode(image)


def _opencv_16bit(data: bytes) -> np.ndarray:
    """A 16-bit RGB(A) or grey+alpha file's pixels as RGB(A), unnarrowed (Pillow has already checked the file is whole)."""
    import cv2

    array = cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_UNCHANGED)
    if array is None or array.ndim != 3 or array.dtype != np.uint16:
        raise UnreadableSource("OpenCV cannot decode this 16-bit image")
    code = cv2.COLOR_BGRA2RGBA if array.shape[2] == 4 else cv2.COLOR_BGR2RGB
    return cv2.cvtColor(array, code)


def _orient(array: np.ndarray, orientation: int) -> np.ndarray:
    """array turned as EXIF orientation 1-8 asks (what ImageOps.exif_transpose does to an image)."""
    swapped = array.swapaxes(0, 1)
    turned = {2: array[:, ::-1], 3: array[::-1, ::-1], 4: array[::-1], 5: swapped,
              6: swapped[:, ::-1], 7: swapped[::-1, ::-1], 8: swapped[::-1]}.get(orientation, array)
    return np.ascontiguousarray(turned)
