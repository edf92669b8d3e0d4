"""turboyolo: Darknet-compatible YOLOv3 that keeps the GPU busy."""

__version__ = "0.1.0"
