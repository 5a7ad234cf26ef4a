"""Dataset converters (PNG/JPEG trees to sharded L3 datasets); installed as ``l3codec.converters``.

    from l3codec.converters import convert
    summary = convert("cityscapes", "/data/cityscapes", "/data/cityscapes-l3")
    print(summary)
"""

from .layouts import LayoutError
from .pipeline import ConvertError, Summary, convert

__all__ = ["convert", "Summary", "ConvertError", "LayoutError"]
