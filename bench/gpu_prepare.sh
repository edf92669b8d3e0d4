#!/usr/bin/env bash
# Run HERE (with internet) before bench/gpu.sh: fills two ignored folders that the device call carries.
#   bench/wheels/  PyTorch-YOLOv3 1.8.0's own environment for Python 3.12 (numpy 1.26, imgaug 0.4.0, ...)
#   bench/photos/  the large real photos (Debian lomiri-wallpapers-16.04 / -20.04 JPEGs, 27 MB)
# Then: run(command="bash bench/gpu.sh", carry=["bench/wheels", "bench/photos"], timeout_s=420)
# Both folders are in .gitignore; together with the tree they stay under the 64 MiB transfer limit.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-python3}
mkdir -p bench/wheels bench/photos
# opencv, scipy, scikit-image, matplotlib, imageio, pillow, tqdm, tensorboard, torch are on the device
# machine already (KINDS.md); these are what PyTorch-YOLOv3 1.8.0 needs on top, for cp312 x86-64.
"$PY" -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
  -d bench/wheels numpy==1.26.4 imgaug==0.4.0 shapely==2.0.6 pytorchyolo==1.8.0 terminaltables==3.1.10 \
  torchsummary==1.5.1
if [ -z "$(ls bench/photos/*.jpg 2>/dev/null)" ]; then
  tmp=$(mktemp -d)
  (cd "$tmp" && apt-get download lomiri-wallpapers-16.04 lomiri-wallpapers-20.04 >/dev/null \
    && for deb in *.deb; do dpkg-deb -x "$deb" .; done)
  cp "$tmp"/usr/share/backgrounds/*.jpg bench/photos/
  rm -rf "$tmp"
fi
du -sh bench/wheels bench/photos
