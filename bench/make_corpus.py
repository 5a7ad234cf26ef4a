"""Generated benchmark images that anyone can rebuild: flat graphics and label maps.

    python bench/make_corpus.py /tmp/l3-corpus        # writes flat/, screens/, documents/ and labels/

flat/: rendered user interfaces (windows, buttons, text), bar and line charts, box-and-arrow
diagrams and pages of text, 8-bit RGB, antialiased as screenshots are. screens/: text in several
colours (a code editor's syntax colours, a chat's coloured names). documents/: pages of text in
8-bit grey, as rendered documents are stored. labels/: region maps as
segmentation datasets store them: 8-bit class ids (a few dozen classes, smooth boundaries) and
16-bit instance ids (class * 1000 + instance). Files are written by Pillow with its default PNG
settings, as a user's files would be; the same seed gives the same files.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw, ImageFont

PALETTE = [(236, 239, 244), (46, 52, 64), (94, 129, 172), (191, 97, 106), (163, 190, 140), (235, 203, 139),
           (180, 142, 173), (255, 255, 255), (216, 222, 233), (76, 86, 106)]


def font(size: int):
    try:
        return ImageFont.load_default(size=size)
    except TypeError:  # Pillow < 10.1: one size
        return ImageFont.load_default()


def words(rng, count: int) -> str:
    syllables = ["ka", "lo", "mi", "ter", "on", "sa", "vi", "de", "ru", "pex", "al", "no"]
    return " ".join("".join(rng.choice(syllables, rng.integers(1, 4))) for _ in range(count))


def user_interface(rng, size=(1280, 800)) -> Image.Image:
    image = Image.new("RGB", size, PALETTE[0])
    draw = ImageDraw.Draw(image)
    draw.rectangle((0, 0, size[0], 36), fill=PALETTE[1])
    draw.text((12, 8), words(rng, 3), fill=PALETTE[7], font=font(16))
    draw.rectangle((0, 36, 220, size[1]), fill=PALETTE[8])
    for row in range(14):
        draw.text((16, 52 + 28 * row), words(rng, 2), fill=PALETTE[1], font=font(14))
    for panel in range(int(rng.integers(2, 5))):
        x0, y0 = int(rng.integers(240, 700)), int(rng.integers(60, 450))
        x1, y1 = x0 + int(rng.integers(250, 520)), y0 + int(rng.integers(150, 330))
        draw.rounded_rectangle((x0 + 4, y0 + 4, x1 + 4, y1 + 4), 8, fill=(200, 204, 212))
        draw.rounded_rectangle((x0, y0, x1, y1), 8, fill=PALETTE[7], outline=PALETTE[9])
        for line in range(int((y1 - y0 - 60) // 22)):
            draw.text((x0 + 14, y0 + 14 + 22 * line), words(rng, 5), fill=PALETTE[1], font=font(13))
        colour = PALETTE[int(rng.integers(2, 7))]
        draw.rounded_rectangle((x1 - 110, y1 - 42, x1 - 14, y1 - 12), 6, fill=colour)
        draw.text((x1 - 96, y1 - 36), "OK", fill=PALETTE[7], font=font(14))
    return image


def chart(rng, size=(1200, 800)) -> Image.Image:
    image = Image.new("RGB", size, PALETTE[7])
    draw = ImageDraw.Draw(image)
    left, bottom, top, right = 90, size[1] - 80, 60, size[0] - 40
    for tick in range(6):
        y = bottom - tick * (bottom - top) // 5
        draw.line((left, y, right, y), fill=PALETTE[8])
        draw.text((20, y - 8), f"{tick * 20}", fill=PALETTE[1], font=font(14))
    if rng.random() < 0.5:
        bars = int(rng.integers(6, 14))
        width = (right - left) // bars
        for bar in range(bars):
            height = int(rng.integers(20, bottom - top))
            draw.rectangle((left + bar * width + 8, bottom - height, left + (bar + 1) * width - 8, bottom),
                           fill=PALETTE[2 + bar % 5])
    else:
        for series in range(3):
            values = np.cumsum(rng.normal(0, 25, 40)) + (bottom + top) / 2
            points = [(left + i * (right - left) / 39, float(np.clip(v, top, bottom))) for i, v in enumerate(values)]
            draw.line(points, fill=PALETTE[2 + series], width=3)
    draw.line((left, top, left, bottom, right, bottom), fill=PALETTE[1], width=2)
    draw.text((left, 20), words(rng, 4), fill=PALETTE[1], font=font(20))
    return image


def diagram(rng, size=(1400, 900)) -> Image.Image:
    image = Image.new("RGB", size, PALETTE[7])
    draw = ImageDraw.Draw(image)
    boxes = []
    for _ in range(int(rng.integers(6, 11))):
        x, y = int(rng.integers(40, size[0] - 260)), int(rng.integers(40, size[1] - 120))
        boxes.append((x, y, x + 200, y + 70))
    for a, b in zip(boxes, boxes[1:]):
        draw.line(((a[0] + a[2]) // 2, (a[1] + a[3]) // 2, (b[0] + b[2]) // 2, (b[1] + b[3]) // 2),
                  fill=PALETTE[9], width=2)
    for i, box in enumerate(boxes):
        draw.rounded_rectangle(box, 10, fill=PALETTE[2 + i % 5], outline=PALETTE[1], width=2)
        draw.text((box[0] + 14, box[1] + 24), words(rng, 2), fill=PALETTE[1], font=font(16))
    return image


def text_page(rng, size=(1000, 1300), mode="RGB") -> Image.Image:
    image = Image.new("L", size, 255)
    draw = ImageDraw.Draw(image)
    draw.text((70, 60), words(rng, 5), fill=0, font=font(28))
    for line in range(52):
        draw.text((70, 120 + 22 * line), words(rng, 11), fill=20, font=font(15))
    return image.convert(mode)


def code_editor(rng, size=(1280, 800)) -> Image.Image:
    image = Image.new("RGB", size, (40, 44, 52))
    draw = ImageDraw.Draw(image)
    syntax = [(198, 120, 221), (152, 195, 121), (229, 192, 123), (97, 175, 239), (224, 108, 117), (171, 178, 191)]
    draw.rectangle((0, 0, 48, size[1]), fill=(33, 37, 43))
    for line in range(size[1] // 20):
        draw.text((8, 4 + 20 * line), f"{line + 1:3d}", fill=(99, 109, 131), font=font(13))
        x = 60 + 28 * int(rng.integers(0, 5))  # indentation
        for _ in range(int(rng.integers(0, 8))):
            token = words(rng, 1)
            draw.text((x, 4 + 20 * line), token, fill=syntax[int(rng.integers(0, len(syntax)))], font=font(14))
            x += int(draw.textlength(token + " ", font=font(14)))
    return image


def chat(rng, size=(1000, 900)) -> Image.Image:
    image = Image.new("RGB", size, PALETTE[7])
    draw = ImageDraw.Draw(image)
    names = [(words(rng, 1), PALETTE[2 + i % 5]) for i in range(6)]
    for line in range(size[1] // 24):
        name, colour = names[int(rng.integers(0, len(names)))]
        draw.text((20, 6 + 24 * line), name, fill=colour, font=font(15))
        draw.text((150, 6 + 24 * line), words(rng, 8), fill=PALETTE[1], font=font(15))
    return image


def label_maps(rng, size=(1024, 2048)) -> tuple:
    """(8-bit class ids, 16-bit instance ids): smooth regions from low-frequency noise."""
    height, width = size
    coarse = rng.normal(size=(height // 64 + 2, width // 64 + 2, 3))
    field = np.asarray(Image.fromarray(coarse[..., 0].astype(np.float32)).resize((width, height), Image.BICUBIC))
    classes = np.clip((field - field.min()) / (np.ptp(field) + 1e-9) * 33, 0, 33).astype(np.uint8)
    cells = np.asarray(Image.fromarray(rng.integers(0, 40, coarse.shape[:2]).astype(np.uint8))
                       .resize((width, height), Image.NEAREST)).astype(np.uint16)
    instances = classes.astype(np.uint16) * 1000 + np.where(classes >= 24, cells, 0)  # "things" have instances
    return classes, instances


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    rng = np.random.default_rng(args.seed)
    flat, screens, documents, labels = (args.out / name for name in ("flat", "screens", "documents", "labels"))
    for folder in (flat, screens, documents, labels):
        folder.mkdir(parents=True, exist_ok=True)
    for n in range(3):
        user_interface(rng).save(flat / f"ui_{n}.png")
        chart(rng).save(flat / f"chart_{n}.png")
        diagram(rng).save(flat / f"diagram_{n}.png")
    for n in range(2):
        text_page(rng).save(flat / f"text_{n}.png")
    for n in range(4):
        classes, instances = label_maps(rng)
        Image.fromarray(classes).save(labels / f"map_{n}_labelIds.png")
        Image.fromarray(instances).save(labels / f"map_{n}_instanceIds.png")
    for n in range(3):  # after the others: their files stay as they were
        code_editor(rng).save(screens / f"editor_{n}.png")
        chat(rng).save(screens / f"chat_{n}.png")
    for n in range(3):
        text_page(rng, mode="L").save(documents / f"page_{n}.png")
    print(f"wrote {len(list(flat.iterdir()))} flat graphics, {len(list(screens.iterdir()))} screens of coloured text, "
          f"{len(list(documents.iterdir()))} grey documents and {len(list(labels.iterdir()))} label maps under {args.out}")


if __name__ == "__main__":
    main()
