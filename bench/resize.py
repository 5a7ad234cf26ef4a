"""The loader's resize under RandomResizedCrop(512) on 2048x1024 frames, per frame, one thread:
the dense resampling matrices it replaced, torch's antialiased filter in float32 (the GPU path
and normalised images), and its uint8 kernel (CPU path, uint8 output).

    python bench/resize.py
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from l3codec import resize  # noqa: E402


def dense_matrices(canvas, regions, size):
    """The previous method: an (out, canvas) weight matrix per axis, two batched matrix products."""
    out_h, out_w = size
    n, h, w, c = canvas.shape

    def weights(lengths, out_length, canvas_length):
        scale = lengths.float()[:, None, None] / out_length
        support = torch.clamp(scale, min=1.0)
        centres = (torch.arange(out_length).float()[None, :, None] + 0.5) * scale
        source = torch.arange(canvas_length).float()[None, None, :] + 0.5
        matrix = torch.clamp(1 - torch.abs(source - centres) / support, min=0) * (source < lengths[:, None, None] + 0.5)
        return matrix / matrix.sum(2, keepdim=True)

    rows, cols = weights(regions[:, 0], out_h, h), weights(regions[:, 1], out_w, w)
    pixels = canvas.float()
    across = torch.bmm(cols, pixels.permute(0, 2, 1, 3).reshape(n, w, h * c))
    across = across.reshape(n, out_w, h, c).permute(0, 2, 1, 3).reshape(n, h, out_w * c)
    return torch.bmm(rows, across).reshape(n, out_h, out_w, c)


def per_frame_ms(function, repeat=3) -> float:
    function()
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        function()
        best = min(best, time.perf_counter() - start)
    return 1e3 * best / N


N = 4
if __name__ == "__main__":
    torch.set_num_threads(1)
    canvas = torch.randint(0, 256, (N, 1024, 2048, 3), dtype=torch.uint8, generator=torch.Generator().manual_seed(0))
    regions = torch.tensor([[1024, 2048], [700, 1500], [512, 900], [1000, 1000]])  # crops RandomResizedCrop draws
    rows = [("dense resampling matrices", lambda: dense_matrices(canvas, regions, (512, 512))),
            ("torch antialiased filter, float32", lambda: resize.bilinear(canvas, regions, (512, 512))),
            ("torch antialiased filter, uint8", lambda: resize.bilinear(canvas, regions, (512, 512), rounded=True))]
    print("| resize to 512x512, one thread | ms per frame |\n|---|---|")
    for name, function in rows:
        print(f"| {name} | {per_frame_ms(function):.1f} |")
