"""Source images (PNG, JPEG, TIFF, GIF, BMP, WebP ...) read for encoding, under one pixel policy.

OpenCV decodes the pixels; the file's own header says how they were stored, so that what
OpenCV changes on the way is either undone or reported, never silent:

- kept as stored: grey, grey+alpha, RGB and RGBA, 8 or 16 bits (OpenCV's BGR order is
  undone, and the grey+alpha it widens to 4 channels is taken back to 2);
- a palette (PNG, GIF, BMP, TIFF) is expanded to its colours: RGB, RGBA where it has
  transparency (grey where OpenCV finds a grey palette): L3 stores no palette;
- PNG grey of 1, 2 or 4 bits is scaled to 8 bits (a 1-bit 0/1 becomes 0/255);
- a PNG transparent colour (tRNS) becomes an alpha channel, or is dropped, as OpenCV does;
- CMYK (JPEG, TIFF) is converted to RGB;
- a grey+alpha TIFF, whose alpha OpenCV drops, is refused.

Each change is returned as a short note for the caller to print. The Pillow plugin
(l3codec/pil.py) applies the same policy to Pillow's modes.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

PALETTE_NOTE = "palette expanded to {layout} (L3 stores no palette)"
CMYK_NOTE = "CMYK converted to RGB"
LOW_BITS_NOTE = "{bits}-bit grey scaled to 8-bit (0..255)"

_LAYOUTS = {1: "grey", 2: "grey+alpha", 3: "RGB", 4: "RGBA"}


class UnreadableSource(ValueError):
    """A source file that cannot be read, or only by losing data."""


@dataclass(frozen=True)
class Stored:
    """How a source file stores its pixels, from its header."""

    colour: str  # "grey", "grey+alpha", "rgb", "rgba", "palette" or "cmyk"
    bits: int = 8
    transparent_colour: bool = False  # a PNG tRNS chunk on grey or RGB


def layout_name(channels: int) -> str:
    return _LAYOUTS[channels]


def read(data: bytes) -> tuple:
    """(HW or HWC RGB(A) image, list of notes on what was converted) from an image file's bytes."""
    import cv2

    if not data:
        raise UnreadableSource("empty file (0 bytes)")
    # OpenCV logs its own lines about a bad file on stderr; the caller reports it in one line
    log_level = cv2.utils.logging.getLogLevel()
    cv2.utils.logging.setLogLevel(cv2.utils.logging.LOG_LEVEL_SILENT)
    try:
        image = cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_UNCHANGED)
    except cv2.error as error:
        raise UnreadableSource(f"OpenCV cannot decode it ({getattr(error, 'err', '') or 'error'})") from None
    finally:
        cv2.utils.logging.setLogLevel(log_level)
    if image is None:
        kind = _signature_format(data)
        if kind is not None:
            raise UnreadableSource(f"truncated or corrupt {kind} file (OpenCV cannot decode it)")
        raise UnreadableSource("not an image format OpenCV can read")
    if image.ndim == 3 and image.shape[2] == 1:
        image = image[:, :, 0]
    stored = stored_layout(data)
    notes = []
    if stored is not None:
        image = _apply_policy(image, stored, notes)
    if image.ndim == 3 and image.shape[2] == 3:
        image = cv2.cvtColor(image, cv2.COLOR_BGR2RGB)
    elif image.ndim == 3 and image.shape[2] == 4:
        image = cv2.cvtColor(image, cv2.COLOR_BGRA2RGBA)
    return image, notes


def _apply_policy(image: np.ndarray, stored: Stored, notes: list) -> np.ndarray:
    """Undo or note what OpenCV changed (image still in OpenCV's BGR(A) order)."""
    channels = 1 if image.ndim == 2 else image.shape[2]
    if stored.colour == "grey+alpha":
        if channels == 4:  # OpenCV widened it: B = G = R = grey
            return np.ascontiguousarray(image[:, :, [0, 3]])
        if channels < 2:
            raise UnreadableSource("grey+alpha, but OpenCV drops the alpha channel: save it as PNG first")
    elif stored.colour == "palette":
        notes.append(PALETTE_NOTE.format(layout=layout_name(channels)))
    elif stored.colour == "cmyk":
        if channels == 4:  # OpenCV's TIFF reader adds an opaque alpha
            image = np.ascontiguousarray(image[:, :, :3])
        notes.append(CMYK_NOTE)
    elif stored.colour == "grey" and stored.bits < 8:
        notes.append(LOW_BITS_NOTE.format(bits=stored.bits))
    if stored.transparent_colour:
        has_alpha = channels in (2, 4)
        notes.append(f"transparent colour (tRNS) {'made an alpha channel' if has_alpha else 'dropped'}")
    return image


