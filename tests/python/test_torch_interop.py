"""kiln and torch in one process, imported in either order: both carry the ONNX protos, and
a shared protobuf descriptor pool would abort the process (python/CMakeLists.txt)."""

import subprocess
import sys

import pytest


@pytest.mark.parametrize("order", ["import kiln, torch", "import torch, kiln"])
def test_kiln_and_torch_import_in_either_order(order):
    pytest.importorskip("torch")
    code = order + "; import numpy as np; " \
        "m = kiln.runtime.Model(__import__('os').environ['KILN_SOURCE_DIR'] + " \
        "'/examples/models/half_plus_two/1/model.onnx'); " \
        "print(m.run({'x': np.ones((1, 1), np.float32)})['y'][0, 0])"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "2.5"
