"""Built-in element functions for kiln.data.Dataset.map.

Each returns a function object that runs in C++ on Kiln's threads, without the GIL, so that a
parallel map of them uses every core (a Python callable holds the GIL while it runs). Each
transforms one component of the element, chosen by position (int) or name (str), and keeps
the others; each works on one element and on a batch of them.

    spec = {"image/encoded": FixedLenFeature([], "string"),
            "image/class/label": FixedLenFeature([], "int64")}
    ds = ds.map(chain(parse_example(spec),
                      decode_jpeg("image/encoded", channels=3),
                      resize("image/encoded", (224, 224)),
                      normalize("image/encoded", mean, std, scale=1 / 255)),
                num_parallel_calls=kiln.data.AUTOTUNE)
"""

from kiln import _kiln

_native = _kiln.data

Function = _native.Function


class FixedLenFeature:
    """tf.io.FixedLenFeature: `shape` values of `dtype` per example (float32, int64 or
    "string"); `default_value` is used when the feature is absent (else absence is an error)."""

    def __init__(self, shape, dtype, default_value=None):
        self.shape = [int(d) for d in shape]
        self.dtype = dtype
        self.default_value = default_value

    def _spec(self, key):
        return (key, "fixed", self.dtype, self.shape, self.default_value)


class VarLenFeature:
    """tf.io.VarLenFeature: a SparseTensor, as the components "<key>/indices",
    "<key>/values" and "<key>/dense_shape"."""

    def __init__(self, dtype):
        self.dtype = dtype

    def _spec(self, key):
        return (key, "var", self.dtype, [], None)


class RaggedFeature:
    """tf.io.RaggedFeature (one ragged dimension): components "<key>/values" and
    "<key>/row_splits"."""

    def __init__(self, dtype):
        self.dtype = dtype

    def _spec(self, key):
        return (key, "ragged", self.dtype, [], None)


def parse_example(features, component=0):
    """tf.io.parse_example / parse_single_example of a serialized tf.Example component.
    `features`: {key: FixedLenFeature | VarLenFeature | RaggedFeature}. The element becomes a
    dict named by the outputs (other components keep their names)."""
    if not isinstance(features, dict):
        raise TypeError("features must be a dict {key: FixedLenFeature | VarLenFeature | "
                        "RaggedFeature}")
    specs = []
    for key, feature in features.items():
        if not hasattr(feature, "_spec"):
            raise TypeError(f"feature {key!r}: {type(feature).__name__} is not a "
                            "FixedLenFeature, VarLenFeature or RaggedFeature")
        specs.append(feature._spec(key))
    return _native.parse_example(specs, component)


_DCT_METHODS = {"": True, "INTEGER_FAST": True, "INTEGER_ACCURATE": False}


def decode_jpeg(component=0, channels=0, dct_method=""):
    """tf.io.decode_jpeg: JPEG bytes -> uint8 [h, w, channels] (channels 0: as stored).
    dct_method as TensorFlow's: "" or "INTEGER_FAST" (the default), "INTEGER_ACCURATE"."""
    if dct_method not in _DCT_METHODS:
        raise ValueError(f"dct_method must be one of {sorted(_DCT_METHODS)}, not {dct_method!r}")
    return _native.decode_jpeg(component, int(channels), _DCT_METHODS[dct_method])


def decode_png(component=0, channels=0, dtype="uint8"):
    """tf.io.decode_png: PNG bytes -> uint8 or uint16 [h, w, channels]."""
    return _native.decode_png(component, int(channels), dtype)


def resize(component, size):
    """tf.image.resize(method="bilinear", antialias=False): [h, w, c] or [n, h, w, c] ->
    float32 of `size` = (height, width)."""
    height, width = size
    return _native.resize(component, int(height), int(width))


def normalize(component, mean, stddev, scale=1.0):
    """(x * scale - mean) / stddev per channel (the last axis), float32. mean and stddev: one
    value or one per channel."""
    as_list = lambda v: [float(x) for x in (v if hasattr(v, "__len__") else [v])]  # noqa: E731
    return _native.normalize(component, as_list(mean), as_list(stddev), float(scale))


def cast(component, dtype):
    """tf.cast of one component."""
    return _native.cast(component, dtype)


def one_hot(component, depth, on_value=1.0, off_value=0.0):
    """tf.one_hot of integer indices: [..., depth] float32."""
    return _native.one_hot(component, int(depth), float(on_value), float(off_value))


def chain(*functions):
    """The functions applied in order as one map function: one parallel stage instead of
    several (what tf.data's map fusion does), saving a hand-off per function."""
    if len(functions) == 1 and isinstance(functions[0], (list, tuple)):
        functions = tuple(functions[0])
    for f in functions:
        if not isinstance(f, Function):
            raise TypeError(f"chain() takes built-in functions, not {type(f).__name__}")
    return _native.chain(list(functions))


__all__ = ["FixedLenFeature", "VarLenFeature", "RaggedFeature", "parse_example", "decode_jpeg",
           "decode_png", "resize", "normalize", "cast", "one_hot", "chain", "Function"]
