"""The ``l3`` command-line tool: encode, decode, info and check L3 images (``l3 stalls``: l3codec.stalls).

    l3 encode photo.png scan.tif -o out/ --mode fast
    l3 decode photo.l3 --region 0,0,64,64 -o crop.png
    l3 info *.l3 --json
    l3 check *.l3

Every subcommand takes several files. A bad file is reported as ``l3: PATH: reason``
on stderr (PATH being the file at fault, input or output), the others are still
processed, and the exit status is then 1. Outputs are planned before anything is
written: two inputs with one output, or -o naming a file for several inputs, refuse
the whole command (exit status 2).

Inputs are read under the pixel policy of l3codec/sources.py, shared with l3convert and
the Pillow plugin (truncated files refused, palettes expanded, CMYK converted, the first
frame of an animation kept, each conversion noted on stderr). Outputs are PNG with the
image's own channel count (1-4) and bit depth.
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

from . import __version__, sources
from . import format as fmt
from .codec import SUFFIX, decode, encode, info
from .format import L3Error


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


def _png_bytes(image: np.ndarray) -> bytes:
    """HW / HWC RGB(A) as a PNG file's bytes, 8 or 16 bit."""
    import cv2

    if image.ndim == 3 and image.shape[2] == 2:
        return _png_grey_alpha(image)
    if image.ndim == 3 and image.shape[2] == 3:
        image = cv2.cvtColor(image, cv2.COLOR_RGB2BGR)
    elif image.ndim == 3 and image.shape[2] == 4:
        image = cv2.cvtColor(image, cv2.COLOR_RGBA2BGRA)
    ok, encoded = cv2.imencode(".png", image)
    if not ok:
        raise _Failure(f"OpenCV cannot write a PNG of shape {image.shape} {image.dtype}")
    return encoded.tobytes()


class _Failure(Exception):
    """One file failed: reported as ``l3: PATH: reason``, PATH being the file at fault (the input
    unless path says otherwise); the other files are still processed."""

    def __init__(self, reason: str, path: Path | None = None):
        super().__init__(reason)
        self.path = path


class _Refused(Exception):
    """The command line is refused before anything is read or written: (path, reason) pairs."""

    def __init__(self, problems: list):
        super().__init__(problems)
        self.problems = problems


OUTPUT_SUFFIX = {"encode": SUFFIX, "decode": ".png"}


def _output_name(source: Path, command: str, into_directory: bool) -> str:
    """encode: a.png -> a.l3. decode: x.l3 -> x.png in an output directory, but x.l3.png beside
    the input, where x.png is most likely the image x.l3 was made from."""
    if command == "decode" and not into_directory:
        return source.name + OUTPUT_SUFFIX[command]
    return source.with_suffix(OUTPUT_SUFFIX[command]).name


def _plan_outputs(args, inputs: list) -> tuple:
    """(output path of every input, the directory created or None), checked together before
    anything is written: a wrong suffix, -o naming a file for several inputs, or two inputs (or
    an input and an output) sharing a path refuse the whole command. Creates the output
    directory last."""
    suffix = OUTPUT_SUFFIX[args.command]
    out = args.output
    names_directory = out is not None and out.endswith(("/", os.sep))
    into_directory = out is not None and (len(inputs) > 1 or names_directory or Path(out).is_dir())
    if into_directory:
        directory = Path(out)
        if directory.exists() and not directory.is_dir():
            raise _Refused([(out, f"is not a directory (-o names a directory for {len(inputs)} inputs)")])
        if not directory.exists() and not names_directory and directory.suffix.lower() == suffix:
            raise _Refused([(
                out, f"-o names a directory for {len(inputs)} inputs, and this looks like a {suffix} file "
                f"(write {out}/ to create a directory of that name)",
            )])
        targets = [directory / _output_name(source, args.command, True) for source in inputs]
    elif out is None:
        targets = [source.with_name(_output_name(source, args.command, False)) for source in inputs]
    else:
        targets = [Path(out)]
    problems = []
    if targets[0].suffix.lower() != suffix:
        problems.append((
            targets[0], f"{args.command} writes {suffix} files: the output must end in {suffix} "
            "(or in / to name a directory)",
        ))
    input_keys = {_same_file_key(source) for source in inputs}
    first_source = {}
    for source, target in zip(inputs, targets):
        key = _same_file_key(target)
        if key in input_keys:
            problems.append((source, f"its output {target} is one of the inputs"))
        elif key in first_source:
            problems.append((source, f"its output {target} is also the output of {first_source[key]}"))
        else:
            first_source[key] = source
    if problems:
        raise _Refused(problems)
    created = None
    if into_directory and not directory.exists():
        created = directory
    if into_directory:
        try:
            directory.mkdir(parents=True, exist_ok=True)
        except OSError as error:
            reason = f"cannot create the output directory: {error.strerror or error}"
            raise _Refused([(out, reason)]) from None
    return targets, created


