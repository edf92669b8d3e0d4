#!/usr/bin/env bash
# All GPU measuring in one device call (about 7 minutes on an H100/H200 machine, the two train rows
# included): YOLOv3-416, mini-batch 32.
#   synthetic ceiling (bf16, channels_last, data already on the GPU) -> $OUT/ceiling.json
#   PyTorch-YOLOv3 1.8.0's loop as shipped, own process + wheels  -> $OUT/pyyolo.json
#   turboyolo, --cache ram, CPU augmentation                      -> $OUT/ours-cpu.json
#   turboyolo, --cache ram, --augment-on device                   -> $OUT/ours-device.json
#   checkpoint stall                                               -> $OUT/checkpoint.json
#   `turboyolo train`, no loader flags (auto where the run chooses) -> $OUT/train-auto.json
#   `turboyolo train --cache ram --augment-on device` (hand-tuned) -> $OUT/train-tuned.json
#   channels_last / compile / folded inference copy (compute.py)   -> $OUT/compute.json (COMPUTE=0: skip)
# then prints the table ($OUT/table.md). Each JSON is written as soon as its section ends.
# Prepare first, here: bash bench/gpu_prepare.sh; then
#   run(command="bash bench/gpu.sh", carry=["bench/wheels", "bench/photos"], timeout_s=600)
# DRY_RUN=1: the same sequence on the CPU at a tiny size (64 px, a few seconds per section), to check
# the script without a GPU; PyTorch-YOLOv3 then runs from PYYOLO_PYTHON (default /tmp/pyyolo-venv).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-bench/out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}"
PY=${PY:-$( [ -x .venv/bin/python ] && [ "${DRY_RUN:-0}" = 1 ] && echo .venv/bin/python || echo python3)}
WORK=$(mktemp -d)
if [ "${DRY_RUN:-0}" = 1 ]; then
  SIZE=64; BATCH=4; SECONDS_RUN=4; WARMUP=1; COPIES=1; WORKERS=1; DEVICE=cpu; EPOCHS=2; TRAIN_TIMEOUT=900
  PYYOLO_PY=${PYYOLO_PYTHON:-/tmp/pyyolo-venv/bin/python}
else
  SIZE=416; BATCH=32; SECONDS_RUN=30; WARMUP=10; COPIES=54; WORKERS=15; DEVICE=cuda; EPOCHS=4; TRAIN_TIMEOUT=150
  PYYOLO_PY=python3
  nvidia-smi --query-gpu=name,memory.total,power.limit,clocks.max.sm --format=csv > "$OUT/env.txt" 2>&1
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/pyyolo-site \
    bench/wheels/*.whl > "$OUT/pyyolo-install.txt" 2>&1 || echo "wheel install failed (see pyyolo-install.txt)"
  # The image's OpenCV / SciPy may refuse numpy 1.26; then PyTorch-YOLOv3 runs on the image's numpy 2.
  if ! PYTHONPATH=/tmp/pyyolo-site python3 -c "import cv2, imgaug, pytorchyolo.train" >> "$OUT/pyyolo-install.txt" 2>&1; then
    rm -rf /tmp/pyyolo-site/numpy /tmp/pyyolo-site/numpy-* /tmp/pyyolo-site/numpy.libs
    echo "PyTorch-YOLOv3 env: numpy 1.26 refused by the image's packages; using the image's numpy" | tee -a "$OUT/env.txt"
  fi
fi
echo "python: $($PY -c 'import sys, torch; print(sys.version.split()[0], torch.__version__)')" | tee -a "$OUT/env.txt"
PHOTOS=${PHOTOS:-bench/photos}
[ -n "$(ls "$PHOTOS"/*.jpg 2>/dev/null)" ] || PHOTOS=/tmp/turboyolo-photos/usr/share/backgrounds
DATA=$($PY bench/gpu_bench.py data --photos "$PHOTOS" --root "$WORK/data" --copies "$COPIES" | tail -1)
$PY -m turboyolo cfg yolov3 --num-classes 1 --width "$SIZE" --height "$SIZE" --batch "$BATCH" \
  --subdivisions 1 -o "$WORK/yolov3.cfg" > /dev/null
COMMON=(--out "$OUT" --cfg "$WORK/yolov3.cfg" --data "$DATA" --img-size "$SIZE" --batch "$BATCH"
        --seconds "$SECONDS_RUN" --warmup "$WARMUP" --workers "$WORKERS" --device "$DEVICE")
$PY bench/gpu_bench.py ceiling "${COMMON[@]}"
ROOT=$PWD; OUTA=$(cd "$OUT" && pwd)
if [ "${DRY_RUN:-0}" = 1 ]; then PYYOLO=("$PYYOLO_PY"); else PYYOLO=(env PYTHONPATH=/tmp/pyyolo-site python3); fi
mkdir -p "$WORK/pyyolo"
(cd "$WORK/pyyolo" && timeout $(( SECONDS_RUN + WARMUP + 120 )) "${PYYOLO[@]}" "$ROOT/bench/pyyolo_loop.py" \
    "$OUTA/pyyolo.json" --seconds "$SECONDS_RUN" --warmup "$WARMUP" -- --model "$WORK/yolov3.cfg" \
    --data "$DATA" --n_cpu "$WORKERS" --epochs 1000 > "$OUTA/pyyolo.log" 2>&1) \
  || echo '{"error": "PyTorch-YOLOv3 run failed or timed out, see pyyolo.log"}' > "$OUTA/pyyolo.json"
$PY bench/gpu_bench.py ours-cpu "${COMMON[@]}"
$PY bench/gpu_bench.py ours-device "${COMMON[@]}"
$PY bench/gpu_bench.py checkpoint "${COMMON[@]}"
$PY bench/gpu_bench.py train-auto "${COMMON[@]}" --epochs "$EPOCHS" --train-timeout "$TRAIN_TIMEOUT"
$PY bench/gpu_bench.py train-tuned "${COMMON[@]}" --epochs "$EPOCHS" --train-timeout "$TRAIN_TIMEOUT"
# the compute section (bench/compute.py gpu): channels_last / torch.compile on the CUDA training step, the
# folded inference copy and channels_last for detection -> $OUT/compute.json (about 2 minutes)
if [ "${COMPUTE:-1}" = 1 ]; then
  timeout 240 $PY bench/compute.py gpu > "$OUT/compute.json" 2> "$OUT/compute.log" \
    || echo '{"error": "compute section failed or timed out, see compute.log"}' > "$OUT/compute.json"
fi
$PY bench/gpu_bench.py table --out "$OUT"
rm -rf "$WORK"
