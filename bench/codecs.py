"""Compare L3 with other lossless image codecs: size, speed, exactness.

Usage (from the repository root)::

    python bench/codecs.py [folder ...] [--repeat N] [--codec NAME ...] [--out bench/results]

Every PNG in each folder is decoded once with OpenCV (RGB order, label maps
as 8- or 16-bit single channel) and then encoded and decoded by every codec
from build_registry(). For each image and codec it records the compressed
size, the best-of-N encode and decode times and whether the round trip is
exact. --codec keeps only the codecs whose names contain NAME (case-insensitive;
PNG, OpenCV default stays as the size reference), for a quick comparison such as
`--codec "L3 compact" --codec libspng --codec QOI`. Results go to
<out>/codecs.md (tables), codecs.json (raw numbers) and codecs.png (size
against one-thread decode speed).
"""

from __future__ import annotations

import argparse
import datetime
import io
import json
import os
import platform
import subprocess
import sys
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import cv2
import imagecodecs
import numba
import numpy as np
from PIL import Image

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))  # run from anywhere without installing l3codec

import l3codec  # noqa: E402

try:
    import pyspng
except ImportError:  # optional: the libspng row is skipped without it
    pyspng = None

DEFAULT_FOLDER = REPO.parent / "shared" / "corpus" / "hires2048"
ALL_THREADS = numba.config.NUMBA_NUM_THREADS
REFERENCE = "PNG, OpenCV default"  # sizes are given relative to this codec

# Thread count for codecs with their own thread pools (set by set_threads).
_threads = 1


def set_threads(n: int) -> None:
    """Use n threads in every library that has a knob for it."""
    global _threads
    _threads = n
    numba.set_num_threads(n)
    cv2.setNumThreads(n)


# --------------------------------------------------------------------------
# Codec adapters. Each encode takes the image as loaded (HW or HWC, RGB
# order) and returns bytes; each decode returns an array that must equal it.


@dataclass(frozen=True)
class Codec:
    name: str
    encode: Callable[[np.ndarray], bytes]
    decode: Callable[[bytes], np.ndarray]
    supports: Callable[[np.ndarray], bool]
    # Also timed with all cores (only codecs with an internal thread pool).
    multithreaded: bool = False
    # Untimed layout changes around the codec, so channel order does not
    # count against a library whose native order is BGR.
    to_native: Callable[[np.ndarray], np.ndarray] = lambda a: a
    from_native: Callable[[np.ndarray], np.ndarray] = lambda a: a
    note: str = ""


def channels(a: np.ndarray) -> int:
    return 1 if a.ndim == 2 else a.shape[2]


def any_image(a: np.ndarray) -> bool:
    return a.dtype in (np.uint8, np.uint16) and channels(a) in (1, 2, 3, 4)


def rgb8_only(a: np.ndarray) -> bool:
    """WebP and QOI store 8-bit RGB(A) only."""
    return a.dtype == np.uint8 and channels(a) in (3, 4)


def gray_or_rgb(a: np.ndarray) -> bool:
    return a.dtype in (np.uint8, np.uint16) and channels(a) in (1, 3)


def spng_output(a: np.ndarray) -> bool:
    """libspng has no 16-bit grey output format: it returns grey+alpha for those."""
    return any_image(a) and not (a.dtype == np.uint16 and channels(a) == 1)


def swap_rb(a: np.ndarray) -> np.ndarray:
    """RGB(A) <-> BGR(A); single-channel images pass through."""
    if a.ndim == 3 and a.shape[2] in (3, 4):
        return np.ascontiguousarray(a[..., [2, 1, 0] + ([3] if a.shape[2] == 4 else [])])
    return a


def l3_encoder(mode: str) -> Callable[[np.ndarray], bytes]:
    return lambda a: l3codec.encode(a, mode=mode)


def l3_compact_v2_encoder(tile_width: int, tile_height: int, coder: str = "ans") -> Callable[[np.ndarray], bytes]:
    """compact with coded tiles as kind 10 (format 10's compact v2; coder "smaller": kind 10 or kind 1,
    whichever is smaller per tile) in the given tiles, through encoder_policy's private switch."""
    from l3codec import encoder_policy

    def encode(a: np.ndarray) -> bytes:
        previous = encoder_policy.COMPACT_CODER
        encoder_policy.COMPACT_CODER = coder
        try:
            return l3codec.encode(a, mode="compact", tile_width=tile_width, tile_height=tile_height)
        finally:
            encoder_policy.COMPACT_CODER = previous

    return encode


