"""Packed weights and VmRSS per extra batch size (issue 9: "compiling a plan for a new batch
size packs no weights; RSS growth <= the new plan's activation arena").

For batch 1, 2, 4, 8, 16, 32 in turn: allocate the input, precompile the plan for that batch
size (RSS after), run it once (RSS after), and read the model's packed-weight bytes from
Model.inspect(). The arena of each plan is what `kiln inspect` prints for a copy of the model
with that batch size fixed.

    PYTHONPATH=build/python python3 bench/runtime/rss_per_batch.py MODEL.onnx [--channels 3 --size 224]

Env: KILN_CONV_WINOGRAD, KILN_THREAD_CHOICE (docs/RUNTIME.md) to compare with nothing timed.
"""
import argparse
import re
import time

import numpy as np

import kiln.runtime as kr


def rss_mb():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS"):
                return int(line.split()[1]) / 1024.0
    return 0.0


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("model")
    parser.add_argument("--channels", type=int, default=3)
    parser.add_argument("--size", type=int, default=224)
    args = parser.parse_args()
    model = kr.Model(args.model)
    name = next(iter(model.signatures.values())).input_keys[0]
    print("after load: %.1f MB" % rss_mb())
    for batch in [1, 2, 4, 8, 16, 32]:
        shape = [batch, args.channels, args.size, args.size]
        x = np.full(shape, 0.5, np.float32)
        before = rss_mb()
        start = time.time()
        model.precompile({name: shape})
        compile_s = time.time() - start
        compiled = rss_mb()
        model.run({name: x})
        ran = rss_mb()
        packed = re.search(r"packed weights: (\d+) bytes", model.inspect())
        print("batch %2d: compile %.2f s, RSS +%.1f MB at compile, +%.1f MB after the first run, "
              "packed %.1f MB" % (batch, compile_s, compiled - before, ran - before,
                                  int(packed.group(1)) / 1e6))


if __name__ == "__main__":
    main()
