"""Read the data points off the scaling-book's v5e AllGather bandwidth figure.

The figure is ``assets/img/all-gather-bandwidth.png`` of github.com/jax-ml/scaling-book
(shown in the "Sharded Matrices" chapter, https://jax-ml.github.io/scaling-book/sharding/,
caption: "empirical bandwidth and estimated link bandwidth for TPU v5e during an
AllGather"). We do not ship the image; pass its path:

    python validation/digitize_scaling_book_figure.py all-gather-bandwidth.png

Method (deterministic, no hand clicking):

1. The grey (191,191,191) grid lines give the axes: horizontal lines at
   0, 2e10, ..., 8e10 B/s; vertical lines at the decades 1e4 ... 1e9 bytes (log x).
   A least-squares line through the grid-line pixel positions maps pixels to data.
2. Markers are the orange (239,134,54) "BW (bytes / runtime)" circles: pixels
   within 40 of that colour, eroded by a 9x9 square (which removes the 3-px
   connecting lines), labelled into blobs; the blob centroid is the point.
   The legend's sample marker (inside the legend box, lower right) is dropped.
3. Each point's x reading lies within 2% of a power of two (2^13 ... 2^32);
   we take that power of two as the array size. Runtime = size / bandwidth.
4. Uncertainty ("reading" spread): +-1.5 px of the marker centre in y
   (~2.0e8 B/s at 74 px per 1e10 B/s) as a fraction of the reading, plus 2%
   for the size snap, times the runtime.

Prints one CSV fragment per point: size_bytes, bandwidth, runtime_s, spread_s.
"""

from __future__ import annotations

import math
import sys

import matplotlib.image as mpimg
import numpy as np
from scipy import ndimage  # type: ignore[import-untyped]

__all__ = ["digitize"]

_GRID = (191, 191, 191)
_ORANGE = (239, 134, 54)
_LEGEND_BOX_PX = (700, 560)  # x >= 700 and y >= 560: the legend (lower right)
_Y_READ_PX = 1.5
_SIZE_SNAP_FRACTION = 0.02


def _grid_lines(mask: np.ndarray, axis: int, min_len: int) -> list[float]:
    counts = mask.sum(axis=axis)
    idx = np.where(counts > min_len)[0]
    lines: list[list[int]] = []
    for i in idx.tolist():
        if lines and i - lines[-1][-1] <= 1:
            lines[-1].append(i)
        else:
            lines.append([i])
    return [float(np.mean(g)) for g in lines]


def digitize(path: str) -> list[tuple[int, float, float, float]]:
    """(size_bytes, bandwidth_bytes_per_s, runtime_s, spread_s) per marker, by size."""
    rgb = (mpimg.imread(path)[..., :3] * 255).round().astype(int)
    grid = np.all(rgb == np.array(_GRID), axis=2)
    rows = _grid_lines(grid, axis=1, min_len=400)  # horizontal lines: y pixel
    cols = _grid_lines(grid, axis=0, min_len=300)  # vertical lines: x pixel
    if len(rows) != 5 or len(cols) != 6:
        raise SystemExit(f"unexpected grid: rows {rows}, cols {cols}")
    # Rows from the bottom: 0, 2e10, 4e10, 6e10, 8e10; cols: 1e4 .. 1e9.
    ky = np.polyfit(sorted(rows, reverse=True), [0.0, 2e10, 4e10, 6e10, 8e10], 1)
    kx = np.polyfit(sorted(cols), [4.0, 5.0, 6.0, 7.0, 8.0, 9.0], 1)
    orange = np.all(np.abs(rgb - np.array(_ORANGE)) <= 40, axis=2)
    blobs = ndimage.binary_erosion(orange, structure=np.ones((9, 9)))
    labels, count = ndimage.label(blobs)
    out: list[tuple[int, float, float, float]] = []
    for i in range(1, count + 1):
        ys, xs = np.where(labels == i)
        x, y = float(xs.mean()), float(ys.mean())
        if x >= _LEGEND_BOX_PX[0] and y >= _LEGEND_BOX_PX[1]:
            continue
        size_read = 10 ** float(np.polyval(kx, x))
        size = 2 ** round(math.log2(size_read))
        if abs(size_read / size - 1) > _SIZE_SNAP_FRACTION:
            raise SystemExit(f"point at x={x:.1f} reads {size_read:.4g} B, not near 2^k")
        bandwidth = float(np.polyval(ky, y))
        runtime = size / bandwidth
        d_bw = _Y_READ_PX * abs(float(ky[0]))
        spread = runtime * (d_bw / bandwidth + _SIZE_SNAP_FRACTION)
        out.append((size, bandwidth, runtime, spread))
    return sorted(out)


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(__doc__)
        return 2
    for size, bandwidth, runtime, spread in digitize(argv[1]):
        print(f"{size},{bandwidth:.4g},{runtime:.4g},{spread:.2g}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