def cv2_png_encoder(level: int | None) -> Callable[[np.ndarray], bytes]:
    params = [] if level is None else [cv2.IMWRITE_PNG_COMPRESSION, level]

    def encode(a: np.ndarray) -> bytes:
        ok, buf = cv2.imencode(".png", a, params)
        if not ok:
            raise RuntimeError("cv2.imencode failed")
        return buf.tobytes()

    return encode


def cv2_decode(data: bytes) -> np.ndarray:
    return cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_UNCHANGED)


def pillow_png_encode(a: np.ndarray) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(a).save(buf, format="PNG", optimize=True)
    return buf.getvalue()


def pillow_decode(data: bytes) -> np.ndarray:
    return np.asarray(Image.open(io.BytesIO(data)))


def spng_decode(data: bytes) -> np.ndarray:
    return pyspng.load(data)


def webp_encoder(level: int | None, method: int | None) -> Callable[[np.ndarray], bytes]:
    # libwebp's lossless defaults are quality 75, method 4; 0/0 is fastest.
    return lambda a: imagecodecs.webp_encode(a, level, lossless=True, method=method)


def jpegxl_encode(a: np.ndarray) -> bytes:
    return imagecodecs.jpegxl_encode(a, lossless=True, effort=1, numthreads=_threads)


def jpegxl_decode(data: bytes) -> np.ndarray:
    return imagecodecs.jpegxl_decode(data, numthreads=_threads)


def htj2k_encode(a: np.ndarray) -> bytes:
    # level 0 = no quantisation; reversible 5/3 wavelet (+ RCT for RGB).
    return imagecodecs.htj2k_encode(a, 0, reversible=True)


def available(module_const: str) -> bool:
    const = getattr(imagecodecs, module_const, None)
    return bool(const is not None and getattr(const, "available", False))


def build_registry(names: list[str] | None = None) -> list[Codec]:
    """All codecs that can run here (those whose names contain one of names, and the size
    reference, when names are given); missing ones are reported and skipped."""
    ic = imagecodecs
    entries: list[tuple[Codec, bool, str]] = [
        (Codec("L3 compact", l3_encoder("compact"), l3codec.decode, any_image, True), True, ""),
        (Codec("L3 fast", l3_encoder("fast"), l3codec.decode, any_image, True), True, ""),
        *[(Codec(f"L3 compact v2, {w}x{h} tiles", l3_compact_v2_encoder(w, h), l3codec.decode, any_image,
                 note="kind 10 for coded tiles"), True, "") for w, h in ((512, 256), (1024, 256), (512, 32))],
        (Codec("L3 compact v2 or v1 per tile, 512x256 tiles", l3_compact_v2_encoder(512, 256, "smaller"),
               l3codec.decode, any_image, note="kind 10 or kind 1, the smaller, per tile"), True, ""),
        (Codec(REFERENCE, cv2_png_encoder(None), cv2_decode, any_image,
               to_native=swap_rb, from_native=swap_rb), True, ""),
        (Codec("PNG, OpenCV level 9", cv2_png_encoder(9), cv2_decode, any_image,
               to_native=swap_rb, from_native=swap_rb), True, ""),
        (Codec("PNG, Pillow optimize", pillow_png_encode, pillow_decode, any_image), True, ""),
        (Codec("PNG, libspng decode", cv2_png_encoder(None), spng_decode, spng_output,
               to_native=swap_rb,
               note="OpenCV-default PNG bytes decoded by pyspng.load; encode is OpenCV's again"),
         pyspng is not None, "pyspng not importable"),
        (Codec("WebP lossless, default", webp_encoder(None, None), ic.webp_decode, rgb8_only),
         available("WEBP"), "imagecodecs.WEBP unavailable"),
        (Codec("WebP lossless, fastest", webp_encoder(0, 0), ic.webp_decode, rgb8_only,
               note="level (quality) 0, method 0"),
         available("WEBP"), "imagecodecs.WEBP unavailable"),
        (Codec("QOI", ic.qoi_encode, ic.qoi_decode, rgb8_only),
         available("QOI"), "imagecodecs.QOI unavailable"),
        (Codec("JPEG-LS (CharLS)", ic.jpegls_encode, ic.jpegls_decode, gray_or_rgb,
               note="raw RGB, no colour transform (the README figure used subtract-green)"),
         available("JPEGLS"), "imagecodecs.JPEGLS unavailable"),
        (Codec("JPEG XL lossless, effort 1", jpegxl_encode, jpegxl_decode, any_image, True),
         available("JPEGXL"), "imagecodecs.JPEGXL unavailable"),
        (Codec("HTJ2K reversible (OpenJPH)", htj2k_encode, ic.htj2k_decode, any_image),
         available("HTJ2K"), "imagecodecs.HTJ2K unavailable"),
    ]
    if names:
        wanted = [n.lower() for n in names]
        entries = [e for e in entries
                   if e[0].name == REFERENCE or any(n in e[0].name.lower() for n in wanted)]
    registry = []
    for codec, ok, why in entries:
        if ok:
            registry.append(codec)
        else:
            print(f"note: skipping {codec.name}: {why}")
    return registry


