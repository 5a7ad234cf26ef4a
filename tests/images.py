"""Small synthetic test images: deterministic, made here, no files needed."""

import numpy as np

KINDS = ("noise", "gradient", "constant", "labels", "extremes", "smooth_noise", "flat_graphics", "text", "coloured_text")


def make_image(kind: str, height: int, width: int, channels: int, dtype, seed: int = 0) -> np.ndarray:
    """An HWC image (HW when channels == 1) of the given kind."""
    rng = np.random.default_rng(seed)
    top = np.iinfo(dtype).max
    shape = (height, width, channels)
    if kind == "noise":
        image = rng.integers(0, top, shape, endpoint=True)
    elif kind == "gradient":
        yy, xx = np.mgrid[0:height, 0:width]
        base = (yy * 7 + xx * 3)[:, :, None] * (np.arange(channels) + 1)
        image = base % (top + 1)
    elif kind == "constant":
        image = np.full(shape, rng.integers(0, top, endpoint=True))
    elif kind == "labels":
        # blocky regions of a few ids, like a segmentation map
        ids = rng.integers(0, top, 6, endpoint=True)
        cells = rng.integers(0, 6, (height // 5 + 1, width // 7 + 1, channels))
        image = ids[np.repeat(np.repeat(cells, 5, axis=0), 7, axis=1)[:height, :width]]
    elif kind == "extremes":
        image = rng.choice(np.array([0, 1, top - 1, top]), shape)
    elif kind == "flat_graphics":
        # whole pixels of a few colours in rectangles, with blended (antialiased) pixels along their
        # edges: tiles the encoder codes as palettes
        colours = rng.integers(0, top, (5, channels), endpoint=True)
        cells = rng.integers(0, 5, (height // 6 + 1, width // 9 + 1))
        image = colours[np.repeat(np.repeat(cells, 6, axis=0), 9, axis=1)[:height, :width]]
        edges = np.zeros((height, width), bool)
        edges[:, 1:] = np.any(image[:, 1:] != image[:, :-1], axis=2)
        image[edges] = (image[edges] + np.roll(image, 1, axis=1)[edges]) // 2
    elif kind == "text":
        # lines of four antialiased 6x9 glyphs in random order on a light background: the same
        # glyph, sample for sample, all over the tile (what LZ streams are for)
        glyphs = rng.integers(0, 4, (4, 9, 6)) * (top // 3)
        image = np.full((height, width, channels), top - top // 10)
        for y in range(1, height - 9, 11):
            for x in range(2, width - 6, 7):
                image[y:y + 9, x:x + 6] = np.minimum(image[y:y + 9, x:x + 6], glyphs[rng.integers(0, 4)][:, :, None])
    elif kind == "coloured_text":
        # the same antialiased glyphs, each in one of twelve colours: a glyph's pixels repeat whole,
        # while each plane alone sees it in twelve shades, and a tile holds too many colours for a
        # palette (what pixel LZ streams are for)
        coverage = rng.integers(0, 32, (4, 9, 6, 1)) * (rng.random((4, 9, 6, 1)) < 0.4)  # mostly background
        colours = rng.integers(0, top // 2, (12, channels), endpoint=True)
        background = top - top // 10
        image = np.full((height, width, channels), background)
        for y in range(1, height - 9, 11):
            for x in range(2, width - 6, 7):
                colour = colours[rng.integers(0, 12)]
                image[y:y + 9, x:x + 6] = background + (colour - background) * coverage[rng.integers(0, 4)] // 31
    elif kind == "colour_wheel":  # hue by angle, brightness by radius: R, G, B each ramp their own way
        yy, xx = np.mgrid[0:height, 0:width]
        yy, xx = yy - (height - 1) / 2, xx - (width - 1) / 2
        angle = np.arctan2(yy, xx)
        radius = np.minimum(np.hypot(yy, xx) / (min(height, width) / 2), 1)
        colours = [np.round(top * radius * (1 + np.cos(angle - 2 * np.pi * c / 3)) / 2) for c in range(min(channels, 3))]
        image = np.stack(colours + [np.round(top * radius)] * (channels - 3), -1)  # alpha: the radius
    elif kind == "smooth_noise":
        yy, xx = np.mgrid[0:height, 0:width]
        base = (np.sin(yy / 5.0) + np.cos(xx / 7.0) + 2) * top / 4.5
        image = base[:, :, None] + rng.normal(0, top / 100.0, shape)
        image = np.clip(image, 0, top)
    else:
        raise ValueError(kind)
    image = image.astype(dtype)
    return image[:, :, 0] if channels == 1 else image
