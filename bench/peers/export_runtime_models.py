#!/usr/bin/python3
"""Exports the runtime benchmark models of issue 3 as ONNX files with a dynamic batch dim.

Usage: /usr/bin/python3 bench/peers/export_runtime_models.py OUTDIR [--models a,b]

Models (random weights from a fixed seed; nothing is downloaded):
  resnet18.onnx      torchvision resnet18, 1x3x224x224
  mobilenet_v2.onnx  torchvision mobilenet_v2, 1x3x224x224
  bert4.onnx         4-layer BERT-style encoder: token+position embeddings, LayerNorm,
                     4 heads x 64, GELU (erf) MLP 1024, hidden 256, sequence 128
  dlrm.onnx          8 categorical features (16-wide embeddings) + 13 dense,
                     MLP 512-256-128-1 with a sigmoid
  matmul_1024.onnx, matmul_2048.onnx
                     Y = A @ B with A [M, K] (M dynamic) and a constant B [K, K], for
                     build/bench/runtime/runtime_matmul_bench (not a PyTorch peer model)

torch_bench.py imports build() and MODELS from here, so PyTorch times the same module
(same seed, same weights) that was exported.
"""
import argparse
import math
import os
import sys

import torch
import torch.nn as nn
import torchvision

SEQ_LEN = 128
VOCAB = 30522
HIDDEN = 256
HEADS = 4
LAYERS = 4
NUM_SPARSE = 8
SPARSE_ROWS = 1000
EMBED_DIM = 16
NUM_DENSE = 13