# --------------------------------------------------------------------------
# Measurement


def load(path: Path) -> np.ndarray:
    a = cv2.imread(str(path), cv2.IMREAD_UNCHANGED)
    if a is None:
        raise ValueError(f"cannot read {path}")
    return swap_rb(a)


def best_time(fn: Callable, arg, repeat: int):
    """(result of the last call, fastest of `repeat` calls in seconds)."""
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        result = fn(arg)
        best = min(best, time.perf_counter() - t0)
    return result, best


def exact(decoded, original: np.ndarray) -> bool:
    return (isinstance(decoded, np.ndarray) and decoded.dtype == original.dtype
            and decoded.shape == original.shape and np.array_equal(decoded, original))


def measure(codec: Codec, image: np.ndarray, repeat: int, threads: int) -> dict:
    """One codec on one image at one thread count; never raises."""
    if not codec.supports(image):
        return {"status": "n/a"}
    set_threads(threads)
    native = codec.to_native(image)
    try:
        data, t_enc = best_time(codec.encode, native, repeat)
        decoded, t_dec = best_time(codec.decode, data, repeat)
    except Exception as exc:  # a crash is a result too: report it, go on
        return {"status": "error", "error": f"{type(exc).__name__}: {exc}",
                "trace": traceback.format_exc(limit=3)}
    decoded = codec.from_native(decoded) if isinstance(decoded, np.ndarray) else decoded
    rec = {"status": "ok" if exact(decoded, image) else "fail",
           "bytes": len(data), "encode_s": t_enc, "decode_s": t_dec}
    if rec["status"] == "fail":
        rec["decoded"] = (f"{getattr(decoded, 'dtype', type(decoded).__name__)} "
                          f"{getattr(decoded, 'shape', '')}")
    return rec


def warm_up(registry: list[Codec]) -> None:
    """Compile L3's Numba kernels (cached on disk) and load every library."""
    rng = np.random.default_rng(0)
    samples = [rng.integers(0, 256, (64, 96, 3), dtype=np.uint8),
               rng.integers(0, 40, (64, 96), dtype=np.uint8),
               rng.integers(0, 40000, (64, 96), dtype=np.uint16)]
    for threads in (1, ALL_THREADS):
        for codec in registry:
            for s in samples:
                measure(codec, s, 1, threads)


def bench_folder(folder: Path, registry: list[Codec], repeat: int) -> list[dict]:
    records = []
    for path in sorted(folder.glob("*.png")):
        image = load(path)
        print(f"  {path.name} {image.shape} {image.dtype}", flush=True)
        for codec in registry:
            rec = {"folder": folder.name, "file": path.name, "source_bytes": path.stat().st_size,
                   "shape": list(image.shape), "dtype": str(image.dtype),
                   "pixels": image.shape[0] * image.shape[1], "codec": codec.name,
                   "threads": 1, **measure(codec, image, repeat, 1)}
            records.append(rec)
            if rec["status"] in ("fail", "error"):
                print(f"    {codec.name}: {rec['status'].upper()} "
                      f"{rec.get('error', rec.get('decoded', ''))}")
            if codec.multithreaded and ALL_THREADS > 1:
                multi = {**rec, "threads": ALL_THREADS,
                         **measure(codec, image, repeat, ALL_THREADS)}
                if multi.get("bytes") != rec.get("bytes"):
                    multi["note"] = "size differs from the 1-thread encode"
                records.append(multi)
    set_threads(1)
    return records


