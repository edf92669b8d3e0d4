"""COCO's category ids and names: what an 80-class Darknet model's class indices mean in COCO."""

from __future__ import annotations

from importlib import resources

# Darknet's table: the 80 class indices -> COCO's 91 category ids.
COCO91_IDS = (
    1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 13, 14, 15, 16, 17, 18, 19, 20, 21,
    22, 23, 24, 25, 27, 28, 31, 32, 33, 34, 35, 36, 37, 38, 39, 40, 41, 42, 43, 44,
    46, 47, 48, 49, 50, 51, 52, 53, 54, 55, 56, 57, 58, 59, 60, 61, 62, 63, 64, 65,
    67, 70, 72, 73, 74, 75, 76, 77, 78, 79, 80, 81, 82, 84, 85, 86, 87, 88, 89, 90,
)


def coco_names() -> list[str]:
    """The 80 COCO class names in Darknet's order."""
    return resources.files("turboyolo").joinpath("resources/coco.names").read_text().split("\n")[:80]
