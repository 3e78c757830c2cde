#!/usr/bin/python3
"""Accuracy of Kiln's compression on a classifier with real trained weights (issue 10).

Trains small classifiers on scikit-learn's bundled digits (1,797 8x8 images, nothing is
downloaded) with a fixed seed and a held-out test split, exports each to ONNX, and runs the
test split through `kiln run` in fp32 and with compression. Reports, per model and mode:
top-1 accuracy on the held-out split, top-1 agreement with Kiln fp32, and the max relative
error of the logits (max |compressed - fp32| / max |fp32|). The calibration inputs are
200 training images (never the test split).

Usage: /usr/bin/python3 bench/compression/digits_accuracy.py [--kiln build/tools/kiln/kiln]
         [--workdir /tmp/kiln_digits] [--isa avx2|avx512] [--tolerance 0.02]
Models: "mlp" (64-512-512-10, ReLU: int8/bf16 MatMul/Gemm) and "cnn" (two 3x3 convs + pool
+ linear: static int8 Conv where the build has it, int8 for the linear layer).
Exit status 1 when a target is missed: accuracy within 0.5 points of fp32 and >= 99% agreement.
"""
import argparse
import os
import subprocess
import sys

import numpy as np
import torch
import torch.nn as nn
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split


class Mlp(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Flatten(), nn.Linear(64, 512), nn.ReLU(), nn.Linear(512, 512),
                                 nn.ReLU(), nn.Linear(512, 10))

    def forward(self, x):
        return self.net(x)


class Cnn(nn.Module):
    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(nn.Conv2d(1, 32, 3, padding=1), nn.ReLU(),
                                      nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(),
                                      nn.MaxPool2d(2))
        self.head = nn.Sequential(nn.Flatten(), nn.Linear(64 * 4 * 4, 128), nn.ReLU(),
                                  nn.Linear(128, 10))

    def forward(self, x):
        return self.head(self.features(x))


def train(model, x, y, epochs, seed):
    torch.manual_seed(seed)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    loss_fn = nn.CrossEntropyLoss()
    xt, yt = torch.from_numpy(x), torch.from_numpy(y)
    for _ in range(epochs):
        perm = torch.randperm(len(xt))
        for i in range(0, len(xt), 64):
            idx = perm[i:i + 64]
            opt.zero_grad()
            loss_fn(model(xt[idx]), yt[idx]).backward()
            opt.step()
    model.eval()
    return model


def kiln_logits(kiln, model_path, x, outdir, extra, isa):
    os.makedirs(outdir, exist_ok=True)
    xin = os.path.join(outdir, "x.npy")
    np.save(xin, x)
    cmd = [kiln, "run", model_path, "--input", f"x={xin}", "--output_dir", outdir]
    if isa:
        cmd += ["--isa", isa]
    cmd += extra
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        sys.exit(f"kiln run failed: {' '.join(cmd)}\n{proc.stderr}")
    return np.load(os.path.join(outdir, "logits.npy")), proc.stderr


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--kiln", default="build/tools/kiln/kiln")
    parser.add_argument("--workdir", default="/tmp/kiln_digits")
    parser.add_argument("--isa", default="")
    parser.add_argument("--tolerance", default="0.02")
    parser.add_argument("--models", default="mlp,cnn")
    args = parser.parse_args()
    torch.set_num_threads(2)

    digits = load_digits()
    x = (digits.images / 16.0).astype(np.float32)[:, None, :, :]  # [N, 1, 8, 8]
    y = digits.target.astype(np.int64)
    x_train, x_test, y_train, y_test = train_test_split(x, y, test_size=0.3, random_state=0,
                                                        stratify=y)
    calib_dir = os.path.join(args.workdir, "calibration")
    os.makedirs(calib_dir, exist_ok=True)
    np.save(os.path.join(calib_dir, "x.npy"), x_train[:200])

    ok = True
    print(f"digits: {len(x_train)} train / {len(x_test)} held-out test images; "
          f"calibration: 200 training images; tolerance {args.tolerance}; isa {args.isa or 'cpu'}")
    print(f"{'model':6} {'mode':10} {'top-1':>8} {'vs fp32':>9} {'agreement':>10} "
          f"{'max rel err':>12}")
    for name in args.models.split(","):
        model = {"mlp": Mlp, "cnn": Cnn}[name]()
        train(model, x_train, y_train, epochs=30 if name == "mlp" else 15, seed=0)
        path = os.path.join(args.workdir, f"digits_{name}.onnx")
        torch.onnx.export(model, torch.from_numpy(x_test[:1]), path, input_names=["x"],
                          output_names=["logits"], dynamic_axes={"x": {0: "batch"}},
                          opset_version=13)
        with torch.no_grad():
            torch_acc = (model(torch.from_numpy(x_test)).argmax(1).numpy() == y_test).mean()
        fp32, _ = kiln_logits(args.kiln, path, x_test, os.path.join(args.workdir, name, "fp32"),
                              [], args.isa)
        fp32_pred = fp32.argmax(1)
        fp32_acc = (fp32_pred == y_test).mean()
        print(f"{name:6} {'torch':10} {100 * torch_acc:7.2f}%")
        print(f"{name:6} {'fp32':10} {100 * fp32_acc:7.2f}%")
        modes = {
            "int8": ["--allow_compression", "--calibration_inputs", calib_dir,
                     "--compression_tolerance", args.tolerance],
            "bf16": ["--mixed_precision", "bfloat16", "--calibration_inputs", calib_dir,
                     "--compression_tolerance", args.tolerance],
        }
        for mode, extra in modes.items():
            got, log = kiln_logits(args.kiln, path, x_test, os.path.join(args.workdir, name, mode),
                                   extra, args.isa)
            pred = got.argmax(1)
            acc = (pred == y_test).mean()
            agree = (pred == fp32_pred).mean()
            rel = np.abs(got - fp32).max() / np.abs(fp32).max()
            print(f"{name:6} {mode:10} {100 * acc:7.2f}% {100 * (acc - fp32_acc):+8.2f}p "
                  f"{100 * agree:9.2f}% {rel:12.4g}")
            kept = [l.strip() for l in log.splitlines() if "layers:" in l]
            if kept:
                print(f"{'':17} {kept[-1]}")
            if fp32_acc - acc > 0.005 or agree < 0.99:
                ok = False
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
