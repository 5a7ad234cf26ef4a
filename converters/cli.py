"""l3convert: convert PNG/JPEG trees into sharded L3 datasets, and inspect them."""

from __future__ import annotations

import argparse
import os
import signal
import sys

from l3codec import __version__
from l3codec import format as fmt

EXAMPLES = """examples:
  l3convert demo /tmp/l3-demo                             generate a small Cityscapes-like tree, convert, read back
  l3convert folder ~/photos ~/photos-l3                   ImageFolder tree (class = directory) or plain images
  l3convert cityscapes ~/cityscapes ~/cityscapes-l3       leftImg8bit + gtFine, every split found
  l3convert imagenet ~/ILSVRC/Data/CLS-LOC ~/imagenet-l3 --synset-words LOC_synset_mapping.txt
  l3convert imagenet SRC DST --resize-short 256 --workers 8   lossy resize, recorded in the manifest
  l3convert folder SRC DST --scheduler tcp://10.0.0.1:8786    on a Dask cluster (DST on a shared filesystem)
  l3convert folder SRC DST --resume                            finish an interrupted run
  l3convert inspect DST [--deep]                               counts, sizes, checksums (--deep decodes all)
"""


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer, not {text}")
    return value


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="l3convert", description="Re-encode PNG/JPEG datasets into sharded, indexed L3 datasets.",
        epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version", version=fmt.version_text(__version__))
    commands = parser.add_subparsers(dest="command", required=True, metavar="{folder,cityscapes,imagenet,inspect,demo}")
    layouts = {
        "folder": "an ImageFolder tree (class index = sorted directory names) or plain images (no labels)",
        "cityscapes": "leftImg8bit/{split}/{city}/*_leftImg8bit.png with gtFine (or gtCoarse) label maps",
        "imagenet": "train/{wnid}/*.JPEG; val/ as wnid folders or flat with LOC_val_solution.csv",
    }
    for name, help_text in layouts.items():
        command = commands.add_parser(name, help=help_text, description=help_text)
        command.add_argument("src", help="the source tree")
        command.add_argument("dst", help="the new dataset directory (must be new or empty, unless --resume)")
        command.add_argument("--split", help="convert only this split (folder: the split name to use)"
                             + (" [default: train]" if name == "folder" else " [default: every split found]"))
        command.add_argument("--mode", choices=tuple(fmt.MODES), default="compact",
                             help="L3 mode for images [default: compact]"
                             + ("; label maps are always compact" if name == "cityscapes" else ""))
        command.add_argument("--tile-width", type=_positive, help="L3 tile width (default: the mode's)")
        command.add_argument("--shard-size", default="auto",
                             help="about this many bytes per shard (256MB, 1MB) [default: auto: a split in 16 "
                             "shards of 1MB to 256MB, so every worker is busy on a small dataset]")
        command.add_argument("--workers", type=int, help="processes (default: all cores; 0 or 1: in this process)")
        command.add_argument("--scheduler", metavar="ADDRESS", help="run on this Dask distributed scheduler")
        command.add_argument("--verify", action="store_true", help="decode every written sample and compare it "
                             "with the source pixels")
        command.add_argument("--resume", action="store_true", help="finish an interrupted conversion into DST")
        command.add_argument("--max-side", type=_positive, help="LOSSY: downscale so the long side is <= N")
        command.add_argument("--resize-short", type=_positive, help="LOSSY: downscale so the short side is N")
        command.add_argument("--max-pixels", type=int, default=fmt.DEFAULT_MAX_PIXELS, metavar="N",
                             help=f"skip (and report) a source image of more pixels, from its header (default "
                             f"{fmt.DEFAULT_MAX_PIXELS}, 8192x8192; at most {fmt.MAX_PIXELS})")
        command.add_argument("--exif-transpose", action="store_true",
                             help="apply EXIF orientation (default: pixels as stored, as torchvision's ImageFolder)")
        command.add_argument("--no-progress", action="store_true", help="no progress bar")
        if name == "folder":
            command.add_argument("--force", action="store_true",
                                 help="convert a tree laid out as Cityscapes or ImageNet as classes anyway")
        if name == "cityscapes":
            command.add_argument("--annotations", choices=("gtFine", "gtCoarse"), default="gtFine",
                                 help="[default: gtFine]")
        if name == "imagenet":
            command.add_argument("--val-labels", help="ground truth for a flat val/ (LOC_val_solution.csv or "
                                 "'file wnid' lines; default: found in SRC)")
            command.add_argument("--synset-words", help="'wnid name' lines for class names (default: found in SRC)")
    inspect = commands.add_parser("inspect", help="describe a converted dataset and check its shard checksums")
    inspect.add_argument("dst", help="a converted dataset (path or fsspec URL)")
    inspect.add_argument("--deep", action="store_true", help="also decode every sample")
    inspect.add_argument("--json", action="store_true", help="print the report as JSON")
    demo = commands.add_parser("demo", help="the main job on generated data: write a small Cityscapes-like tree, "
                               "convert it (verified), read it back through the training loader, check every pixel")
    demo.add_argument("dir", help="a new directory for the tree and the dataset")
    demo.add_argument("--workers", type=int, default=2, help="the loader's workers [default: 2]")
    return parser


# all that a run stopped by Ctrl-C or SIGTERM prints on stderr (after any first-use notice)
STOPPED = "l3convert: {how}; finished shards are kept, rerun with --resume to finish"


class _Terminated(KeyboardInterrupt):
    """SIGTERM (what schedulers and `docker stop` send), handled as Ctrl-C is."""


def _terminate(signum, frame):
    raise _Terminated()


def main(argv=None) -> int:
    args = _parser().parse_args(argv)
    previous = signal.signal(signal.SIGTERM, _terminate)
    try:
        return _run(args)
    finally:
        signal.signal(signal.SIGTERM, previous)


def _run(args) -> int:
    from l3codec.format import L3Error

    from .executors import ExecutorError
    from .layouts import LayoutError
    from .pipeline import ConvertError, convert

    try:
        if args.command == "demo":
            from l3codec import demo

            return demo.run(args.dir, workers=args.workers)
        if args.command == "inspect":
            from .inspect import inspect, report_text

            report = inspect(args.dst, deep=args.deep)
            if args.json:
                import json

                print(json.dumps(report, indent=1))
            else:
                print(report_text(report))
            return 0 if report["ok"] else 1
        options = {name: getattr(args, name) for name in ("annotations", "val_labels", "synset_words", "force")
                   if hasattr(args, name)}
        summary = convert(
            args.command, args.src, args.dst, split=args.split, mode=args.mode, tile_width=args.tile_width,
            shard_size=args.shard_size, workers=args.workers, scheduler=args.scheduler, verify=args.verify,
            resume=args.resume, max_side=args.max_side, resize_short=args.resize_short,
            exif_transpose=args.exif_transpose, max_pixels=args.max_pixels, progress=not args.no_progress,
            **options)
    except KeyboardInterrupt as stop:
        terminated = isinstance(stop, _Terminated)
        print(STOPPED.format(how="terminated" if terminated else "interrupted"), file=sys.stderr)
        return 143 if terminated else 130
    except (LayoutError, ConvertError, ExecutorError, L3Error, ValueError, FileNotFoundError) as error:
        print(f"l3convert: {error}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # the reader of our output went away (| head): not an error of ours
        # Python flushes stdout again at exit; point it at devnull so that flush cannot fail too
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141
    print(summary)
    return 1 if any(failure["kind"] == "verify" for failure in summary.failures) else 0


if __name__ == "__main__":
    sys.exit(main())
