"""Source layouts: find every sample of a folder, Cityscapes or ImageNet tree, by a stated rule.

Each finder returns a Layout (splits of SourceSample, class names) or raises LayoutError saying what
it expected and what it found. Nothing here reads pixels.
"""

from __future__ import annotations

import csv
import os
import re
import stat
from dataclasses import dataclass, field

from .pixels import IMAGE_SUFFIXES


class LayoutError(ValueError):
    """The source tree does not have the layout asked for."""


@dataclass(frozen=True)
class SourceSample:
    key: str  # unique in its split; no '.', as WebDataset splits member names at the first dot
    files: tuple  # ((member, path), ...) with member in dataset.FIELDS or "json"
    label: int = -1


@dataclass
class Layout:
    name: str
    splits: dict  # split name -> list[SourceSample], in sample order
    fields: dict  # split name -> tuple of image fields every sample of it has
    class_names: list = field(default_factory=list)
    class_ids: list = field(default_factory=list)  # e.g. ImageNet wnids, when names come from a file
    # sample depths of the "image" field seen in the headers read (folder reads some of each
    # class; the other layouts' images are 8-bit): what the converter's workers compile ahead
    image_bits: tuple = (8,)


def _visible(entry) -> bool:
    return not entry.name.startswith(".")


def _is_image(name: str) -> bool:
    return name.lower().endswith(IMAGE_SUFFIXES)


def _listing(path: str, limit: int = 8) -> str:
    try:
        names = sorted(entry.name + ("/" if entry.is_dir() else "") for entry in os.scandir(path) if _visible(entry))
    except OSError as error:
        return f"unreadable ({error.strerror})"
    if not names:
        return "an empty directory"
    more = f", ... ({len(names)} entries)" if len(names) > limit else ""
    return ", ".join(names[:limit]) + more


def _require_dir(path: str, what: str) -> None:
    if not os.path.isdir(path):
        found = "nothing" if not os.path.exists(path) else "a file"
        raise LayoutError(f"expected {what} at {path}, found {found}")


def _sample_key(relative: str) -> str:
    """A WebDataset key from a path relative to the source: no suffix, no dots, '/' kept, and no
    whitespace or control characters (DALI's index files separate fields with spaces)."""
    stem = os.path.splitext(relative)[0].replace(os.sep, "/")
    return re.sub(r"[\s\x00-\x1f\x7f]", "_", stem.replace(".", "_"))


def _unique_keys(samples: list) -> list:
    """Keys made unique (a.b.png and a_b.png give a_b and a_b~1)."""
    seen = {}
    result = []
    for sample in samples:
        key = sample.key
        if key in seen:
            seen[key] += 1
            key = f"{key}~{seen[sample.key]}"
        else:
            seen[key] = 0
        result.append(SourceSample(key, sample.files, sample.label) if key != sample.key else sample)
    return result


def _images_under(directory: str) -> list:
    """Image files under directory, recursively, as sorted paths (symlinks followed, as ImageFolder)."""
    found = []
    for parent, dirs, files in os.walk(directory, followlinks=True):
        dirs[:] = sorted(name for name in dirs if not name.startswith("."))
        found += [os.path.join(parent, name) for name in files if _is_image(name) and not name.startswith(".")]
    return sorted(found)


def _other_layout(src: str, classes: list) -> str | None:
    """The layout a tree matches when it is not an ImageFolder tree: its "classes" would be a
    dataset's own folders (leftImg8bit and gtFine, or ImageNet's splits of wnid folders)."""
    if "leftImg8bit" in classes and ({"gtFine", "gtCoarse"} & set(classes)):
        return "cityscapes"
    for split in {"train", "val"} & set(classes):
        inside = [entry.name for entry in os.scandir(os.path.join(src, split)) if entry.is_dir()]
        if inside and all(re.fullmatch(r"n\d{8}", name) for name in inside):
            return "imagenet"
    return None


KIND_SAMPLES = 16  # files per class whose headers are read for their kind
NOT_REGULAR = "not a regular file (a FIFO or a device): skipped"  # as the l3 tool says


