#!/usr/bin/env python3
"""Writes the explain benchmark's 100-feature tabular model: an MLP 100-64-64-1 with a sigmoid,
random weights (seeded), exported from PyTorch to ONNX with a dynamic batch dimension in
TF Serving's layout (OUT/1/model.onnx).

    python3 bench/explain/make_tabular_model.py /tmp/tabular100
"""
import os
import sys

import torch


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else "/tmp/tabular100"
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(100, 64), torch.nn.ReLU(),
        torch.nn.Linear(64, 64), torch.nn.ReLU(),
        torch.nn.Linear(64, 1), torch.nn.Sigmoid()).eval()
    os.makedirs(os.path.join(out, "1"), exist_ok=True)
    path = os.path.join(out, "1", "model.onnx")
    torch.onnx.export(model, torch.zeros(1, 100), path, input_names=["x"],
                      output_names=["probability"], opset_version=17,
                      dynamic_axes={"x": {0: "batch"}, "probability": {0: "batch"}})
    print(path)


if __name__ == "__main__":
    main()