class EncoderLayer(nn.Module):
    """Post-LN BERT layer written out op by op, the way HF BERT exports."""

    def __init__(self):
        super().__init__()
        self.q = nn.Linear(HIDDEN, HIDDEN)
        self.k = nn.Linear(HIDDEN, HIDDEN)
        self.v = nn.Linear(HIDDEN, HIDDEN)
        self.o = nn.Linear(HIDDEN, HIDDEN)
        self.ln1 = nn.LayerNorm(HIDDEN, eps=1e-12)
        self.fc1 = nn.Linear(HIDDEN, 4 * HIDDEN)
        self.fc2 = nn.Linear(4 * HIDDEN, HIDDEN)
        self.ln2 = nn.LayerNorm(HIDDEN, eps=1e-12)

    def split(self, x):
        b, s, _ = x.shape
        return x.view(b, s, HEADS, HIDDEN // HEADS).transpose(1, 2)

    def forward(self, x, mask_bias):
        q, k, v = self.split(self.q(x)), self.split(self.k(x)), self.split(self.v(x))
        scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(HIDDEN // HEADS)
        probs = torch.softmax(scores + mask_bias, dim=-1)
        ctx = torch.matmul(probs, v).transpose(1, 2).reshape(x.shape)
        x = self.ln1(x + self.o(ctx))
        h = self.fc2(nn.functional.gelu(self.fc1(x)))
        return self.ln2(x + h)


class Bert4(nn.Module):
    def __init__(self):
        super().__init__()
        self.tokens = nn.Embedding(VOCAB, HIDDEN)
        self.positions = nn.Embedding(SEQ_LEN, HIDDEN)
        self.segments = nn.Embedding(2, HIDDEN)
        self.ln = nn.LayerNorm(HIDDEN, eps=1e-12)
        self.layers = nn.ModuleList([EncoderLayer() for _ in range(LAYERS)])
        self.pooler = nn.Linear(HIDDEN, HIDDEN)

    def forward(self, input_ids, attention_mask):
        positions = torch.arange(input_ids.shape[1], dtype=torch.int64).unsqueeze(0)
        x = self.tokens(input_ids) + self.positions(positions) + self.segments(
            torch.zeros_like(input_ids))
        x = self.ln(x)
        mask_bias = (1.0 - attention_mask.to(torch.float32))[:, None, None, :] * -10000.0
        for layer in self.layers:
            x = layer(x, mask_bias)
        return torch.tanh(self.pooler(x[:, 0]))


class Dlrm(nn.Module):
    def __init__(self):
        super().__init__()
        self.tables = nn.ModuleList(
            [nn.Embedding(SPARSE_ROWS, EMBED_DIM) for _ in range(NUM_SPARSE)])
        self.mlp = nn.Sequential(
            nn.Linear(NUM_DENSE + NUM_SPARSE * EMBED_DIM, 512), nn.ReLU(),
            nn.Linear(512, 256), nn.ReLU(),
            nn.Linear(256, 128), nn.ReLU(),
            nn.Linear(128, 1), nn.Sigmoid())

    def forward(self, dense, sparse):
        embedded = [table(sparse[:, i]) for i, table in enumerate(self.tables)]
        return self.mlp(torch.cat([dense] + embedded, dim=1))


class Mlp(nn.Module):
    """1024-4096-4096-1024 with ReLU: 100 MB of fp32 weights, memory-bound at batch 1."""
    def __init__(self):
        super().__init__()
        self.layers = nn.Sequential(
            nn.Linear(1024, 4096), nn.ReLU(), nn.Linear(4096, 4096), nn.ReLU(),
            nn.Linear(4096, 1024))

    def forward(self, x):
        return self.layers(x)


def build(name):
    """Returns (module, example inputs, input names, output names)."""
    if name in ("resnet18", "mobilenet_v2"):
        model = getattr(torchvision.models, name)()
        return model, (torch.randn(1, 3, 224, 224),), ["input"], ["logits"]
    if name == "bert4":
        ids = torch.randint(0, VOCAB, (1, SEQ_LEN), dtype=torch.int64)
        mask = torch.ones(1, SEQ_LEN, dtype=torch.int64)
        return Bert4(), (ids, mask), ["input_ids", "attention_mask"], ["pooled"]
    if name == "dlrm":
        dense = torch.randn(1, NUM_DENSE)
        sparse = torch.randint(0, 10, (1, NUM_SPARSE), dtype=torch.int64)
        return Dlrm(), (dense, sparse), ["dense", "sparse"], ["probability"]
    if name == "mlp":
        return Mlp(), (torch.randn(1, 1024),), ["x"], ["y"]
    raise ValueError(f"unknown model {name}")


def build_seeded(name):
    torch.manual_seed(0)
    model, example, input_names, output_names = build(name)
    model.eval()
    # Random BatchNorm statistics, so BN folding is exercised on non-trivial values.
    for m in model.modules():
        if isinstance(m, nn.BatchNorm2d):
            m.running_mean.uniform_(-0.1, 0.1)
            m.running_var.uniform_(0.5, 1.5)
    return model, example, input_names, output_names


MODELS = ["resnet18", "mobilenet_v2", "bert4", "mlp", "dlrm"]


def export_matmul(outdir, size):
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper
    b = np.random.default_rng(0).uniform(-1, 1, (size, size)).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["A", "B"], ["Y"])], f"matmul_{size}",
        [helper.make_tensor_value_info("A", TensorProto.FLOAT, ["M", size])],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, ["M", size])],
        [numpy_helper.from_array(b, "B")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    path = os.path.join(outdir, f"matmul_{size}.onnx")
    onnx.save(model, path)
    print(f"matmul_{size}: {path}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("outdir")
    parser.add_argument("--models", default=",".join(MODELS + ["matmul"]))
    args = parser.parse_args()
    os.makedirs(args.outdir, exist_ok=True)
    for name in args.models.split(","):
        if name == "matmul":
            for size in (1024, 2048):
                export_matmul(args.outdir, size)
            continue
        model, example, input_names, output_names = build_seeded(name)
        path = os.path.join(args.outdir, name + ".onnx")
        dynamic = {n: {0: "batch"} for n in input_names + output_names}
        with torch.no_grad():
            torch.onnx.export(model, example, path, input_names=input_names,
                              output_names=output_names, dynamic_axes=dynamic,
                              opset_version=13, do_constant_folding=True)
        print(f"{name}: {path} ({os.path.getsize(path) / 1e6:.1f} MB)")


if __name__ == "__main__":
    sys.exit(main())
