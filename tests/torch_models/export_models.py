"""Exports small PyTorch models to ONNX with sample inputs and PyTorch's own outputs, for
torch_models_test. Runs with Debian's python3-torch 1.13 and python3-torchvision; weights
are random (seeded), nothing is downloaded.

Usage: export_models.py OUT_DIR
Writes OUT_DIR/<model>/model.onnx, OUT_DIR/<model>/inputs/<input name>.npy and
OUT_DIR/<model>/outputs/<output name>.npy.
"""
import os
import sys

import numpy as np
import torch
from torch import nn


class Mlp(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 32), nn.Tanh(),
                                 nn.Linear(32, 4))

    def forward(self, x):
        return torch.softmax(self.net(x), dim=-1)


class BatchNormCnn(nn.Module):
    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Conv2d(16, 32, 3, stride=2, padding=1, bias=False), nn.BatchNorm2d(32), nn.ReLU6(),
            nn.Conv2d(32, 32, 1), nn.BatchNorm2d(32), nn.Sigmoid())
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(32, 10)

    def forward(self, x):
        y = self.pool(self.features(x))
        return self.fc(torch.flatten(y, 1))


class Tabular(nn.Module):
    """Embedding lookups (Gather) for categorical features, Concat with dense ones, MLP."""

    def __init__(self):
        super().__init__()
        self.embeddings = nn.ModuleList(
            [nn.Embedding(100, 8), nn.Embedding(50, 8), nn.Embedding(20, 4)])
        self.mlp = nn.Sequential(nn.Linear(8 + 8 + 4 + 6, 32), nn.ReLU(), nn.Linear(32, 16),
                                 nn.ReLU(), nn.Linear(16, 1))

    def forward(self, categorical, dense):
        parts = [emb(categorical[:, i]) for i, emb in enumerate(self.embeddings)]
        parts.append(dense)
        return torch.sigmoid(self.mlp(torch.cat(parts, dim=1)))


def randomize_batchnorm(model):
    for m in model.modules():
        if isinstance(m, nn.BatchNorm2d):
            m.running_mean.uniform_(-0.5, 0.5)
            m.running_var.uniform_(0.5, 1.5)
            m.weight.data.uniform_(0.5, 1.5)
            m.bias.data.uniform_(-0.2, 0.2)


def export(out_dir, name, model, inputs, input_names, output_names, dynamic_axes, opset):
    model.eval()
    case_dir = os.path.join(out_dir, name)
    os.makedirs(os.path.join(case_dir, "inputs"), exist_ok=True)
    os.makedirs(os.path.join(case_dir, "outputs"), exist_ok=True)
    # Gradients stay enabled: in eval mode without them nn.TransformerEncoderLayer takes its
    # fused "fast path", which has no ONNX export. The reference outputs come from the same
    # (exported) path.
    outputs = model(*inputs)
    if isinstance(outputs, torch.Tensor):
        outputs = (outputs,)
    outputs = [t.detach() for t in outputs]
    torch.onnx.export(model, tuple(inputs), os.path.join(case_dir, "model.onnx"),
                      input_names=input_names, output_names=output_names,
                      dynamic_axes=dynamic_axes, opset_version=opset, do_constant_folding=True)
    for n, t in zip(input_names, inputs):
        np.save(os.path.join(case_dir, "inputs", n + ".npy"), t.numpy())
    for n, t in zip(output_names, outputs):
        np.save(os.path.join(case_dir, "outputs", n + ".npy"), t.numpy())
    print("exported", name, "opset", opset)


def main():
    out_dir = sys.argv[1]
    torch.manual_seed(0)
    torch.set_num_threads(2)
    batch = {0: "batch"}

    export(out_dir, "mlp", Mlp(), [torch.randn(8, 16)], ["x"], ["probabilities"],
           {"x": batch, "probabilities": batch}, 13)

    cnn = BatchNormCnn()
    randomize_batchnorm(cnn)
    export(out_dir, "cnn_batchnorm", cnn, [torch.randn(2, 3, 32, 32)], ["image"], ["logits"],
           {"image": batch, "logits": batch}, 11)

    import torchvision
    mobilenet = torchvision.models.mobilenet_v2(weights=None, num_classes=100)
    randomize_batchnorm(mobilenet)
    export(out_dir, "mobilenet_v2", mobilenet, [torch.rand(1, 3, 224, 224)], ["input"],
           ["logits"], {"input": batch, "logits": batch}, 13)

    layer = nn.TransformerEncoderLayer(d_model=64, nhead=4, dim_feedforward=128, dropout=0.0,
                                       activation="gelu", batch_first=True)
    encoder = nn.TransformerEncoder(layer, num_layers=2, enable_nested_tensor=False)
    export(out_dir, "transformer_encoder", encoder, [torch.randn(2, 16, 64)], ["tokens"],
           ["encoded"], {"tokens": {0: "batch", 1: "sequence"}, "encoded": {0: "batch", 1: "sequence"}},
           14)

    categorical = torch.stack([torch.randint(0, 100, (16,)), torch.randint(0, 50, (16,)),
                               torch.randint(0, 20, (16,))], dim=1)
    export(out_dir, "tabular_embeddings", Tabular(), [categorical, torch.randn(16, 6)],
           ["categorical", "dense"], ["score"],
           {"categorical": batch, "dense": batch, "score": batch}, 12)


if __name__ == "__main__":
    main()
