#!/usr/bin/python3
"""Writes examples/models/half_plus_two_savedmodel/123: TF Serving's half_plus_two as a
SavedModel (y = 0.5 * x + 2, signature serving_default x -> y, DT_FLOAT [-1, 1]) plus a
warmup file (assets.extra/tf_serving_warmup_requests: one PredictLog), written with protobuf
classes generated from this repository's own schemas in proto/ (no TensorFlow needed):

    protoc -Iproto --python_out=/tmp/pyproto $(find proto -name '*.proto')
    PYTHONPATH=/tmp/pyproto examples/make_saved_model.py
"""
import os
import struct

from tensorflow.core.framework import attr_value_pb2, graph_pb2, tensor_pb2, types_pb2
from tensorflow.core.protobuf import meta_graph_pb2, saved_model_pb2
from tensorflow_serving.apis import prediction_log_pb2

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "models", "half_plus_two_savedmodel", "123")


def scalar_const(graph, name, value):
    node = graph.node.add(name=name, op="Const")
    node.attr["dtype"].type = types_pb2.DT_FLOAT
    tensor = node.attr["value"].tensor
    tensor.dtype = types_pb2.DT_FLOAT
    tensor.float_val.append(value)
    return name


def graph_def():
    graph = graph_pb2.GraphDef()
    x = graph.node.add(name="x", op="Placeholder")
    x.attr["dtype"].type = types_pb2.DT_FLOAT
    x.attr["shape"].shape.unknown_rank = True
    scalar_const(graph, "a", 0.5)
    scalar_const(graph, "b", 2.0)
    for name, op, inputs in (("mul", "Mul", ["a", "x"]), ("y", "AddV2", ["mul", "b"])):
        node = graph.node.add(name=name, op=op, input=inputs)
        node.attr["T"].type = types_pb2.DT_FLOAT
    graph.versions.producer = 1087
    return graph


def tensor_info(name):
    info = meta_graph_pb2.TensorInfo(name=name, dtype=types_pb2.DT_FLOAT)
    info.tensor_shape.dim.add(size=-1)
    info.tensor_shape.dim.add(size=1)
    return info


def masked_crc32c(data):
    crc = 0xFFFFFFFF
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    crc ^= 0xFFFFFFFF
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def tfrecord(data):
    length = struct.pack("<Q", len(data))
    return (length + struct.pack("<I", masked_crc32c(length)) + data +
            struct.pack("<I", masked_crc32c(data)))


def warmup_log():
    log = prediction_log_pb2.PredictionLog()
    request = log.predict_log.request
    request.model_spec.name = "half_plus_two"
    x = request.inputs["x"]
    x.dtype = types_pb2.DT_FLOAT
    x.tensor_shape.dim.add(size=3)
    x.tensor_shape.dim.add(size=1)
    x.float_val.extend([1.0, 2.0, 5.0])
    return log.SerializeToString()


def main():
    model = saved_model_pb2.SavedModel(saved_model_schema_version=1)
    meta = model.meta_graphs.add()
    meta.meta_info_def.tags.append("serve")
    meta.graph_def.CopyFrom(graph_def())
    signature = meta.signature_def["serving_default"]
    signature.method_name = "tensorflow/serving/predict"
    signature.inputs["x"].CopyFrom(tensor_info("x:0"))
    signature.outputs["y"].CopyFrom(tensor_info("y:0"))
    os.makedirs(os.path.join(OUT, "assets.extra"), exist_ok=True)
    with open(os.path.join(OUT, "saved_model.pb"), "wb") as f:
        f.write(model.SerializeToString())
    with open(os.path.join(OUT, "assets.extra", "tf_serving_warmup_requests"), "wb") as f:
        f.write(tfrecord(warmup_log()))
    print("wrote", os.path.relpath(OUT, HERE))


if __name__ == "__main__":
    main()
