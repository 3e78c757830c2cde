#!/usr/bin/python3
"""Already-quantized ONNX MLPs: Kiln's reference kernels against kiln::Int8MatMul (issue 10).

Writes one MLP (K0-H-H-K0 by default 512-2048-2048-512, Relu between layers) in the three
forms ONNX Runtime's quantizers write for MatMul, with the same int8 weights:
  qdq      quantize_static, QDQ format, of torch Linear layers: DequantizeLinear(x) ->
           Gemm(., DequantizeLinear(W int8 [N, K], per-channel scales, axis 0),
           DequantizeLinear(bias int32)) -> Relu -> QuantizeLinear
  qop      quantize_static, QOperator format: QLinearMatMul per layer (no bias)
  dynamic  quantize_dynamic: DynamicQuantizeLinear -> MatMulInteger -> Cast -> Mul(Mul(x_scale,
           w_scale)) -> Add(bias) -> Relu
then runs `kiln run --bench` on each without --allow_compression (the reference kernels of
src/kernels/cpu/quantize_ops.cc, and oneDNN fp32 for the QDQ form's float MatMul) and with it
(src/opt/fuse_qdq_matmul.cc: kiln::Int8MatMul), interleaved over --rounds rounds, and prints
the median items/s and the ratio. Say the machine's load (uptime) with any figure you quote.

Usage: /usr/bin/python3 bench/compression/qdq_matmul_bench.py [--kiln build/tools/kiln/kiln]
         [--dims 512,2048,2048,512] [--forms qdq,qop,dynamic] [--isas avx512,avx2]
         [--batches 1,32] [--seconds 2] [--rounds 2] [--out /tmp/qdq_models]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 13


def weights(dims, seed=0):
    """Per layer: int8 weights [K, N] symmetric (ORT's default QInt8 weights), per-column
    scales, and a float bias."""
    rng = np.random.default_rng(seed)
    out = []
    for k, n in zip(dims[:-1], dims[1:]):
        w = rng.standard_normal((k, n)).astype(np.float32) / np.sqrt(k)
        scale = (np.abs(w).max(axis=0) / 127.0).astype(np.float32)
        q = np.clip(np.rint(w / scale), -127, 127).astype(np.int8)
        bias = (0.1 * rng.standard_normal(n)).astype(np.float32)
        out.append((q, scale, bias))
    return out


def const(name, array):
    return numpy_helper.from_array(np.asarray(array), name)


# Activation quantization per layer input (uint8, asymmetric, as ORT's QUInt8 activations):
# inputs ~N(0, 1) and Relu outputs of a few units.
def act_params(i):
    return (np.float32(8.0 / 255), np.uint8(128)) if i == 0 else (np.float32(6.0 / 255), np.uint8(0))


def qdq_model(dims, layers):
    """quantize_static's QDQ form of torch Linear layers (Gemm, transB=1): DQ(x), DQ(W [N, K]
    per channel on axis 0), DQ(bias int32, scale x_scale * w_scale) -> Gemm -> Relu -> Q."""
    nodes, inits = [], []
    s0, z0 = act_params(0)
    inits += [const("s0", s0), const("z0", z0)]
    nodes.append(helper.make_node("QuantizeLinear", ["x", "s0", "z0"], ["xq0"]))
    x = "xq0"
    for i, (q, ws, b) in enumerate(layers):
        s, z = act_params(i)
        last = i == len(layers) - 1
        so, zo = act_params(i + 1) if not last else (np.float32(0.05), np.uint8(128))
        bs = (s * ws).astype(np.float32)
        bq = np.rint(b / bs).astype(np.int32)
        inits += [const(f"w{i}", np.ascontiguousarray(q.T)), const(f"ws{i}", ws),
                  const(f"bq{i}", bq), const(f"bs{i}", bs), const(f"so{i}", so),
                  const(f"zo{i}", zo)]
        if i > 0:
            inits += [const(f"s{i}", s), const(f"z{i}", z)]
        nodes += [
            helper.make_node("DequantizeLinear", [x, f"s{i}", f"z{i}"], [f"xd{i}"]),
            helper.make_node("DequantizeLinear", [f"w{i}", f"ws{i}"], [f"wd{i}"], axis=0),
            helper.make_node("DequantizeLinear", [f"bq{i}", f"bs{i}"], [f"bd{i}"], axis=0),
            helper.make_node("Gemm", [f"xd{i}", f"wd{i}", f"bd{i}"], [f"g{i}"], transB=1),
        ]
        out = f"g{i}"
        if not last:
            nodes.append(helper.make_node("Relu", [out], [f"r{i}"]))
            out = f"r{i}"
        nodes.append(helper.make_node("QuantizeLinear", [out, f"so{i}", f"zo{i}"], [f"q{i}"]))
        x = f"q{i}"
    n = len(layers) - 1
    nodes.append(helper.make_node("DequantizeLinear", [x, f"so{n}", f"zo{n}"], ["y"]))
    return graph(nodes, inits, dims, "qdq")


def qop_model(dims, layers):
    nodes, inits = [], []
    s0, z0 = act_params(0)
    inits += [const("s0", s0), const("z0", z0)]
    nodes.append(helper.make_node("QuantizeLinear", ["x", "s0", "z0"], ["xq0"]))
    x = "xq0"
    for i, (q, ws, _) in enumerate(layers):
        s, z = act_params(i)
        so, zo = act_params(i + 1) if i + 1 < len(layers) else (np.float32(0.05), np.uint8(128))
        inits += [const(f"w{i}", q), const(f"ws{i}", ws), const(f"wz{i}", np.zeros(q.shape[1], np.int8)),
                  const(f"so{i}", so), const(f"zo{i}", zo)]
        if i > 0:
            inits += [const(f"s{i}", s), const(f"z{i}", z)]
        nodes.append(helper.make_node(
            "QLinearMatMul", [x, f"s{i}", f"z{i}", f"w{i}", f"ws{i}", f"wz{i}", f"so{i}", f"zo{i}"],
            [f"q{i}"]))
        x = f"q{i}"
    # The last layer's output scale/zero point are so{n-1}/zo{n-1}.
    n = len(layers) - 1
    nodes.append(helper.make_node("DequantizeLinear", [x, f"so{n}", f"zo{n}"], ["y"]))
    return graph(nodes, inits, dims, "qop")


def dynamic_model(dims, layers):
    nodes, inits = [], []
    x = "x"
    for i, (q, ws, b) in enumerate(layers):
        inits += [const(f"w{i}", q), const(f"wz{i}", np.int8(0)), const(f"ws{i}", ws),
                  const(f"b{i}", b)]
        nodes += [
            helper.make_node("DynamicQuantizeLinear", [x], [f"xq{i}", f"xs{i}", f"xz{i}"]),
            helper.make_node("MatMulInteger", [f"xq{i}", f"w{i}", f"xz{i}", f"wz{i}"], [f"acc{i}"]),
            helper.make_node("Cast", [f"acc{i}"], [f"accf{i}"], to=TensorProto.FLOAT),
            helper.make_node("Mul", [f"xs{i}", f"ws{i}"], [f"sc{i}"]),
            helper.make_node("Mul", [f"accf{i}", f"sc{i}"], [f"mm{i}"]),
        ]
        last = i == len(layers) - 1
        nodes.append(helper.make_node("Add", [f"mm{i}", f"b{i}"], ["y" if last else f"a{i}"]))
        if not last:
            nodes.append(helper.make_node("Relu", [f"a{i}"], [f"h{i}"]))
            x = f"h{i}"
    return graph(nodes, inits, dims, "dynamic")


def graph(nodes, inits, dims, name):
    g = helper.make_graph(
        nodes, name, [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", dims[0]])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", dims[-1]])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", OPSET)])
    m.ir_version = 7
    onnx.checker.check_model(m)
    return m


def bench(kiln, path, compress, isa, batch, seconds):
    cmd = [kiln, "run", path, "--bench", "--json", "--random_inputs", "--batch", str(batch),
           "--seconds", str(seconds), "--isa", isa] + (["--allow_compression"] if compress else [])
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        sys.exit(f"failed: {' '.join(cmd)}\n{proc.stderr}")
    line = [l for l in proc.stdout.splitlines() if l.startswith("{")][-1]
    return json.loads(line), proc.stderr + proc.stdout


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--kiln", default="build/tools/kiln/kiln")
    p.add_argument("--dims", default="512,2048,2048,512")
    p.add_argument("--forms", default="qdq,qop,dynamic")
    p.add_argument("--isas", default="avx512,avx2")
    p.add_argument("--batches", default="1,32")
    p.add_argument("--seconds", type=float, default=2)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--out", default="/tmp/qdq_models")
    p.add_argument("--show_log", action="store_true", help="print the compressed load's output")
    a = p.parse_args()
    dims = [int(d) for d in a.dims.split(",")]
    layers = weights(dims)
    os.makedirs(a.out, exist_ok=True)
    makers = {"qdq": qdq_model, "qop": qop_model, "dynamic": dynamic_model}
    print(f"load: {os.getloadavg()}  MLP {a.dims}")
    print("| form | ISA | batch | reference items/s | Int8MatMul items/s | ratio |")
    print("|---|---|---|---|---|---|")
    for form in a.forms.split(","):
        path = os.path.join(a.out, f"mlp_{form}.onnx")
        onnx.save(makers[form](dims, layers), path)
        for isa in a.isas.split(","):
            for batch in [int(b) for b in a.batches.split(",")]:
                rates = {False: [], True: []}
                for _ in range(a.rounds):
                    for compress in (False, True):
                        r, log = bench(a.kiln, path, compress, isa, batch, a.seconds)
                        rates[compress].append(r["items_per_s"])
                        if compress and a.show_log:
                            print(log)
                ref, fused = statistics.median(rates[False]), statistics.median(rates[True])
                print(f"| {form} | {isa} | {batch} | {ref:.1f} | {fused:.1f} | "
                      f"**{fused / ref:.2f}x** |", flush=True)
    print(f"load: {os.getloadavg()}")


if __name__ == "__main__":
    main()