# --------------------------------------------------------------------------
# Summaries and reports


def summarise(records: list[dict], registry: list[Codec]) -> list[dict]:
    """Per-codec totals. Images a codec cannot take (n/a) or gets wrong
    (fail/error) are left out of its totals, and its size ratio is taken
    against PNG's total on the same images so the ratio stays comparable."""
    ref = {(r["folder"], r["file"]): r["bytes"] for r in records
           if r["codec"] == REFERENCE and r["threads"] == 1 and r["status"] == "ok"}
    n_images = len({(r["folder"], r["file"]) for r in records})
    rows = []
    for codec in registry:
        mine = [r for r in records if r["codec"] == codec.name]
        one = [r for r in mine if r["threads"] == 1]
        ok = [r for r in one if r["status"] == "ok"]
        row = {"codec": codec.name, "images": n_images,
               "ok": len(ok), "n/a": sum(r["status"] == "n/a" for r in one),
               "failed": [f"{r['file']} ({r['status']})" for r in one
                          if r["status"] in ("fail", "error")]}
        if ok:
            px = sum(r["pixels"] for r in ok)
            total = sum(r["bytes"] for r in ok)
            ref_keys = [(r["folder"], r["file"]) for r in ok]
            row.update(bytes=total, bpp=8 * total / px,
                       vs_source=total / sum(r["source_bytes"] for r in ok),
                       vs_png=(total / sum(ref[k] for k in ref_keys)
                               if all(k in ref for k in ref_keys) else None),
                       enc_mps=px / 1e6 / sum(r["encode_s"] for r in ok),
                       dec_mps=px / 1e6 / sum(r["decode_s"] for r in ok))
            keys = set(ref_keys)
            multi = [r for r in mine if r["threads"] > 1 and r["status"] == "ok"
                     and (r["folder"], r["file"]) in keys]
            if len(multi) == len(ok):
                row.update(enc_mps_all=px / 1e6 / sum(r["encode_s"] for r in multi),
                           dec_mps_all=px / 1e6 / sum(r["decode_s"] for r in multi))
        rows.append(row)
    return rows


def fmt(x, spec: str) -> str:
    return "–" if x is None else format(x, spec)


def markdown_table(rows: list[dict]) -> str:
    many = ALL_THREADS > 1  # one thread (a run under taskset -c 0): no all-thread columns
    head = ("| codec | images ok | total bytes | bpp | size vs PNG | size vs source files | "
            "enc MP/s 1T | dec MP/s 1T |")
    head += f" enc MP/s {ALL_THREADS}T | dec MP/s {ALL_THREADS}T |" if many else ""
    lines = [head, "|" + "---|" * (10 if many else 8)]
    for r in rows:
        count = f"{r['ok']}/{r['images']}"
        if r["n/a"]:
            count += f" ({r['n/a']} n/a)"
        if r["failed"]:
            count += f" **{len(r['failed'])} FAILED**"
        lines.append(
            f"| {r['codec']} | {count} | {fmt(r.get('bytes'), ',')} | "
            f"{fmt(r.get('bpp'), '.2f')} | {fmt(r.get('vs_png'), '.3f')} | {fmt(r.get('vs_source'), '.3f')} | "
            f"{fmt(r.get('enc_mps'), '.1f')} | {fmt(r.get('dec_mps'), '.1f')} |"
            + (f" {fmt(r.get('enc_mps_all'), '.1f')} | {fmt(r.get('dec_mps_all'), '.1f')} |" * many))
    failures = [f"- {r['codec']}: " + ", ".join(r["failed"]) for r in rows if r["failed"]]
    if failures:
        lines += ["", "Not lossless or crashed (left out of that codec's totals):", *failures]
    return "\n".join(lines)


def l3_revision() -> str:
    """Commit of the measured l3codec, flagged if its files have local edits."""
    def git(*args: str) -> str:
        return subprocess.run(["git", "-C", str(REPO), *args], capture_output=True,
                              text=True, check=True).stdout.strip()
    try:
        rev = git("rev-parse", "--short", "HEAD")
        dirty = git("status", "--porcelain", "--", "l3codec")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return rev + (" + uncommitted changes in l3codec/" if dirty else "")