def _same_file_key(path: Path) -> str:
    return os.path.normcase(str(path.resolve()))


def _read_input(source: Path) -> bytes:
    """An input's bytes; a FIFO or a device is refused rather than read (a FIFO would
    block the whole command until something writes to it)."""
    if source.exists() and not source.is_file() and not source.is_dir():
        raise _Failure("not a regular file (a FIFO or a device): skipped")
    return source.read_bytes()  # a directory or a missing file: the OSError names it


def _refuse_existing(target: Path, force: bool) -> None:
    if not force and target.exists():
        raise _Failure("exists (--force replaces it)", target)


def _write_output(target: Path, data: bytes, force: bool) -> None:
    """Write data to target. Without force an existing file is never replaced; with force it is
    replaced only once the new file is complete. A failed write leaves no partial file behind."""
    partial = target.with_name(f".{target.name}.partial") if force else target
    opened = False
    try:
        with open(partial, "wb" if force else "xb") as file:
            opened = True
            file.write(data)
        if force:
            os.replace(partial, target)
    except FileExistsError:
        raise _Failure("exists (--force replaces it)", target) from None
    except OSError as error:
        if opened:
            partial.unlink(missing_ok=True)
        raise _Failure(f"cannot write: {error.strerror or error}", target) from None


def _percent(part: int, whole: int) -> str:
    return f"{100 * part / whole:.1f}%" if whole else "-"


