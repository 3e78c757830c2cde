#!/usr/bin/python3
"""Speed of Kiln's compression against Kiln fp32, same run, interleaved (issue 10 targets).

For each model, ISA and batch size, runs `kiln run --bench` in fp32, int8
(--allow_compression) and bf16 (--mixed_precision bfloat16), interleaved over --rounds rounds
so that load from other processes hits every mode alike, and prints the median items/s per
mode and the ratio to fp32. Also prints the accuracy report of the load (max relative error of
each output vs fp32 on the calibration inputs, made here: random inputs of the model's
shapes; BERT token ids in [0, 30522)).

Usage: /usr/bin/python3 bench/compression/compression_speed.py MODEL_DIR
         [--kiln build/tools/kiln/kiln] [--models bert4,mlp] [--isas avx512,avx2]
         [--batches 1,32] [--seconds 3] [--rounds 2] [--threads N]
MODEL_DIR holds the models of bench/peers/export_runtime_models.py (bert4.onnx, mlp.onnx, ...).
Say the machine's load (uptime) with any figure you quote.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys

import numpy as np

MODES = {
    "fp32": [],
    "int8": ["--allow_compression"],
    "bf16": ["--mixed_precision", "bfloat16"],
}

# Calibration inputs per model: name -> {input: array}
def calibration(model, n=64, seed=0):
    rng = np.random.default_rng(seed)
    if model == "bert4":
        return {"input_ids": rng.integers(0, 30522, (n, 128), dtype=np.int64),
                "attention_mask": np.ones((n, 128), dtype=np.int64)}
    if model == "mlp":
        return {"x": rng.standard_normal((n, 1024), dtype=np.float32)}
    if model in ("resnet18", "mobilenet_v2"):
        return {"input": rng.standard_normal((n, 3, 224, 224), dtype=np.float32)}
    return None


def bench(kiln, path, mode, isa, batch, seconds, threads, calib_dir):
    cmd = [kiln, "run", path, "--bench", "--json", "--random_inputs", "--batch", str(batch),
           "--seconds", str(seconds), "--isa", isa] + MODES[mode]
    if threads:
        cmd += ["--threads", str(threads)]
    if mode != "fp32" and calib_dir:
        cmd += ["--calibration_inputs", calib_dir]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        sys.exit(f"failed: {' '.join(cmd)}\n{proc.stderr}")
    line = [l for l in proc.stdout.splitlines() if l.startswith("{")][-1]
    return json.loads(line), proc.stderr


def main():
    p = argparse.ArgumentParser()
    p.add_argument("model_dir")
    p.add_argument("--kiln", default="build/tools/kiln/kiln")
    p.add_argument("--models", default="bert4,mlp")
    p.add_argument("--isas", default="avx512,avx2")
    p.add_argument("--batches", default="1,32")
    p.add_argument("--seconds", default="3")
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--threads", type=int, default=0)
    p.add_argument("--modes", default="fp32,int8,bf16")
    p.add_argument("--workdir", default="/tmp/kiln_compression_bench")
    args = p.parse_args()
    print("load:", open("/proc/loadavg").read().strip())
    modes = args.modes.split(",")
    for model in args.models.split(","):
        path = os.path.join(args.model_dir, model + ".onnx")
        calib = calibration(model)
        calib_dir = ""
        if calib is not None:
            calib_dir = os.path.join(args.workdir, model)
            os.makedirs(calib_dir, exist_ok=True)
            for name, arr in calib.items():
                np.save(os.path.join(calib_dir, name + ".npy"), arr)
        for isa in args.isas.split(","):
            for batch in [int(b) for b in args.batches.split(",")]:
                rates = {m: [] for m in modes}
                reports = {}
                for _ in range(args.rounds):
                    for mode in modes:
                        result, log = bench(args.kiln, path, mode, isa, batch, args.seconds,
                                            args.threads, calib_dir)
                        rates[mode].append(result["items_per_s"])
                        reports[mode] = log
                base = statistics.median(rates["fp32"]) if "fp32" in rates else None
                parts = []
                for mode in modes:
                    r = statistics.median(rates[mode])
                    ratio = f" ({r / base:.2f}x)" if base and mode != "fp32" else ""
                    parts.append(f"{mode} {r:9.1f}/s{ratio}")
                print(f"{model:8} {isa:6} batch {batch:3}: " + "  ".join(parts), flush=True)
                if batch == int(args.batches.split(",")[0]):
                    for mode in modes:
                        for line in reports.get(mode, "").splitlines():
                            if "max rel error" in line or "layers:" in line or "weights" in line:
                                print(f"    [{mode}] {line.strip()}")
    print("load:", open("/proc/loadavg").read().strip())


if __name__ == "__main__":
    main()
