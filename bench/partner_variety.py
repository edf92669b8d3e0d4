"""How varied the mosaic partners are with the partner pools and with independent draws (no images read).

The sampler's keys and the loader's own partner draws (:func:`turboyolo.data.augment.mosaic_partners`)
for a data set of N images at batch 8, mosaic 1.0, over the mosaic epochs of a ~250-iteration run.
Per batch: distinct images among its 4 x 8 mosaic tiles, and the share of tiles that repeat an image
already in the batch; per epoch: distinct images drawn as partners; over the run: distinct
(sample, partner) pairs.

Usage::

    .venv/bin/python bench/partner_variety.py [--sizes 37 200 205 5000] [--pool-batches N]
"""

from __future__ import annotations

import argparse

import numpy as np

from turboyolo.data.augment import mosaic_partners
from turboyolo.data.sampler import MultiScaleBatchSampler, default_pool_batches

BATCH = 8
ITERATIONS = 250
MOSAIC_SHARE = 0.8  # the defaults: no mosaic in the last 20% of the epochs


def variety(count: int, pool_batches: int, seed: int = 0) -> dict[str, float]:
    sampler = MultiScaleBatchSampler(count, BATCH, 416, shuffle=True, seed=seed)
    sampler.pool_batches = pool_batches
    epochs = max(1, round(MOSAIC_SHARE * ITERATIONS / len(sampler)))
    distinct, repeated, tiles, partners_per_epoch, pairs = [], 0, 0, [], set()
    for epoch in range(epochs):
        sampler.set_epoch(epoch)
        drawn = set()
        for batch in sampler:
            images = []
            for key in batch:
                index, pool = key[0], (key[4] if len(key) > 4 else None)
                partners = mosaic_partners(seed, epoch, index, count, 1.0, 0, pool)
                images += [index, *partners]
                drawn.update(partners)
                pairs.update((index, other) for other in partners)
            distinct.append(len(set(images)))
            tiles += len(images)
            repeated += len(images) - len(set(images))
        partners_per_epoch.append(len(drawn))
    return {"epochs": epochs, "distinct_per_batch": float(np.mean(distinct)), "repeated": repeated / tiles,
            "partners_per_epoch": float(np.mean(partners_per_epoch)), "pairs": len(pairs)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[37, 200, 205, 5000])
    parser.add_argument("--pool-batches", type=int, default=None, help="default: the loader's own")
    args = parser.parse_args()
    pooled = default_pool_batches(BATCH) if args.pool_batches is None else args.pool_batches
    print("| images | partners from | mosaic epochs | distinct images per batch (of 32 tiles) "
          "| tiles repeating "
          "an image of their batch | distinct partners per epoch | distinct (sample, partner) pairs |")
    print("|---|---|---|---|---|---|---|")
    for count in args.sizes:
        for name, pool_batches in ((f"pools of {pooled} batches", pooled), ("the whole set", 0)):
            row = variety(count, pool_batches)
            print(f"| {count} | {name} | {row['epochs']} | {row['distinct_per_batch']:.1f} | "
                  f"{100 * row['repeated']:.1f}% | {row['partners_per_epoch']:.0f} | {row['pairs']} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
