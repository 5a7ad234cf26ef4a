"""The fields of a converted dataset's samples, defined once for the converter (what to encode
and how to resize), the container (tar member suffixes, index columns) and the loader (how to
resample and present), as FFCV's Field classes are.

    image        the photograph: any channels and depth, the user's mode, resized bilinear
    labelIds     class ids per pixel      } label maps: stored compact (exact, about half their
    instanceIds  instance ids per pixel   } PNG), resized nearest so no new value appears,
    color        the labels' colour image } yielded as N×H×W (one channel) or N×C×H×W
"""

from __future__ import annotations

from dataclasses import dataclass

from .format import L3Error


@dataclass(frozen=True)
class Field:
    name: str  # the batch key and the index columns' prefix
    suffix: str  # the tar member after "<key>."
    kind: str  # "image" or "label"

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
    Field("image", "l3", "image"),
    Field("labelIds", "labelIds.l3", "label"),
    Field("instanceIds", "instanceIds.l3", "label"),
    Field("color", "color.l3", "label"),
)}  # in tar member order
CLASS_SUFFIX = "cls"  # the class index, as ASCII decimal
JSON_MEMBER = "json"  # per-sample JSON (e.g. polygons)


def field(name: str) -> Field:
    try:
        return IMAGE_FIELDS[name]
    except KeyError:
        raise L3Error(f"unknown field {name!r}; fields are {list(IMAGE_FIELDS)}") from None