def read_regular_file(path: str, limit: int = -1) -> bytes:
    """The first limit bytes (all with -1) of a regular file; OSError(NOT_REGULAR) for a FIFO or a
    device, found without blocking: opening a FIFO for reading waits for a writer."""
    descriptor = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    with open(descriptor, "rb") as file:
        if not stat.S_ISREG(os.fstat(descriptor).st_mode):
            raise OSError(NOT_REGULAR)
        return file.read(limit)


def _sample_kind(path: str) -> tuple | None:
    """(bits, colour) from a source file's header alone, None if it cannot be read: a PNG's IHDR
    (bit depth, colour type), else Pillow's mode (Image.open reads only the header)."""
    try:
        head = read_regular_file(path, 33)
        if head[:8] == b"\x89PNG\r\n\x1a\n" and head[12:16] == b"IHDR":
            return (16 if head[24] == 16 else 8), head[25] in (2, 3, 6)
        from PIL import Image

        with Image.open(path) as image:
            return (16 if image.mode.startswith("I") else 8), image.mode not in ("1", "L", "LA", "I", "I;16",
                                                                                  "I;16B", "I;16L")
    except Exception:  # noqa: BLE001 - a bad file is the converter's to report, with its reason
        return None


def _sampled_kinds(paths: list) -> list:
    """[(path, (bits, colour))] of KIND_SAMPLES files spread over paths (unreadable ones left out)."""
    chosen = paths[:: max(1, len(paths) // KIND_SAMPLES)][:KIND_SAMPLES]
    return [(path, kind) for path in chosen if (kind := _sample_kind(path)) is not None]


def _label_maps_among_colour(directory: str, kinds: list) -> str | None:
    """Why a class looks like label maps among photographs: 16-bit single-channel images (label,
    instance or depth maps) beside colour ones, from _sampled_kinds; None if it does not. 8- and
    16-bit grey together (label maps) pass."""
    grey16 = next((path for path, kind in kinds if kind == (16, False)), None)
    colour = next((path for path, kind in kinds if kind[1]), None)
    if grey16 is None or colour is None:
        return None
    return (f"{directory} mixes 16-bit single-channel images with colour ones "
            f"({os.path.relpath(grey16, directory)}, {os.path.relpath(colour, directory)}): label maps among "
            "photographs? Convert them apart, or pass --force to take them as they are")


def find_folder(src: str, *, split: str | None = None, force: bool = False, **_) -> Layout:
    """An ImageFolder tree (class = sorted directory names, as torchvision) or plain unlabelled images.

    A tree laid out as Cityscapes or ImageNet is refused unless force: its "classes" would be
    the dataset's own folders (label maps mixed with photographs as training images); so is a
    class (or a folder of plain images) holding 16-bit single-channel images beside colour ones."""
    _require_dir(src, "a folder of images or of class directories")
    entries = sorted((entry for entry in os.scandir(src) if _visible(entry)), key=lambda entry: entry.name)
    classes = [entry.name for entry in entries if entry.is_dir()]
    files = [entry.name for entry in entries if entry.is_file() and _is_image(entry.name)]
    other = None if force else _other_layout(src, classes)
    if other:
        raise LayoutError(
            f"{src} is laid out as {other} (folders {', '.join(classes[:4])}), not as an ImageFolder tree "
            f"of classes: convert it with 'l3convert {other} SRC DST' (or pass --force to take its folders "
            "as classes)"
        )
    if classes and files:
        raise LayoutError(
            f"expected either class directories or plain image files in {src}, found both "
            f"({len(classes)} directories such as {classes[0]!r}, {len(files)} images such as {files[0]!r})"
        )
    samples = []
    bits = set()
    groups = [(os.path.join(src, name), _images_under(os.path.join(src, name))) for name in classes] if classes \
        else [(src, [os.path.join(src, name) for name in files])]
    for label, (directory, paths) in enumerate(groups):
        kinds = _sampled_kinds(paths)
        bits |= {kind[0] for _, kind in kinds}
        mixed = None if force else _label_maps_among_colour(directory, kinds)
        if mixed:
            raise LayoutError(mixed)
        samples += [SourceSample(_sample_key(os.path.relpath(path, src)), (("image", path),),
                                 label if classes else -1) for path in paths]
    if not samples:
        raise LayoutError(
            f"expected image files ({', '.join(IMAGE_SUFFIXES)}) in {src} or in class directories under it, "
            f"found {_listing(src)}"
        )
    name = split or "train"
    return Layout("folder", {name: _unique_keys(samples)}, {name: ("image",)}, classes,
                  image_bits=tuple(sorted(bits)) or (8,))


CITYSCAPES_LABELS = {"labelIds": "labelIds.png", "instanceIds": "instanceIds.png", "color": "color.png"}


def find_cityscapes(src: str, *, split: str | None = None, annotations: str = "gtFine", **_) -> Layout:
    """leftImg8bit/{split}/{city}/*_leftImg8bit.png with {annotations}/{split}/{city}/*_{annotations}_*.png."""
    images_root = os.path.join(src, "leftImg8bit")
    if not os.path.isdir(images_root):
        raise LayoutError(
            f"expected a Cityscapes tree: {src}/leftImg8bit/{{split}}/{{city}}/*_leftImg8bit.png "
            f"(labels in {src}/{annotations}/...), found {_listing(src) if os.path.isdir(src) else 'no directory'}"
        )
    available = sorted(entry.name for entry in os.scandir(images_root) if entry.is_dir() and _visible(entry))
    if split is not None and split not in available:
        raise LayoutError(f"expected split {split!r} in {images_root}, found splits {available or 'none'}")
    splits, fields = {}, {}
    for name in [split] if split else available:
        split_images = os.path.join(images_root, name)
        labels_root = os.path.join(src, annotations, name)
        labelled = os.path.isdir(labels_root)
        samples = []
        for city in sorted(entry.name for entry in os.scandir(split_images) if entry.is_dir() and _visible(entry)):
            for file_name in sorted(os.listdir(os.path.join(split_images, city))):
                if not file_name.endswith("_leftImg8bit.png"):
                    continue
                stem = file_name[: -len("_leftImg8bit.png")]
                files = [("image", os.path.join(split_images, city, file_name))]
                if labelled:
                    prefix = os.path.join(labels_root, city, f"{stem}_{annotations}_")
                    # a kind of label map found for any sample is expected of all (those without it fail)
                    files += [(member, prefix + suffix) for member, suffix in CITYSCAPES_LABELS.items()]
                    files.append(("json", prefix + "polygons.json"))
                samples.append(SourceSample(_sample_key(stem), tuple(files)))
        if not samples:
            raise LayoutError(f"expected {split_images}/{{city}}/*_leftImg8bit.png, found {_listing(split_images)}")
        present = {member for sample in samples for member, path in sample.files[1:] if os.path.exists(path)}
        splits[name] = [SourceSample(sample.key, tuple((member, path) for member, path in sample.files
                                                       if member == "image" or member in present), sample.label)
                        for sample in samples]
        fields[name] = ("image", *(member for member in CITYSCAPES_LABELS if member in present))
    if not splits:
        raise LayoutError(f"expected split directories (train, val, test) in {images_root}, found none")
    return Layout("cityscapes", splits, fields)


WNID = re.compile(r"^n\d{8}$")
SYNSET_FILES = ("LOC_synset_mapping.txt", "synset_words.txt")
VAL_LABEL_FILES = ("LOC_val_solution.csv", "val_labels.txt")


def _read_synsets(path: str) -> dict:
    """wnid -> name from 'n01440764 tench, Tinca tinca' lines."""
    names = {}
    with open(path, encoding="utf-8") as file:
        for line in file:
            parts = line.strip().split(None, 1)
            if parts:
                names[parts[0]] = parts[1] if len(parts) > 1 else parts[0]
    return names


def _read_val_labels(path: str) -> dict:
    """file stem -> wnid, from LOC_val_solution.csv (ImageId,PredictionString) or 'file wnid' lines."""
    labels = {}
    with open(path, encoding="utf-8", newline="") as file:
        if path.endswith(".csv"):
            for row in csv.DictReader(file):
                labels[row["ImageId"]] = row["PredictionString"].split()[0]
        else:
            for line in file:
                parts = line.split()
                if len(parts) >= 2:
                    labels[os.path.splitext(parts[0])[0]] = parts[1]
    return labels


def _first_existing(src: str, names) -> str | None:
    for name in names:
        if os.path.isfile(os.path.join(src, name)):
            return os.path.join(src, name)
    return None


def find_imagenet(src: str, *, split: str | None = None, val_labels: str | None = None,
                  synset_words: str | None = None, **_) -> Layout:
    """train/{wnid}/*.JPEG; val/ as wnid folders or flat with a ground-truth file; class = sorted wnids."""
    present = [name for name in ("train", "val") if os.path.isdir(os.path.join(src, name))]
    if not present:
        raise LayoutError(
            f"expected an ImageNet tree: {src}/train/{{wnid}}/*.JPEG and/or {src}/val/, "
            f"found {_listing(src) if os.path.isdir(src) else 'no directory'}"
        )
    wanted = [split] if split else present
    for name in wanted:
        _require_dir(os.path.join(src, name), f"the ImageNet split {name!r}")

    def class_dirs(path):
        return sorted(entry.name for entry in os.scandir(path) if entry.is_dir() and _visible(entry))

    wnids = class_dirs(os.path.join(src, present[0])) if "train" not in present else class_dirs(
        os.path.join(src, "train"))
    if not wnids:
        raise LayoutError(f"expected class directories (wnids such as n01440764) in {src}/{present[0]}, "
                          f"found {_listing(os.path.join(src, present[0]))}")
    odd = [name for name in wnids if not WNID.match(name)]
    if odd:
        raise LayoutError(f"expected wnid directories such as n01440764 in {src}/train, found {odd[:3]}")
    label_of = {wnid: i for i, wnid in enumerate(wnids)}
    splits = {}
    for name in wanted:
        root = os.path.join(src, name)
        samples = []
        if class_dirs(root):
            for wnid in class_dirs(root):
                if wnid not in label_of:
                    raise LayoutError(f"{root}/{wnid} is not one of the {len(wnids)} training classes")
                for path in _images_under(os.path.join(root, wnid)):
                    key = _sample_key(os.path.basename(path))
                    samples.append(SourceSample(key, (("image", path),), label_of[wnid]))
        else:
            labels_path = val_labels or _first_existing(src, VAL_LABEL_FILES)
            if labels_path is None:
                raise LayoutError(
                    f"{root} is flat (no wnid folders): expected a ground-truth file, "
                    f"{' or '.join(VAL_LABEL_FILES)} in {src} or --val-labels FILE"
                )
            truth = _read_val_labels(labels_path)
            for path in _images_under(root):
                stem = os.path.splitext(os.path.basename(path))[0]
                if stem not in truth or truth[stem] not in label_of:
                    raise LayoutError(f"{labels_path} gives no known class for {path}")
                samples.append(SourceSample(_sample_key(stem), (("image", path),), label_of[truth[stem]]))
        if not samples:
            raise LayoutError(f"expected JPEG files in {root}, found {_listing(root)}")
        splits[name] = _unique_keys(samples)
    synsets_path = synset_words or _first_existing(src, SYNSET_FILES)
    names = _read_synsets(synsets_path) if synsets_path else {}
    class_names = [names.get(wnid, wnid) for wnid in wnids]
    return Layout("imagenet", splits, {name: ("image",) for name in splits}, class_names, list(wnids))


FINDERS = {"folder": find_folder, "cityscapes": find_cityscapes, "imagenet": find_imagenet}


def find_layout(layout: str, src: str, **options) -> Layout:
    if layout not in FINDERS:
        raise LayoutError(f"layout must be one of {sorted(FINDERS)}, not {layout!r}")
    return FINDERS[layout](os.fspath(src), **options)
