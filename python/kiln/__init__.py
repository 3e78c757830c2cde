"""Kiln from Python.

kiln.data     input pipelines with tf.data's Python API, running on Kiln's C++ pipelines;
              elements arrive as NumPy arrays (or torch tensors through DLPack) without copies.
kiln.runtime  Kiln's inference runtime: load an ONNX model or a SavedModel and run it.

Errors: bad arguments raise ValueError or TypeError, missing or corrupt files OSError, and
everything Kiln reports is a kiln.Error (with `.code`, e.g. 'INVALID_ARGUMENT'); see
docs/PYTHON.md.
"""

from kiln._kiln import (  # noqa: F401  (re-exported)
    CancelledError,
    DataLossError,
    Error,
    FailedPreconditionError,
    InternalError,
    InvalidArgumentError,
    NotFoundError,
    OutOfRangeError,
    PermissionDeniedError,
    ResourceExhaustedError,
    UnimplementedError,
)
from kiln import data, functions, runtime  # noqa: F401,E402

__all__ = [
    "data", "functions", "runtime", "Error", "InvalidArgumentError", "OutOfRangeError",
    "NotFoundError", "DataLossError", "PermissionDeniedError", "UnimplementedError",
    "ResourceExhaustedError", "FailedPreconditionError", "CancelledError", "InternalError",
]