def machine_info() -> dict:
    cpu = platform.processor() or "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    versions = {"python": platform.python_version(), "numpy": np.__version__,
                "numba": numba.__version__, "imagecodecs": imagecodecs.__version__,
                "opencv": cv2.__version__, "pillow": Image.__version__,
                "pyspng": getattr(pyspng, "__version__", None)}
    for lib in ("webp", "jpegxl", "htj2k", "jpegls", "qoi"):
        try:
            versions[lib] = getattr(imagecodecs, f"{lib}_version")()
        except Exception:
            pass
    return {"date": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
            "nproc": os.cpu_count(), "cpu": cpu, "numba_threads": ALL_THREADS,
            # Other work on the machine skews timings; record how busy it was.
            "loadavg_start": list(os.getloadavg()),
            "platform": platform.platform(), "l3codec": l3_revision(), "versions": versions}


def fmt_load(load: list[float]) -> str:
    return "/".join(f"{x:.2f}" for x in load)


def write_markdown(path: Path, info: dict, sections: list[tuple[str, list[dict]]],
                   registry: list[Codec], repeat: int, argv: list[str]) -> None:
    v = info["versions"]
    out = [
        "# Lossless codec comparison", "",
        f"Command: `python bench/codecs.py {' '.join(argv)}`", "",
        f"- Date: {info['date']}",
        f"- Machine: {info['nproc']} CPUs, {info['cpu']} ({info['platform']})",
        f"- Load average (1/5/15 min) at start {fmt_load(info['loadavg_start'])}, "
        f"at end {fmt_load(info['loadavg_end'])}",
        f"- l3codec: {info['l3codec']}",
        f"- numba {v['numba']}, imagecodecs {v['imagecodecs']}, OpenCV {v['opencv']}, "
        f"Pillow {v['pillow']}, pyspng {v['pyspng']}, numpy {v['numpy']}",
        "- Libraries: " + ", ".join(f"{v[k]}" for k in ("webp", "jpegxl", "htj2k", "jpegls", "qoi")
                                    if k in v),
        "",
        f"Times are the best of {repeat} runs per image; MP/s = total megapixels / "
        "sum of per-image times. bpp = bits per pixel (not per sample). "
        f"\"size vs PNG\" = codec total / {REFERENCE} total over the same images (a re-encode); "
        "\"size vs source files\" = codec total / the PNG files' own bytes, as the user has them. "
        "\"1T\" = one thread (Numba, OpenCV, libjxl set to 1); "
        + (f"\"{ALL_THREADS}T\" = all {ALL_THREADS} Numba threads, given only for codecs with "
           "their own thread pool. " if ALL_THREADS > 1 else "")
        + "L3 decode keeps its default payload checksum "
        "(verify=True). \"n/a\" = the codec cannot store that image "
        "(WebP and QOI: 8-bit RGB/RGBA only; JPEG-LS here: 1 or 3 channels; libspng: no 16-bit grey output); such images "
        "are left out of that codec's totals. Every round trip is checked for exact "
        "equality (values, dtype, shape).", "",
    ]
    out += [f"- {c.name}: {c.note}" for c in registry if c.note] + [""]
    for title, rows in sections:
        out += [f"## {title}", "", markdown_table(rows), ""]
    path.write_text("\n".join(out))


# Label positions tried in turn (offset in points, horizontal alignment).
LABEL_SPOTS = [((5, 4), "left"), ((5, -11), "left"), ((-5, 4), "right"),
               ((-5, -11), "right"), ((5, 12), "left"), ((5, -19), "left")]


def place_labels(ax, points: list[tuple[float, float, str, bool]]) -> None:
    """Label each point at the first spot that overlaps no marker and no
    earlier label, so codecs with near-equal results stay readable."""
    from matplotlib.transforms import Bbox

    renderer = ax.figure.canvas.get_renderer()
    # The markers themselves are obstacles too (about 8 px across).
    taken = [Bbox.from_bounds(*(ax.transData.transform((x, y)) - 5), 10, 10)
             for x, y, _, _ in points]
    for x, y, text, bold in sorted(points, key=lambda p: (p[1], p[0])):
        for offset, ha in LABEL_SPOTS:
            label = ax.annotate(text, (x, y), xytext=offset, textcoords="offset points",
                                ha=ha, fontsize=7, fontweight="bold" if bold else "normal")
            box = label.get_window_extent(renderer).expanded(1.02, 1.1)
            if not any(box.overlaps(t) for t in taken):
                break
            label.remove()
        else:  # no free spot: keep the first one
            label = ax.annotate(text, (x, y), xytext=LABEL_SPOTS[0][0],
                                textcoords="offset points", fontsize=7)
        taken.append(label.get_window_extent(renderer))


