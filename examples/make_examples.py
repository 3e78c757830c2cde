#!/usr/bin/python3
"""Writes the small models that `make serve` serves (committed; rerun to regenerate).

models/half_plus_two/1/model.onnx      y = 0.5 * x + 2, x: float[batch, 1] (TF Serving's
                                       classic test model, as ONNX)
models/penguin_tabular/1/model.onnx    a tabular classifier: 4 float features -> 3 class
                                       probabilities (a fixed linear layer + softmax)
"""
import os

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

HERE = os.path.dirname(os.path.abspath(__file__))


def save(model, name):
    path = os.path.join(HERE, "models", name, "1", "model.onnx")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    onnx.checker.check_model(model)
    onnx.save(model, path)
    print("wrote", os.path.relpath(path, HERE))


def half_plus_two():
    half = numpy_helper.from_array(np.array([0.5], dtype=np.float32), "half")
    two = numpy_helper.from_array(np.array([2.0], dtype=np.float32), "two")
    graph = helper.make_graph(
        [helper.make_node("Mul", ["x", "half"], ["x_half"]),
         helper.make_node("Add", ["x_half", "two"], ["y"])],
        "half_plus_two",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 1])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 1])],
        initializer=[half, two])
    return helper.make_model(graph, producer_name="kiln examples",
                             opset_imports=[helper.make_opsetid("", 13)])


def penguin_tabular():
    # Features: culmen length, culmen depth, flipper length, body mass (standardized).
    weights = np.array([[0.9, -0.4, -0.5],
                        [-0.3, 0.8, -0.6],
                        [-0.7, -0.2, 1.1],
                        [-0.2, -0.3, 0.6]], dtype=np.float32)
    bias = np.array([0.1, 0.0, -0.1], dtype=np.float32)
    graph = helper.make_graph(
        [helper.make_node("Gemm", ["features", "weights", "bias"], ["logits"]),
         helper.make_node("Softmax", ["logits"], ["probabilities"], axis=1)],
        "penguin_tabular",
        [helper.make_tensor_value_info("features", TensorProto.FLOAT, ["batch", 4])],
        [helper.make_tensor_value_info("probabilities", TensorProto.FLOAT, ["batch", 3])],
        initializer=[numpy_helper.from_array(weights, "weights"),
                     numpy_helper.from_array(bias, "bias")])
    return helper.make_model(graph, producer_name="kiln examples",
                             opset_imports=[helper.make_opsetid("", 13)])


if __name__ == "__main__":
    save(half_plus_two(), "half_plus_two")
    save(penguin_tabular(), "penguin_tabular")
