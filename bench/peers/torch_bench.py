#!/usr/bin/python3
"""Times a runtime benchmark model on PyTorch (eager, torch.inference_mode) the way
`kiln run --bench` times it: latency p50/p90/p99 and items/s per batch size, one JSON object
per batch size.

usage: /usr/bin/python3 bench/peers/torch_bench.py MODEL [--batch 1,32] [--threads 2]
MODEL is a name from export_runtime_models.py (resnet18, mobilenet_v2, bert4, dlrm) or a path
to its exported .onnx (the name is taken from the file name): the module is rebuilt with the
same seed, so its weights are the exported ones.
"""
import argparse
import json
import os
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from export_runtime_models import MODELS, build_seeded  # noqa: E402


def batched(example, batch):
    """Inputs of the example's kind at `batch` rows: floats in [-1, 1), integers in [0, 10)."""
    gen = torch.Generator().manual_seed(0)
    out = []
    for t in example:
        shape = (batch,) + tuple(t.shape[1:])
        if t.dtype.is_floating_point:
            out.append(torch.rand(shape, generator=gen) * 2 - 1)
        else:
            out.append(torch.randint(0, 10, shape, generator=gen, dtype=t.dtype))
    return tuple(out)


def percentile(sorted_ms, p):
    rank = p / 100 * (len(sorted_ms) - 1)
    lo = int(rank)
    hi = min(lo + 1, len(sorted_ms) - 1)
    return sorted_ms[lo] + (sorted_ms[hi] - sorted_ms[lo]) * (rank - lo)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model")
    parser.add_argument("--batch", default="1")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--seconds", type=float, default=2.0)
    parser.add_argument("--min_runs", type=int, default=10,
                        help="timed runs at least, even past --seconds")
    args = parser.parse_args()
    name = os.path.splitext(os.path.basename(args.model))[0]
    if name not in MODELS:
        parser.error(f"unknown model {name!r} (one of {', '.join(MODELS)})")
    torch.set_num_threads(args.threads)
    torch.set_num_interop_threads(1)
    model, example, _, _ = build_seeded(name)
    with torch.inference_mode():
        for batch in [int(b) for b in args.batch.split(",")]:
            inputs = batched(example, batch)
            for _ in range(3):
                model(*inputs)
            ms = []
            start = time.perf_counter()
            end = start + args.seconds
            while True:
                t0 = time.perf_counter()
                if len(ms) >= args.min_runs and t0 >= end:
                    break
                model(*inputs)
                ms.append((time.perf_counter() - t0) * 1e3)
            total = time.perf_counter() - start
            s = sorted(ms)
            print(json.dumps({
                "batch": batch, "p50_ms": round(percentile(s, 50), 4),
                "p90_ms": round(percentile(s, 90), 4), "p99_ms": round(percentile(s, 99), 4),
                "items_per_s": round(batch * len(ms) / total, 2), "runs": len(ms)}), flush=True)


if __name__ == "__main__":
    sys.exit(main())
