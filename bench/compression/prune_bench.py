"""Structured pruning, measured: file size, accuracy report and `kiln run --bench` latency of a
VGG-style CNN (no residuals, so every conv is prunable) in three forms:

  zeroed     half of every conv's filters all zero (weights and bias), as magnitude-pruned
             training leaves them; run as is, and with --allow_compression (the exact
             prune_zero_channels pass removes them at load)
  compacted  `kiln compress --prune_channels=0.5` of `zeroed`: the zero filters have the
             smallest L1 norm, so exactly they go (the report shows error 0)
  dense      the same network with no zero filters, and its lossy `kiln compress
             --prune_channels=0.5`

Each configuration runs ROUNDS times, interleaved, on the same machine in the same run; the
table gives the median p50 and the ratio to the `zeroed` fp32 run.

usage: /usr/bin/python3 bench/compression/prune_bench.py --kiln build/tools/kiln/kiln
       [--batches 1,16] [--rounds 3] [--seconds 2] [--isa avx2]
"""
import argparse
import json
import os
import statistics
import subprocess
import tempfile

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

CHANNELS = [64, 64, "pool", 128, 128, "pool", 256, 256]


def build(path, zero_fraction, seed=1):
    rng = np.random.default_rng(seed)
    inits, nodes = [], []
    prev, c_in = "x", 3
    for i, c in enumerate(CHANNELS):
        if c == "pool":
            nodes.append(helper.make_node("MaxPool", [prev], [f"p{i}"], kernel_shape=[2, 2],
                                          strides=[2, 2]))
            prev = f"p{i}"
            continue
        w = rng.normal(0, np.sqrt(2.0 / (c_in * 9)), (c, c_in, 3, 3)).astype(np.float32)
        b = rng.normal(0, 0.05, c).astype(np.float32)
        zero = rng.choice(c, int(zero_fraction * c), replace=False)
        w[zero] = 0
        b[zero] = 0
        inits += [numpy_helper.from_array(w, f"w{i}"), numpy_helper.from_array(b, f"b{i}")]
        nodes.append(helper.make_node("Conv", [prev, f"w{i}", f"b{i}"], [f"c{i}"],
                                      name=f"conv{i}", pads=[1, 1, 1, 1]))
        nodes.append(helper.make_node("Relu", [f"c{i}"], [f"r{i}"]))
        prev, c_in = f"r{i}", c
    inits.append(numpy_helper.from_array(
        rng.normal(0, 0.1, (c_in, 10)).astype(np.float32), "fc"))
    nodes += [helper.make_node("GlobalAveragePool", [prev], ["gap"]),
              helper.make_node("Flatten", ["gap"], ["flat"]),
              helper.make_node("Gemm", ["flat", "fc"], ["logits"], name="fc")]
    graph = helper.make_graph(
        nodes, "vgg_small", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, 64, 64])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", 10])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    onnx.checker.check_model(model)
    onnx.save(model, path)


def bench(kiln, model, batches, seconds, isa, extra):
    cmd = [kiln, "run", model, "--bench", "--json", "--random_inputs", "--batch", batches,
           "--seconds", str(seconds)] + extra
    if isa:
        cmd += ["--isa", isa]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    return {r["batch"]: r for r in (json.loads(l) for l in out.splitlines() if l.startswith("{"))}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kiln", required=True)
    ap.add_argument("--batches", default="1,16")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=2)
    ap.add_argument("--isa", default="")
    args = ap.parse_args()
    d = tempfile.mkdtemp(prefix="kiln_prune_bench_")
    zeroed, dense = os.path.join(d, "zeroed.onnx"), os.path.join(d, "dense.onnx")
    compacted, lossy = os.path.join(d, "compacted.onnx"), os.path.join(d, "dense_pruned.onnx")
    build(zeroed, 0.5)
    build(dense, 0.0)
    calib = os.path.join(d, "calib")
    os.makedirs(calib)
    np.save(os.path.join(calib, "x.npy"),
            np.random.default_rng(2).normal(0, 1, (64, 3, 64, 64)).astype(np.float32))
    for src, dst in ((zeroed, compacted), (dense, lossy)):
        p = subprocess.run([args.kiln, "compress", src, "--prune_channels=0.5",
                            "--calibration_inputs", calib, "--output", dst],
                           capture_output=True, text=True, check=True)
        print(f"$ kiln compress {os.path.basename(src)} --prune_channels=0.5 ...\n{p.stdout}")
    configs = [("zeroed fp32", zeroed, []),
               ("zeroed --allow_compression", zeroed, ["--allow_compression"]),
               ("compacted fp32", compacted, []),
               ("dense fp32", dense, []),
               ("dense pruned 50% fp32", lossy, [])]
    results = {name: {} for name, _, _ in configs}
    for _ in range(args.rounds):
        for name, model, extra in configs:
            for batch, r in bench(args.kiln, model, args.batches, args.seconds, args.isa,
                                  extra).items():
                results[name].setdefault(batch, []).append(r["p50_ms"])
                isa = r.get("isa", "?")
    print(f"isa {isa}, load {os.getloadavg()}, median of {args.rounds} interleaved rounds")
    batches = sorted(next(iter(results.values())).keys())
    print("| model | size (bytes) | " + " | ".join(f"p50 batch {b} (ms) | vs zeroed" for b in batches) + " |")
    sizes = {zeroed: os.path.getsize(zeroed), compacted: os.path.getsize(compacted),
             dense: os.path.getsize(dense), lossy: os.path.getsize(lossy)}
    for name, model, _ in configs:
        cells = []
        for b in batches:
            p50 = statistics.median(results[name][b])
            base = statistics.median(results["zeroed fp32"][b])
            cells.append(f"{p50:.2f} | {base / p50:.2f}x")
        print(f"| {name} | {sizes[model]} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
