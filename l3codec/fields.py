"""The fields of a converted dataset's samples, defined once for the converter (what to encode
and how to resize), the container (tar member suffixes, index columns) and the loader (how to
resample and present), as FFCV's Field classes are.

Built in, for Cityscapes-like datasets:

    image        the photograph: any channels and depth, the user's mode, resized bilinear
    labelIds     class ids per pixel      } label maps: stored compact (exact, about half their
    instanceIds  instance ids per pixel   } PNG), resized nearest so no new value appears,
    color        the labels' colour image } yielded as N×H×W (one channel) or N×C×H×W

Any other field is declared where it is used, without editing this package: a depth map is
Field("depth", kind="label", dtype="uint16"), given to L3Dataset(fields=("image", depth)). A
field NAME is stored as the tar member "<key>.NAME.l3" ("<key>.l3" for image) and the index
columns NAME_offset, NAME_size, NAME_height, NAME_width, NAME_channels, NAME_bits (DATASET.md).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from .format import L3Error

KINDS = ("image", "label")
CLASS_SUFFIX = "cls"  # the class index, as ASCII decimal
JSON_MEMBER = "json"  # per-sample JSON (e.g. polygons)
# names a field cannot take: other members and index columns, and the batch's own keys
RESERVED_NAMES = frozenset({JSON_MEMBER, CLASS_SUFFIX, "key", "shard", "label", "source_bytes", "index",
                            "region", "flip", "skipped"})
_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_]*")


@dataclass(frozen=True)
class Field:
    """One image-like member of every sample (an L3 file), and how the loader treats it.

    kind="image": resized bilinear, normalised when the loader normalises, yielded N×C×H×W.
    kind="label": a map of exact per-pixel values (class ids, instance ids, depth): resized
    nearest neighbour so no new value appears, never normalised, one channel yielded N×H×W.
    Crops and flips apply to every field of a sample alike.
    dtype: "uint8" or "uint16", checked against the dataset's index when it is opened; None: either.
    """

    name: str
    kind: str = "image"
    dtype: str | None = None

    def __post_init__(self):
        if not isinstance(self.name, str) or not _NAME.fullmatch(self.name) or self.name in RESERVED_NAMES:
            raise L3Error(f"field name {self.name!r} must be letters, digits and '_', starting with a "
                          f"letter, and none of {sorted(RESERVED_NAMES)}")
        if self.kind not in KINDS:
            raise L3Error(f"field {self.name!r}: kind must be one of {KINDS}, not {self.kind!r}")
        if self.dtype is not None:
            try:
                dtype = np.dtype(self.dtype)
            except TypeError:
                dtype = None
            if dtype not in (np.dtype(np.uint8), np.dtype(np.uint16)):
                raise L3Error(f"field {self.name!r}: dtype must be 'uint8', 'uint16' or None, "
                              f"not {self.dtype!r}")
            object.__setattr__(self, "dtype", dtype.name)

    @property
    def suffix(self) -> str:
        """The tar member after "<key>."."""
        return member_suffix(self.name)

    @property
    def is_label(self) -> bool:
        return self.kind == "label"

    @property
    def resampling(self) -> str:
        """How a crop is resized: bilinear (antialiased) for images, nearest for label maps."""
        return "nearest" if self.is_label else "bilinear"

    def encoding_mode(self, image_mode: str) -> str:
        """The L3 mode the converter stores this field in, given the mode asked for images."""
        return "compact" if self.is_label else image_mode


IMAGE_FIELDS = {field.name: field for field in (
    Field("image", "image"),
    Field("labelIds", "label"),
    Field("instanceIds", "label"),
    Field("color", "label"),
)}  # in tar member order


def member_suffix(name: str) -> str:
    """A field's tar member suffix: "l3" for image, "NAME.l3" for any other (JSON_MEMBER as it is)."""
    if name == JSON_MEMBER:
        return JSON_MEMBER
    return "l3" if name == "image" else f"{name}.l3"


def field(name: str) -> Field:
    """A built-in field by name."""
    try:
        return IMAGE_FIELDS[name]
    except KeyError:
        raise L3Error(f"unknown field {name!r}; the built-in fields are {list(IMAGE_FIELDS)}, and any other "
                      f"is declared: l3codec.fields.Field({name!r}, kind='image' or 'label')") from None


def declared(spec) -> Field:
    """A Field as given, or the built-in field of that name."""
    return spec if isinstance(spec, Field) else field(spec)


def field_name(spec) -> str:
    """The name of a field given as a Field or a name (checked as a Field would check it)."""
    return spec.name if isinstance(spec, Field) else Field(spec).name