_SIGNATURES = {
    b"\x89PNG\r\n\x1a\n": "PNG", b"\xff\xd8\xff": "JPEG", b"GIF87a": "GIF", b"GIF89a": "GIF",
    b"II*\x00": "TIFF", b"MM\x00*": "TIFF",
}


def _signature_format(data: bytes) -> str | None:
    """The format whose signature data starts with (PNG, JPEG, GIF or TIFF), or None."""
    return next((kind for magic, kind in _SIGNATURES.items() if data.startswith(magic)), None)


def stored_layout(data: bytes) -> Stored | None:
    """What the header of a PNG, JPEG, GIF, BMP or TIFF file says about its pixels (None: not known)."""
    if data[:8] == b"\x89PNG\r\n\x1a\n" and data[12:16] == b"IHDR" and len(data) >= 26:
        bits, colour_type = data[24], data[25]
        colour = {0: "grey", 2: "rgb", 3: "palette", 4: "grey+alpha", 6: "rgba"}.get(colour_type)
        has_trns = _png_has_chunk_before_data(data, b"tRNS")
        return None if colour is None else Stored(colour, bits, has_trns and colour in ("grey", "rgb"))
    if data[:2] == b"\xff\xd8":
        components = _jpeg_components(data)
        return Stored("cmyk") if components == 4 else None
    if data[:4] == b"GIF8":
        return Stored("palette")
    if data[:2] == b"BM" and len(data) >= 30:
        # bits per pixel: after 4-byte width and height (BITMAPINFOHEADER and later), or after
        # 2-byte ones (the 12-byte OS/2 BITMAPCOREHEADER); 0 means JPEG or PNG inside
        core = int.from_bytes(data[14:18], "little") == 12
        bits = int.from_bytes(data[24:26] if core else data[28:30], "little")
        return Stored("palette") if 0 < bits <= 8 else None
    if data[:4] in (b"II*\x00", b"MM\x00*"):
        return _tiff_layout(data)
    return None


def _png_has_chunk_before_data(data: bytes, kind: bytes) -> bool:
    """Whether a chunk of this kind comes before the first IDAT, walking the chunks (a search of
    the bytes would also find the name inside another chunk's text or compressed data)."""
    pos = 8  # after the signature
    while pos + 8 <= len(data):
        length, name = int.from_bytes(data[pos : pos + 4], "big"), data[pos + 4 : pos + 8]
        if name == kind:
            return True
        if name in (b"IDAT", b"IEND"):
            return False
        pos += 12 + length  # length, name, data, CRC
    return False


def _jpeg_components(data: bytes) -> int | None:
    """The component count of a JPEG's first frame header (SOFn), or None."""
    start_of_frame = set(range(0xC0, 0xD0)) - {0xC4, 0xC8, 0xCC}  # C4, C8, CC are other segments
    i = 2
    while i + 9 < len(data) and data[i] == 0xFF:
        marker = data[i + 1]
        if marker == 0xFF:  # fill byte
            i += 1
            continue
        if marker in start_of_frame:
            return data[i + 9]  # FF Cn, length (2), precision, height (2), width (2), components
        i += 2 + int.from_bytes(data[i + 2 : i + 4], "big")
    return None


def _tiff_layout(data: bytes) -> Stored | None:
    """Palette, CMYK or grey+alpha from the first IFD of a TIFF (tags 262 and 277), else None."""
    order = "little" if data[:2] == b"II" else "big"
    ifd = int.from_bytes(data[4:8], order)
    if ifd + 2 > len(data):
        return None
    count = int.from_bytes(data[ifd : ifd + 2], order)
    tags = {}
    for entry in range(ifd + 2, min(ifd + 2 + 12 * count, len(data) - 11), 12):
        tag = int.from_bytes(data[entry : entry + 2], order)
        if tag in (262, 277):  # PhotometricInterpretation, SamplesPerPixel: one SHORT each
            tags[tag] = int.from_bytes(data[entry + 8 : entry + 10], order)
    photometric, samples = tags.get(262), tags.get(277, 1)
    if photometric == 3:
        return Stored("palette")
    if photometric == 5:
        return Stored("cmyk")
    if photometric in (0, 1) and samples == 2:
        return Stored("grey+alpha")
    return None