def _encode(args, source: Path, target: Path) -> None:
    _refuse_existing(target, args.force)
    image, notes = sources.read(_read_input(source), max_pixels=args.max_pixels)
    data = encode(image, mode=args.mode, tile_width=args.tile_width, tile_height=args.tile_height)
    _write_output(target, data, args.force)
    if notes:
        print(f"l3: {source}: note: {'; '.join(notes)}", file=sys.stderr)
    in_size = source.stat().st_size
    print(
        f"{source} -> {target}: shape {image.shape} {image.dtype}, {in_size} -> {len(data)} bytes "
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


def _decode(args, source: Path, target: Path) -> None:
    _refuse_existing(target, args.force)
    image = decode(_read_input(source), region=args.region, max_pixels=args.max_pixels)
    _write_output(target, _png_bytes(image), args.force)  # PNG only: other formats OpenCV writes may be lossy
    print(f"{source} -> {target}: shape {image.shape} {image.dtype}")


def _info(args, source: Path, _target=None) -> None:
    facts = info(_read_input(source))
    if args.json:
        record = {"path": str(source), **dataclasses.asdict(facts), "shape": list(facts.shape)}
        print(json.dumps(record))
        return
    print(
        f"{source}: width {facts.width}, height {facts.height}, {facts.channels} channel(s), "
        f"{facts.bits}-bit, "
        f"shape {facts.shape}, mode {facts.mode}, transform {facts.transform}, "
        f"{facts.tiles_x}x{facts.tiles_y} tiles of {facts.tile_width}x{facts.tile_height}, "
        f"{facts.file_size} bytes, version {facts.version}"
    )


def _check(args, source: Path, _target=None) -> None:
    decode(_read_input(source), max_pixels=args.max_pixels)
    print(f"{source}: OK")


ENCODE_POLICY = """\
pixels (read with Pillow, as l3convert reads them; each conversion is noted on
stderr, one line per file; a truncated or corrupt file is refused):
  kept as stored   grey, grey+alpha, RGB, RGBA; 8 or 16 bits
  palette          expanded to RGB (RGBA with transparency): L3 stores no palette;
                   for a label map kept as palette indices, encode the indices from
                   Python (numpy.asarray(PIL.Image.open(path)))
  1/2/4-bit grey   scaled to 8 bits (0/1 becomes 0/255)
  tRNS colour      made an alpha channel (dropped on 16-bit grey)
  CMYK             converted to RGB
  other modes      (YCbCr, LAB, F, 32-bit) refused: convert them first
  EXIF orientation not applied: pixels as stored"""


def _add_command(sub, name: str, summary: str, run, *, default_output: str | None = None, epilog=None):
    """A subcommand over several INPUT files; with default_output, also -o/--output and -f/--force."""
    command = sub.add_parser(
        name, help=summary, description=summary, epilog=epilog,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    command.add_argument("inputs", nargs="+", metavar="INPUT")
    if default_output is not None:
        suffix = OUTPUT_SUFFIX[name]
        command.add_argument(
            "-o", "--output", metavar="OUT",
            help=f"output {suffix} file (one input) or directory, created if missing (several inputs, "
            f"or ending in /); default: {default_output}",
        )
        command.add_argument(
            "-f", "--force", action="store_true", help="replace existing output files (never an input)"
        )
    command.set_defaults(run=run)
    return command


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="l3", description="L3 lossless image codec",
        epilog="exit status: 0 if every file succeeded, 1 if any failed (each reported as "
        "'l3: PATH: reason'), 2 if the command line was refused before anything was written",
    )
    parser.add_argument("--version", action="version", version=fmt.version_text(__version__))
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    command = _add_command(
        sub, "encode", "encode PNG/JPEG/TIFF/... images as .l3", _encode,
        default_output="INPUT with .l3 beside it (a.png -> a.l3)", epilog=ENCODE_POLICY,
    )
    command.add_argument(
        "--mode", choices=tuple(fmt.MODES), default="compact",
        help="compact (default): the smallest files of photographs and label maps; fast: row-parallel, "
        "2-3x faster to decode photographs, and the smaller files of rendered graphics and text",
    )
    command.add_argument(
        "--tile-width", type=int, metavar="N",
        help=f"a multiple of {fmt.TILE_WIDTH_STEP} in {fmt.MIN_TILE_WIDTH}..{fmt.MAX_TILE_WIDTH}"
        f" (default {fmt.DEFAULT_TILE_WIDTH[fmt.MODE_COMPACT]} compact, {fmt.DEFAULT_TILE_WIDTH[fmt.MODE_FAST]} fast)",
    )
    command.add_argument(
        "--tile-height", type=int, metavar="N",
        help=f"fast: a multiple of {fmt.FAST_TILE_HEIGHT_STEP} in {fmt.FAST_MIN_TILE_HEIGHT}"
        f"..{fmt.FAST_MAX_TILE_HEIGHT} (default {fmt.DEFAULT_TILE_HEIGHT[fmt.MODE_FAST]}); compact: a multiple of"
        f" {fmt.COMPACT_BAND_ROWS} up to {fmt.COMPACT_MAX_TILE_HEIGHT} (default {fmt.COMPACT_BAND_ROWS});"
        f" either mode takes {fmt.FLAT_TILE_HEIGHT} for flat graphics and text where that is smaller",
    )
    _add_max_pixels(command)

    command = _add_command(
        sub, "decode", "decode .l3 images to PNG", _decode,
        default_output="INPUT.png beside it (x.l3 -> x.l3.png, never the x.png it was likely made from); "
        "in a directory: x.png",
    )
    command.add_argument(
        "--region", type=_parse_region, metavar="Y,X,H,W",
        help="decode only this window: top row, left column, height, width"
    )
    _add_max_pixels(command)

    command = _add_command(sub, "info", "print header facts", _info)
    command.add_argument("--json", action="store_true", help="one JSON object per line")
    command = _add_command(sub, "check", "verify that files decode cleanly (exit status 1 if not)", _check)
    _add_max_pixels(command)
    sub.add_parser("stalls", help="measure where a training step would wait for data (l3 stalls --help)",
                   add_help=False)
    command = sub.add_parser("cache", help="show (or --clear) a sample cache directory (l3codec.cache)",
                             description="show a sample cache: per dataset, entries (one per sample and field), "
                             "bytes, and hits and misses summed over every process and epoch since it was made "
                             "or cleared; a directory that is not a cache is refused, nothing written")
    command.add_argument("inputs", nargs=1, metavar="DIR")
    command.add_argument("--clear", action="store_true", help="remove every cached entry")
    command.add_argument("--group", default=None, metavar="GROUP",
                         help="the group a shared cache was made for (SampleCache(group=...))")
    command.add_argument("--json", action="store_true", help="print the report as JSON")
    command.set_defaults(run=_cache)
    return parser


def _cache(args, directory: Path, _target=None) -> None:
    from .cache import cache_report, clear_cache

    if args.clear:
        clear_cache(directory, group=args.group)
    report = cache_report(directory, group=args.group)
    if args.json:
        print(json.dumps(report))
        return
    print(f"{report['directory']}: {report['bytes'] / 1e6:.1f} MB in {len(report['datasets'])} dataset(s)")
    for name, facts in report["datasets"].items():
        lookups = facts["hits"] + facts["misses"]
        rate = f"{facts['hits'] / lookups:.0%}" if lookups else "-"
        print(f"  {name} {facts['root']}: {facts['entries']} entries (one per sample and field), "
              f"{facts['bytes'] / 1e6:.1f} MB; all epochs so far: {facts['hits']} hits / {lookups} lookups "
              f"({rate}), {facts['refused']} inserts refused (full), {facts['corrupt']} damaged entries replaced, "
              f"{facts['unverified']} source reads failing their check (not cached)")


def _add_max_pixels(command) -> None:
    command.add_argument(
        "--max-pixels", type=_pixel_budget, default=fmt.DEFAULT_MAX_PIXELS, metavar="N",
        help=f"refuse an image (or region) of more pixels, from its header (default {fmt.DEFAULT_MAX_PIXELS}, "
        f"8192x8192; at most {fmt.MAX_PIXELS})",
    )


def _pixel_budget(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if not 1 <= value <= fmt.MAX_PIXELS:
        raise argparse.ArgumentTypeError(f"must be an integer in 1..{fmt.MAX_PIXELS}, not {text!r}")
    return value


def _attach_region_values(argv: list) -> list:
    """'--region -1,0,5,5' -> '--region=-1,0,5,5': argparse takes a value starting with '-' for
    an option and refuses it; the region check then says what is wrong with it."""
    joined, rest = [], list(argv)
    while rest:
        word = rest.pop(0)
        if word == "--":
            return joined + [word] + rest
        if word == "--region" and rest:
            word = f"--region={rest.pop(0)}"
        joined.append(word)
    return joined


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["stalls"]:  # its own parser: it needs torch, which the other commands do not
        from . import stalls

        return stalls.main(argv[1:])
    args = _parser().parse_args(_attach_region_values(argv))
    inputs = [Path(name) for name in args.inputs]
    targets, created = [None] * len(inputs), None
    if args.command in OUTPUT_SUFFIX:
        try:
            targets, created = _plan_outputs(args, inputs)
        except _Refused as refused:
            for path, reason in refused.problems:
                print(f"l3: {path}: {reason}", file=sys.stderr)
            print("l3: nothing was written", file=sys.stderr)
            return 2
    status = 0
    for source, target in zip(inputs, targets):
        try:
            args.run(args, source, target)
            continue
        except _Failure as failure:
            path, reason = failure.path or source, str(failure)
        except (L3Error, sources.UnreadableSource) as error:
            path, reason = source, str(error)
        except OSError as error:  # reading an input (writes are _Failure): the file named, or the input
            path, reason = error.filename or source, error.strerror or str(error)
        except MemoryError:
            path, reason = source, "not enough memory to hold this image"
        print(f"l3: {path}: {reason}", file=sys.stderr)
        status = 1
    if created is not None and not any(created.iterdir()):
        created.rmdir()  # every input failed: leave no empty directory behind
    return status


if __name__ == "__main__":
    sys.exit(main())
