"""The frames and the Cityscapes-like tree that bench/gpu_check.py measures on.

Photos come from <corpus>/hires2048/*.png and label maps from <corpus>/labels/*_labelIds.png when the
corpus is there, else they are generated (photo-like fields and blocky label maps of the same size),
and every report says which. Encoded frames are cached in the check's work folder, so that each step
(a process of its own) encodes them once.
"""

from __future__ import annotations

import importlib.util
import os
import pathlib
import pickle

import numpy as np

REPO = pathlib.Path(__file__).resolve().parents[1]
DEFAULT_CORPUS = REPO.parent / "shared" / "corpus"
HIRES_SHAPE = (1024, 2048)  # hires2048: 2048 x 1024 RGB
DISTINCT_FRAMES = 6  # batches repeat these (the corpus folder holds 6)
LABEL_CLASSES = 34  # Cityscapes labelIds 0..33


def bench_gpu():
    """bench/gpu.py as a module (its frame loader and its estimate are reused, not copied)."""
    spec = importlib.util.spec_from_file_location("bench_gpu", REPO / "bench" / "gpu.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def default_corpus() -> pathlib.Path:
    """../shared/corpus, else a copy carried inside the checkout (shared/corpus: the device tool sends
    the checkout, not what lies beside it), else ../shared/corpus all the same (absent: generated)."""
    for folder in (DEFAULT_CORPUS, REPO / "shared" / "corpus"):
        if (folder / "hires2048").is_dir():
            return folder
    return DEFAULT_CORPUS


def photo_like(seed: int, shape: tuple = HIRES_SHAPE) -> np.ndarray:
    """Smooth fields at several scales plus sensor-like noise: residuals about as large as a
    photograph's (indicative only: timings on it are not a corpus frame's)."""
    import cv2

    height, width = shape
    rng = np.random.default_rng(seed)
    image = np.full((height, width, 3), 128.0, np.float32)
    for scale, amplitude in ((256, 60.0), (64, 25.0), (16, 8.0)):
        small = rng.normal(0, 1, (height // scale + 2, width // scale + 2, 3)).astype(np.float32)
        image += amplitude * cv2.resize(small, (width, height), interpolation=cv2.INTER_CUBIC)
    image += rng.normal(0, 0.5, image.shape).astype(np.float32)  # 2048x1024: about 3.6:1, the corpus 4.5:1
    return np.clip(image, 0, 255).astype(np.uint8)


def label_map_like(seed: int, shape: tuple = HIRES_SHAPE) -> np.ndarray:
    """Regions with smooth boundaries, 15 of the classes, as a labelIds map: like the corpus's maps,
    its planes encode as LZ streams (16 expansions a 2048x1024 map), so the LZ expansion is timed too."""
    import cv2

    height, width = shape
    rng = np.random.default_rng(1000 + seed)
    small = rng.normal(0, 1, (height // 128 + 2, width // 128 + 2)).astype(np.float32)
    field = cv2.resize(small, (width, height), interpolation=cv2.INTER_CUBIC)
    classes = np.clip(((field + 2.5) * 3).astype(np.int64), 0, 14)
    return rng.permutation(LABEL_CLASSES)[:15].astype(np.uint8)[classes]


def load_frames(corpus: pathlib.Path, shape: tuple = HIRES_SHAPE, count: int = DISTINCT_FRAMES) -> dict:
    """{"photos": [HxWx3], "labels": [HxW], "source": words}: the corpus's frames (cropped to
    shape when larger) when present, else generated ones."""
    import cv2

    folder = pathlib.Path(corpus)
    photo_folder, label_folder = folder / "hires2048", folder / "labels"
    if any(photo_folder.glob("*.png")):
        photos = [frame[:shape[0], :shape[1]] for frame in bench_gpu().load_frames(photo_folder)[:count]]
        labels = [cv2.imread(str(path), cv2.IMREAD_UNCHANGED)
                  for path in sorted(label_folder.glob("*_labelIds.png"))[:count]]
        labels = [label[:shape[0], :shape[1]] for label in labels if label is not None and label.ndim == 2]
        if not labels:
            labels = [label_map_like(seed, shape) for seed in range(count)]
        photos = [np.ascontiguousarray(p) for p in photos]
        labels = [np.ascontiguousarray(label) for label in labels]
        return {"photos": photos, "labels": labels, "source": f"corpus ({folder})"}
    return {"photos": [photo_like(seed, shape) for seed in range(count)],
            "labels": [label_map_like(seed, shape) for seed in range(count)],
            "source": f"generated ({pathlib.Path(corpus)} absent)"}


def encoded_frames(check) -> dict:
    """load_frames(check.corpus, check.frame_shape) plus {"encoded": {(kind, mode): [bytes]}}, cached in
    the check's work folder (each step is a process of its own)."""
    import l3codec

    shape = tuple(check.frame_shape)
    cache = pathlib.Path(check.work) / f"frames-{shape[0]}x{shape[1]}.pickle"
    if cache.exists():
        return pickle.loads(cache.read_bytes())
    frames = load_frames(pathlib.Path(check.corpus), shape)
    frames["encoded"] = {(kind, mode): [l3codec.encode(image, mode=mode) for image in frames[kind]]
                         for kind in ("photos", "labels") for mode in ("compact", "fast")}
    cache.write_bytes(pickle.dumps(frames))
    return frames


def cityscapes_tree(root: pathlib.Path, frames: dict, count: int) -> int:
    """root/leftImg8bit/train/{city}/*_leftImg8bit.png and root/gtFine/train/{city}/*_gtFine_labelIds.png,
    count samples cycling through the frames; each distinct PNG written once, the rest hard links
    (the converter still encodes every sample). Returns the bytes written."""
    import cv2

    written, first_of = 0, {}
    for i in range(count):
        city = ("aachen", "bochum", "bremen", "cologne")[i % 4]
        name = f"{city}_{i:06d}_000019"
        image_path = root / "leftImg8bit" / "train" / city / f"{name}_leftImg8bit.png"
        label_path = root / "gtFine" / "train" / city / f"{name}_gtFine_labelIds.png"
        image_path.parent.mkdir(parents=True, exist_ok=True)
        label_path.parent.mkdir(parents=True, exist_ok=True)
        j = i % len(frames["photos"])
        if j in first_of:
            os.link(first_of[j][0], image_path)
            os.link(first_of[j][1], label_path)
            continue
        photo = frames["photos"][j]
        label = frames["labels"][j % len(frames["labels"])]
        if label.shape != photo.shape[:2]:
            label = cv2.resize(label, (photo.shape[1], photo.shape[0]), interpolation=cv2.INTER_NEAREST)
        bgr = np.ascontiguousarray(photo[:, :, ::-1])
        cv2.imwrite(str(image_path), bgr, [cv2.IMWRITE_PNG_COMPRESSION, 1])
        cv2.imwrite(str(label_path), label, [cv2.IMWRITE_PNG_COMPRESSION, 1])
        first_of[j] = (image_path, label_path)
        written += image_path.stat().st_size + label_path.stat().st_size
    return written
