"""The ``l3`` command-line tool: encode, decode, info and check L3 images.

    l3 encode photo.png scan.tif -o out/ --mode fast
    l3 decode photo.l3 --region 0,0,64,64 -o crop.png
    l3 info *.l3 --json
    l3 check *.l3

Every subcommand takes several files. A bad file is reported as ``l3: PATH: message``
on stderr, the others are still processed, and the exit status is then 1.

Inputs are read with OpenCV (8/16-bit kept as stored, BGR(A) turned into RGB(A));
note that OpenCV reads grey+alpha PNGs as RGBA, so those encode as 4 channels.
Outputs are PNG with the image's own channel count (1-4) and bit depth.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import struct
import sys
import zlib
from pathlib import Path

import numpy as np

from . import __version__
from . import format as fmt
from .codec import decode, encode, info
from .format import L3Error


class _Skip(Exception):
    """A per-file failure that is reported as one line, like L3Error and OSError."""


def _read_image(path: Path) -> np.ndarray:
    """Any image OpenCV reads, as HW / HWC RGB(A), 8 or 16 bit as stored."""
    import cv2

    # imdecode (the same decoders as cv2.imread) so a missing file is a plain OSError
    image = cv2.imdecode(np.frombuffer(path.read_bytes(), np.uint8), cv2.IMREAD_UNCHANGED)
    if image is None:
        raise _Skip("not an image format OpenCV can read")
    if image.ndim == 3 and image.shape[2] == 1:
        image = image[:, :, 0]
    if image.ndim == 3 and image.shape[2] == 3:
        image = cv2.cvtColor(image, cv2.COLOR_BGR2RGB)
    elif image.ndim == 3 and image.shape[2] == 4:
        image = cv2.cvtColor(image, cv2.COLOR_BGRA2RGBA)
    return image


def _png_grey_alpha(image: np.ndarray) -> bytes:
    """A minimal PNG (colour type 4) for HW2 grey+alpha, which OpenCV cannot write."""
    height, width, _ = image.shape
    bits = 8 * image.dtype.itemsize
    rows = image.astype(">u2" if bits == 16 else np.uint8).reshape(height, -1).view(np.uint8)
    raw = np.hstack([np.zeros((height, 1), np.uint8), rows]).tobytes()  # filter type 0 per row

    def chunk(kind: bytes, body: bytes) -> bytes:
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))

    ihdr = struct.pack(">IIBBBBB", width, height, bits, 4, 0, 0, 0)
    idat = zlib.compress(raw, 6)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", idat) + chunk(b"IEND", b"")


def _write_png(path: Path, image: np.ndarray) -> None:
    """Write HW / HWC RGB(A) as PNG, 8 or 16 bit."""
    import cv2

    if image.ndim == 3 and image.shape[2] == 2:
        path.write_bytes(_png_grey_alpha(image))
        return
    if image.ndim == 3 and image.shape[2] == 3:
        image = cv2.cvtColor(image, cv2.COLOR_RGB2BGR)
    elif image.ndim == 3 and image.shape[2] == 4:
        image = cv2.cvtColor(image, cv2.COLOR_RGBA2BGRA)
    if not cv2.imwrite(str(path), image):
        raise _Skip(f"cannot write {path}")


def _output_path(source: Path, args, suffix: str) -> Path:
    """OUT is a directory for several inputs (or an existing directory), else a file path.
    An existing file is only replaced with --force: the source itself may be the default target."""
    name = source.with_suffix(suffix).name
    out = args.output
    if out is None:
        target = source.with_suffix(suffix)
    elif len(args.inputs) > 1 or Path(out).is_dir() or out.endswith(("/", os.sep)):
        Path(out).mkdir(parents=True, exist_ok=True)
        target = Path(out) / name
    else:
        target = Path(out)
    if target.suffix.lower() != suffix:
        raise _Skip(f"output {target} must end in {suffix}")
    if target.exists() and not args.force:
        raise _Skip(f"{target} exists (--force replaces it)")
    return target


def _percent(part: int, whole: int) -> str:
    return f"{100 * part / whole:.1f}%" if whole else "-"


def _encode(args, path: Path) -> None:
    image = _read_image(path)
    target = _output_path(path, args, ".l3")
    data = encode(image, mode=args.mode, tile_width=args.tile_width, tile_height=args.tile_height)
    target.write_bytes(data)
    in_size = path.stat().st_size
    print(
        f"{path} -> {target}: shape {image.shape} {image.dtype}, {in_size} -> {len(data)} bytes "
        f"({_percent(len(data), in_size)} of the source file)"
    )


def _parse_region(text: str) -> tuple:
    try:
        region = tuple(int(v) for v in text.split(","))
    except ValueError:
        region = ()
    if len(region) != 4:
        raise argparse.ArgumentTypeError(f"region must be y,x,h,w (four integers), not {text!r}")
    return region


def _decode(args, path: Path) -> None:
    target = _output_path(path, args, ".png")  # PNG only: other formats OpenCV writes may be lossy
    image = decode(path.read_bytes(), region=args.region)
    _write_png(target, image)
    print(f"{path} -> {target}: shape {image.shape} {image.dtype}")


def _info(args, path: Path) -> None:
    facts = info(path.read_bytes())
    if args.json:
        record = {"path": str(path), **dataclasses.asdict(facts), "shape": list(facts.shape)}
        print(json.dumps(record))
        return
    print(
        f"{path}: width {facts.width}, height {facts.height}, {facts.channels} channel(s), {facts.bits}-bit, "
        f"shape {facts.shape}, mode {facts.mode}, transform {facts.transform}, "
        f"{facts.tiles_x}x{facts.tiles_y} tiles of {facts.tile_width}x{facts.tile_height}, "
        f"{facts.file_size} bytes, version {facts.version}"
    )


def _check(args, path: Path) -> None:
    decode(path.read_bytes())
    print(f"{path}: OK")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="l3", description="L3 lossless image codec")
    parser.add_argument("--version", action="version", version=f"l3codec {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser("encode", help="encode PNG/JPEG/... images as .l3")
    p.add_argument("inputs", nargs="+", metavar="INPUT")
    p.add_argument(
        "-o", "--output", metavar="OUT",
        help="output .l3 file (one input) or directory (default: INPUT with .l3, beside it)",
    )
    p.add_argument(
        "--mode", choices=("compact", "fast"), default="compact",
        help="compact: smallest files (default); fast: row-parallel, faster to encode and decode",
    )
    p.add_argument(
        "--tile-width", type=int, metavar="N",
        help=f"a multiple of {fmt.TILE_WIDTH_STEP} in {fmt.MIN_TILE_WIDTH}..{fmt.MAX_TILE_WIDTH}"
        f" (default {fmt.DEFAULT_TILE_WIDTH[fmt.MODE_COMPACT]} compact, {fmt.DEFAULT_TILE_WIDTH[fmt.MODE_FAST]} fast)",
    )
    p.add_argument(
        "--tile-height", type=int, metavar="N",
        help=f"fast mode only: a multiple of {fmt.FAST_TILE_HEIGHT_STEP} in {fmt.FAST_MIN_TILE_HEIGHT}"
        f"..{fmt.FAST_MAX_TILE_HEIGHT} (default {fmt.DEFAULT_TILE_HEIGHT[fmt.MODE_FAST]});"
        f" compact tiles are {fmt.COMPACT_TILE_HEIGHT} rows",
    )
    p.add_argument("-f", "--force", action="store_true", help="replace existing output files")
    p.set_defaults(run=_encode)

    p = sub.add_parser("decode", help="decode .l3 images to PNG")
    p.add_argument("inputs", nargs="+", metavar="INPUT")
    p.add_argument(
        "-o", "--output", metavar="OUT",
        help="output .png file (one input) or directory (default: INPUT with .png, beside it)",
    )
    p.add_argument(
        "--region", type=_parse_region, metavar="Y,X,H,W", help="decode only this window"
    )
    p.add_argument("-f", "--force", action="store_true", help="replace existing output files")
    p.set_defaults(run=_decode)

    p = sub.add_parser("info", help="print header facts")
    p.add_argument("inputs", nargs="+", metavar="INPUT")
    p.add_argument("--json", action="store_true", help="one JSON object per line")
    p.set_defaults(run=_info)

    p = sub.add_parser("check", help="verify that files decode cleanly (exit status 1 if not)")
    p.add_argument("inputs", nargs="+", metavar="INPUT")
    p.set_defaults(run=_check)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    status = 0
    for name in args.inputs:
        try:
            args.run(args, Path(name))
        except (L3Error, OSError, _Skip) as exc:
            message = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
            print(f"l3: {name}: {message}", file=sys.stderr)
            status = 1
    return status


if __name__ == "__main__":
    sys.exit(main())
