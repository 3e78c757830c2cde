"""Floating-point operations per item of an ONNX model: 2 x multiply-adds of its Conv, Gemm and
MatMul nodes (the work that dominates CNNs, transformers and MLPs; elementwise ops ignored),
from ONNX shape inference with the batch dimension set to 1.

Usage: /usr/bin/python3 bench/peers/model_flops.py MODEL.onnx [...]   (prints JSON per model)

ONNX's shape inference stops at Reshapes whose shape is computed (Shape -> Gather -> Concat),
as in the BERT-style encoder: its count is written out from export_runtime_models.py's sizes.
"""
import json
import sys

import numpy as np
import onnx
from onnx import numpy_helper, shape_inference


def flops_per_item(path):
    model = onnx.load(path)
    for value in model.graph.input:
        dims = value.type.tensor_type.shape.dim
        if dims and not dims[0].dim_value:
            dims[0].ClearField("dim_param")
            dims[0].dim_value = 1
    model = shape_inference.infer_shapes(model)
    shapes = {}
    for v in list(model.graph.value_info) + list(model.graph.input) + list(model.graph.output):
        dims = [d.dim_value for d in v.type.tensor_type.shape.dim]
        shapes[v.name] = dims
    for init in model.graph.initializer:
        shapes[init.name] = list(init.dims)
    total = 0
    for node in model.graph.node:
        if node.op_type == "Conv":
            w = shapes.get(node.input[1])
            y = shapes.get(node.output[0])
            if not w or not y:
                continue
            # y: [N, M, spatial...], w: [M, C/group, k...]
            total += 2 * int(np.prod(y)) * int(np.prod(w[1:]))
        elif node.op_type in ("Gemm", "MatMul"):
            a, b = shapes.get(node.input[0]), shapes.get(node.input[1])
            y = shapes.get(node.output[0])
            if not a or not b or not y:
                continue
            trans_a = any(att.name == "transA" and att.i for att in node.attribute)
            k = a[-2] if trans_a and len(a) >= 2 else a[-1]
            total += 2 * int(np.prod(y)) * int(k)
    return total


def bert4_flops():
    seq, hidden, heads, layers, ffn = 128, 256, 4, 4, 4 * 256  # export_runtime_models.py
    projections = 4 * 2 * seq * hidden * hidden                 # Q, K, V, O
    attention = 2 * (2 * heads * seq * seq * (hidden // heads))  # Q K^T and probs V
    feed_forward = 2 * 2 * seq * hidden * ffn
    return layers * (projections + attention + feed_forward) + 2 * hidden * hidden  # + pooler


if __name__ == "__main__":
    for p in sys.argv[1:]:
        flops = flops_per_item(p)
        if p.endswith("bert4.onnx"):
            flops = bert4_flops()
        print(json.dumps({"model": p, "flops_per_item": flops}))
