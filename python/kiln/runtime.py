"""kiln.runtime: load an ONNX model or a TensorFlow SavedModel and run its signatures.

    import numpy as np, kiln
    model = kiln.runtime.Model("examples/models/half_plus_two/1/model.onnx")
    print(model.signatures)             # {'serving_default': Signature(...)}
    out = model.run({"x": np.array([[1.0], [2.0]], np.float32)})
    out["y"]                            # a NumPy array

Inputs are used in place (no copy) when they are C-contiguous, aligned and of the declared
dtype; the GIL is released while the model runs, so several Python threads can run at once.
"""

from kiln import _kiln

_native = _kiln.runtime

Signature = _native.Signature
TensorInfo = _native.TensorInfo


class ModelOptions:
    """kiln::runtime::ModelOptions.

    tags                     SavedModel MetaGraph tag set, comma-separated ("serve")
    disable_optimizer        run the imported graph as it is
    allow_compression        allow the int8/bf16 compression passes
    intra_op_threads         threads per kernel (0: chosen so that intra * inter <= cores)
    inter_op_threads         kernels run in parallel (0: chosen)
    plan_cache_capacity      compiled plans kept per signature (one per input shape)
    run_memory_budget_bytes  bytes one run may hold (0: half of RAM); beyond it a run fails
                             with kiln.ResourceExhaustedError
    """

    _FIELDS = {"tags": "serve", "disable_optimizer": False, "allow_compression": False,
               "intra_op_threads": 0, "inter_op_threads": 0, "plan_cache_capacity": 32,
               "run_memory_budget_bytes": 0}

    def __init__(self, **kwargs):
        for name, default in self._FIELDS.items():
            setattr(self, name, kwargs.pop(name, default))
        if kwargs:
            raise TypeError(f"unknown model option(s): {', '.join(sorted(kwargs))}; options are "
                            f"{', '.join(self._FIELDS)}")

    def __repr__(self):
        fields = ", ".join(f"{n}={getattr(self, n)!r}" for n in self._FIELDS)
        return f"ModelOptions({fields})"


class Model:
    """A loaded, optimized model. `path`: a .onnx file, a SavedModel directory, or a base path
    of numeric version folders (the highest is loaded). A missing path raises
    FileNotFoundError, an unreadable model kiln.DataLossError (an OSError)."""

    def __init__(self, path, options=None, **kwargs):
        if options is None:
            options = ModelOptions(**kwargs)
        elif kwargs:
            raise TypeError("give either options or keyword options, not both")
        elif not isinstance(options, ModelOptions):
            raise TypeError("options must be a kiln.runtime.ModelOptions")
        self._model = _native.Model(
            str(path), str(options.tags), bool(options.disable_optimizer),
            bool(options.allow_compression), int(options.intra_op_threads),
            int(options.inter_op_threads), int(options.plan_cache_capacity),
            int(options.run_memory_budget_bytes))
        self.options = options
        signatures = self._model.signatures
        self._default_signature = (next(iter(signatures)) if len(signatures) == 1
                                   else "serving_default")
        self._run = self._model.run

    @property
    def signatures(self):
        """{key: Signature}; each has input_keys, output_keys and inputs/outputs
        ({key: TensorInfo(name, dtype, shape)})."""
        return self._model.signatures

    @property
    def path(self):
        return self._model.path

    @property
    def platform(self):
        """"onnx" or "tensorflow"."""
        return self._model.platform

    def run(self, inputs, signature=None, output_keys=None):
        """Runs a signature: `inputs` {input key: array-like} (all of them), returns
        {output key: NumPy array} (all outputs, or those in output_keys). `signature` defaults
        to the model's only signature, else "serving_default"."""
        return self._run(inputs, signature or self._default_signature, output_keys)

    def precompile(self, input_shapes, signature=None):
        """Compiles the plan for {input key: shape} ahead of the first run of that shape."""
        self._model.precompile(signature or self._default_signature,
                               {k: [int(d) for d in v] for k, v in input_shapes.items()})

    def inspect(self):
        """What `kiln inspect` prints: signatures, ops, optimization log, planned memory."""
        return self._model.inspect()

    def __repr__(self):
        return f"<kiln.runtime.Model {self.path!r} ({self.platform}), " \
               f"signatures {sorted(self.signatures)}>"


__all__ = ["Model", "ModelOptions", "Signature", "TensorInfo"]
