#!/bin/bash
# The seed table of the mosaic partner pools (docs/PERFORMANCE.md): the 250-iteration defaults with the
# pools (variant "pools") and with independent partner draws ("independent", --partner-pool 0), one
# run at a time, niced; a (data, variant, seed) already in the CSV is skipped, so it resumes.
# The loader flags are pinned to what `auto` picks on the 2-core development VM (no accelerator), so a
# timing-dependent choice cannot differ between runs (none of them changes the batches).
#
# Usage: bench/partner_pools_250.sh [CSV]   (ORDER="bccd:0 shapes:0 ..." to choose the runs)
set -u
cd "$(dirname "$0")/.."
CSV=${1:-bench/results/partner_pools_250.csv}
ORDER=${ORDER:-"bccd:0 shapes:0 trees:0 bccd:1 shapes:1 trees:1 bccd:2 shapes:2 trees:2"}
PYTHON=${PYTHON:-.venv/bin/python}
export PYTHONPATH=$PWD/src:$PWD/bench
for item in $ORDER; do
  data=${item%:*}
  seed=${item#*:}
  for variant in pools independent; do
    if [ -f "$CSV" ] && grep -q ",$data,yolov3-tiny,$variant,$seed," "$CSV"; then
      continue
    fi
    extra=()
    [ "$variant" = independent ] && extra=(--partner-pool 0)
    nice -n 10 "$PYTHON" bench/defaults_250.py --data "$data" --variant "$variant" --seed "$seed" \
      --set workers=1 --set cache=none --set augment_on=cpu "${extra[@]}" --csv "$CSV" || exit 1
  done
done
