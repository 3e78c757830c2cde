#!/usr/bin/python3
"""What kiln.runtime adds per call over the C++ call, on a tiny model (target: <= 5 us).

Both sides run the same model (examples/models/half_plus_two, y = x / 2 + 2) on the same input
(float32 [ROWS, 1]) through the same index-based Model::Run; the C++ side is
build/bench/python/python_runtime_call_bench (its own process). Rounds alternate C++, Python,
C++, Python ...; each side's best round counts.

  PYTHONPATH=build/python /usr/bin/python3 bench/python/runtime_overhead.py [--rows=1]
"""
import argparse
import json
import os
import subprocess
import time

import numpy as np

import kiln


def python_ns_per_call(model, x, calls):
    run = model.run
    inputs = {"x": x}
    for _ in range(100):
        run(inputs)
    t0 = time.perf_counter_ns()
    for _ in range(calls):
        run(inputs)
    return (time.perf_counter_ns() - t0) / calls


def main():
    root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default=os.path.join(root,
                                                        "examples/models/half_plus_two/1/model.onnx"))
    parser.add_argument("--cpp_bench",
                        default=os.path.join(root, "build/bench/python/python_runtime_call_bench"))
    parser.add_argument("--rows", type=int, default=1)
    parser.add_argument("--calls", type=int, default=20000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()

    model = kiln.runtime.Model(args.model)
    x = np.arange(args.rows, dtype=np.float32).reshape(args.rows, 1)
    np.testing.assert_allclose(model.run({"x": x})["y"], x / 2 + 2)
    cpp, py = [], []
    for r in range(args.rounds):
        out = subprocess.run([args.cpp_bench, args.model, "x", str(args.rows), "1",
                              str(args.calls)], check=True, capture_output=True, text=True)
        cpp.append(json.loads(out.stdout)["ns_per_call"])
        py.append(min(python_ns_per_call(model, x, args.calls) for _ in range(5)))
        print(json.dumps({"round": r, "cpp_ns": cpp[-1], "python_ns": round(py[-1], 1),
                          "load": os.getloadavg()[0]}), flush=True)
    isa = sorted(set(w for line in open("/proc/cpuinfo") if line.startswith("flags")
                     for w in line.split() if w.startswith("avx512") or w == "avx2"))
    print(json.dumps({"rows": args.rows, "best_cpp_ns": min(cpp), "best_python_ns": round(min(py), 1),
                      "overhead_ns": round(min(py) - min(cpp), 1),
                      "load": os.getloadavg(), "isa": " ".join(isa),
                      "KILN_MAX_ISA": os.environ.get("KILN_MAX_ISA", "")}))


if __name__ == "__main__":
    main()