def write_chart(path: Path, sections: list[tuple[str, list[dict]]]) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FuncFormatter

    n = len(sections)
    cols = min(n, 2)
    nrows = (n + cols - 1) // cols
    fig, axes = plt.subplots(nrows, cols, figsize=(7.5 * cols, 5.5 * nrows), squeeze=False)
    fig.suptitle("Lossless codecs: smaller (down) and faster (right) is better")
    for ax, (title, rows) in zip(axes.flat, sections):
        points = [(r["dec_mps"], r["vs_png"], r["codec"], r["codec"].startswith("L3"))
                  for r in rows if r.get("dec_mps") and r.get("vs_png")]
        for x, y, _, l3 in points:
            ax.scatter(x, y, s=40, zorder=3, color="tab:red" if l3 else "tab:blue")
        ax.set_xscale("log")  # speeds span two orders of magnitude
        # Plain numbers instead of 2x10^1; minor labels only at 2, 3, 5.
        ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
        ax.xaxis.set_minor_formatter(FuncFormatter(
            lambda v, _: f"{v:g}" if f"{v:.0e}"[0] in "235" else ""))
        ax.tick_params(axis="x", which="minor", labelsize=7)
        ax.margins(x=0.15, y=0.08)  # room for labels at the edges
        ax.set_xlabel("decode MP/s, one thread (log scale)")
        ax.set_ylabel(f"total size / {REFERENCE}")
        ax.set_title(title)
        ax.grid(True, which="both", alpha=0.3)
        place_labels(ax, points)
    for ax in axes.flat[n:]:
        ax.set_visible(False)
    fig.tight_layout(rect=(0, 0, 1, 0.98))  # keep the suptitle clear of titles
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("folders", nargs="*", type=Path,
                   help=f"folders of PNG images (default: {DEFAULT_FOLDER})")
    p.add_argument("--repeat", type=int, default=3, help="timing runs per image (best is kept)")
    p.add_argument("--codec", action="append", metavar="NAME",
                   help="only codecs whose names contain NAME (repeatable; the PNG size reference stays)")
    p.add_argument("--out", type=Path, default=REPO / "bench" / "results")
    args = p.parse_args(argv)

    folders = args.folders or [DEFAULT_FOLDER]
    for f in folders:
        if not f.is_dir():
            p.error(f"not a folder: {f}")
    args.out.mkdir(parents=True, exist_ok=True)

    info = machine_info()
    print(f"{info['date']}  {info['nproc']} CPUs  {info['cpu']}  numba {numba.__version__} "
          f"({ALL_THREADS} threads)  imagecodecs {imagecodecs.__version__}")
    registry = build_registry(args.codec)
    warm_up(registry)

    records: list[dict] = []
    sections = []
    for folder in folders:
        print(f"{folder}:")
        recs = bench_folder(folder, registry, args.repeat)
        records += recs
        sections.append((f"{folder.name} ({len({r['file'] for r in recs})} images)",
                         summarise(recs, registry)))
    if len(folders) > 1:
        sections.append((f"All folders ({len({(r['folder'], r['file']) for r in records})} "
                         "images)", summarise(records, registry)))

    info["loadavg_end"] = list(os.getloadavg())
    write_markdown(args.out / "codecs.md", info, sections, registry, args.repeat, argv)
    write_chart(args.out / "codecs.png", sections)
    (args.out / "codecs.json").write_text(json.dumps(
        {"machine": info, "repeat": args.repeat, "folders": [str(f) for f in folders],
         "summary": {title: rows for title, rows in sections}, "records": records},
        indent=1))
    for title, rows in sections:
        print(f"\n## {title}\n\n{markdown_table(rows)}")
    print(f"\nwrote {args.out}/codecs.md, codecs.json, codecs.png")
    return 0


if __name__ == "__main__":
    sys.exit(main())
