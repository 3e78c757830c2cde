"""kiln.data: input pipelines with tf.data's Python API on Kiln's C++ pipelines.

    import kiln
    ds = (kiln.data.TFRecordDataset(files)
          .map(kiln.functions.chain(...), num_parallel_calls=kiln.data.AUTOTUNE)
          .shuffle(10000, seed=42)
          .batch(64)
          .prefetch(kiln.data.AUTOTUNE))
    for batch in ds:          # dicts of NumPy arrays (no copies)
        ...
    for batch in ds.as_torch():  # torch tensors through DLPack (no copies)
        ...

Names, arguments and behaviour follow tf.data.Dataset; docs/PYTHON.md lists where they differ.
Elements are flat: a single value, a tuple of values or a dict of values (tf.data also nests
them). Values are NumPy arrays; string tensors arrive as `bytes` (scalars) or object arrays of
bytes, as tf.data's as_numpy_iterator gives them.
"""

import operator

import numpy as np

from kiln import _kiln
from kiln import functions  # noqa: F401  (kiln.data.functions, for tf.data users' habits)

_native = _kiln.data

AUTOTUNE = -1
INFINITE_CARDINALITY = -1
UNKNOWN_CARDINALITY = -2

Iterator = _native.Iterator
PipelineStats = _native.PipelineStats
StageStats = _native.StageStats


def tune_malloc(mmap_threshold=8 << 20, trim_threshold=128 << 20):
    """Makes glibc's malloc keep freed memory of up to `trim_threshold` bytes and serve blocks
    below `mmap_threshold` from its heaps, for the whole process (mallopt; the same as the
    MALLOC_MMAP_THRESHOLD_ and MALLOC_TRIM_THRESHOLD_ environment variables).

    Why: Python map functions run on Kiln's worker threads, and glibc gives each thread its own
    arena, which hands memory back to the kernel as soon as more than ~2x the last large block
    is free at its top. A function that makes a few image-sized arrays per call then page-faults
    and zero-fills all of them on every call: in bench/python/images_bench.py that was 8-9 ms of
    CPU per image for the Pillow callable against 1.7-2.1 ms with this call. Built-in functions
    (kiln.functions) do not need it. The cost is memory: up to `trim_threshold` bytes per arena
    stay mapped while unused."""
    _native.set_malloc_thresholds(_int(mmap_threshold, "mmap_threshold"),
                                  _int(trim_threshold, "trim_threshold"))


class AutotuneOptions:
    """tf.data.experimental.AutotuneOptions: `enabled`, `cpu_budget` (cores the parallel
    stages may keep busy; 0: all), `ram_budget` (bytes the buffers may hold; 0: half of RAM)."""

    def __init__(self):
        self.enabled = None
        self.cpu_budget = None
        self.ram_budget = None


class Options:
    """tf.data.Options for one pipeline, applied with Dataset.with_options:

        options = kiln.data.Options()
        options.autotune.cpu_budget = 4
        options.autotune.ram_budget = 2 << 30
        options.trace_path = "/tmp/pipeline.json"   # a Chrome trace, one track per stage
        ds = ds.with_options(options)

    Keyword arguments set the same fields: Options(cpu_budget=4, ram_budget=2 << 30)."""

    def __init__(self, cpu_budget=None, ram_budget=None, autotune=None, trace_path=None):
        self.autotune = AutotuneOptions()
        self.autotune.cpu_budget = cpu_budget
        self.autotune.ram_budget = ram_budget
        self.autotune.enabled = autotune
        self.trace_path = trace_path

    def merge(self, other):
        """Options with `other`'s fields where it sets them (tf.data's merge rule)."""
        merged = Options()
        for name in ("enabled", "cpu_budget", "ram_budget"):
            mine, theirs = getattr(self.autotune, name), getattr(other.autotune, name)
            setattr(merged.autotune, name, theirs if theirs is not None else mine)
        merged.trace_path = other.trace_path if other.trace_path is not None else self.trace_path
        return merged

    def _native_args(self):
        a = self.autotune
        cpu = 0 if a.cpu_budget is None else int(a.cpu_budget)
        ram = 0 if a.ram_budget is None else int(a.ram_budget)
        if cpu < 0 or ram < 0:
            raise ValueError("cpu_budget and ram_budget must be >= 0 (0: the default)")
        return (cpu, ram, True if a.enabled is None else bool(a.enabled),
                self.trace_path or "")


class TensorSpec:
    """tf.TensorSpec for from_generator's output_signature: shape (None for an unknown
    dimension, None for an unknown rank) and dtype (a NumPy dtype or "string")."""

    def __init__(self, shape, dtype="float32", name=None):
        self.shape = None if shape is None else tuple(shape)
        self.dtype = dtype
        self.name = name

    def __repr__(self):
        return f"TensorSpec(shape={self.shape}, dtype={self.dtype!r}, name={self.name!r})"

    def _conform(self, value):
        if self.dtype in ("string", str, bytes):
            array = np.asarray(value, dtype=object)
        else:
            array = np.asarray(value, dtype=self.dtype)
        if self.shape is not None:
            ok = array.ndim == len(self.shape) and all(
                want is None or want == got for want, got in zip(self.shape, array.shape))
            if not ok:
                raise ValueError(f"generator value of shape {array.shape} does not match "
                                 f"{self}")
        return array.item() if array.dtype == object and array.ndim == 0 else array


def _int(value, what="an argument"):
    """An integer argument: ints and NumPy ints; anything else is a TypeError, as in tf.data."""
    try:
        return operator.index(value)
    except TypeError:
        raise TypeError(f"{what} must be an integer, not {type(value).__name__}") from None


def _parallelism(num_parallel_calls):
    if num_parallel_calls is None:
        return 0  # sequential, on the consumer's thread (tf.data's default)
    n = _int(num_parallel_calls, "num_parallel_calls")
    if n < -1:
        raise ValueError(f"num_parallel_calls must be AUTOTUNE (-1) or >= 0, not {n}")
    return n


def _deterministic(deterministic):
    return True if deterministic is None else bool(deterministic)


def _count(count, what):
    n = -1 if count is None else _int(count, what)
    if n < -1:
        raise ValueError(f"{what} must be >= -1 (-1: all), not {n}")
    return n


def _filenames(filenames):
    if isinstance(filenames, (str, bytes)):
        return filenames
    if isinstance(filenames, Dataset):
        raise TypeError("filenames must be a str or a list of str; for a dataset of file names "
                        "use interleave()/flat_map()")
    names = list(filenames)
    if not names:
        raise ValueError("filenames is empty")
    return np.array([n if isinstance(n, bytes) else str(n).encode() for n in names], dtype=object)


def _dataset_fn(map_func):
    """A function returning a kiln Dataset, as the native side takes it."""
    def call(*args):
        ds = map_func(*args)
        if not isinstance(ds, Dataset):
            raise TypeError(f"the function must return a kiln.data.Dataset, not "
                            f"{type(ds).__name__}")
        return ds._native
    return call


def _shape_list(shape):
    return [-1 if d is None else int(d) for d in shape]


def _is_shape(value):
    return isinstance(value, (list, tuple)) and all(d is None or isinstance(d, (int, np.integer))
                                                   for d in value)


class Dataset:
    """A pipeline description (tf.data.Dataset); nothing runs until it is iterated."""

    def __init__(self, native, options=None):
        self._native = native
        self._options = options if options is not None else Options()

    def _wrap(self, native):
        return Dataset(native, self._options)

    # ---- sources ----

    @staticmethod
    def range(*args, dtype=None):
        """range(stop), range(start, stop[, step]): int64 scalars (or `dtype`)."""
        if not 1 <= len(args) <= 3:
            raise TypeError("range() takes 1 to 3 arguments")
        start, stop, step = (0, args[0], 1) if len(args) == 1 else (
            args[0], args[1], args[2] if len(args) == 3 else 1)
        if _int(step, "step") == 0:
            raise ValueError("range(): step must not be 0")
        ds = Dataset(_native.Dataset.range(_int(start, "start"), _int(stop, "stop"), _int(step, "step")))
        if dtype is not None and np.dtype(dtype) != np.int64:
            ds = ds.map(functions.cast(0, dtype))
        return ds

    @staticmethod
    def from_tensors(tensors):
        """One element: `tensors` (a value, a tuple or a dict of values)."""
        return Dataset(_native.Dataset.from_tensors(tensors))

    @staticmethod
    def from_tensor_slices(tensors):
        """One element per row of the first dimension of every component. The arrays are
        copied (the dataset is a snapshot, as in tf.data)."""
        return Dataset(_native.Dataset.from_tensor_slices(tensors))

    @staticmethod
    def from_generator(generator, output_types=None, output_shapes=None, args=None,
                       output_signature=None):
        """Elements from `generator`, a callable returning an iterable; it is called once per
        iteration (each epoch). output_signature (TensorSpec, or a tuple or dict of them)
        converts and checks each value; output_types/output_shapes are the older spelling.
        The generator runs holding the GIL."""
        if not callable(generator):
            raise TypeError("from_generator: `generator` must be callable (a generator "
                            "function), not an iterator")
        if output_signature is None and output_types is not None:
            output_signature = _signature_from_types(output_types, output_shapes)
        call_args = tuple(args) if args is not None else ()

        if output_signature is None:
            def make():
                return iter(generator(*call_args))
        else:
            conform = _conformer(output_signature)

            def make():
                return (conform(v) for v in generator(*call_args))
        return Dataset(_native.Dataset.from_generator(make))

    @staticmethod
    def list_files(file_pattern, shuffle=None, seed=None):
        """File names matching the glob pattern(s): shuffled by default (sorted with
        shuffle=False), reproducibly with a seed. No match raises FileNotFoundError."""
        patterns = [file_pattern] if isinstance(file_pattern, str) else list(file_pattern)
        return Dataset(_native.Dataset.list_files(
            [str(p) for p in patterns], True if shuffle is None else bool(shuffle),
            None if seed is None else _int(seed, "seed")))

    @staticmethod
    def zip(*datasets):
        """zip(a, b, ...) or zip((a, b, ...)): element i holds the components of every input's
        element i, flattened into one tuple (a dict when every input is named); ends with the
        shortest input."""
        if len(datasets) == 1 and isinstance(datasets[0], (tuple, list)):
            datasets = tuple(datasets[0])
        if not datasets:
            raise ValueError("zip() needs at least one dataset")
        for d in datasets:
            if not isinstance(d, Dataset):
                raise TypeError(f"zip() takes kiln.data.Dataset objects, not {type(d).__name__}")
        return Dataset(_native.Dataset.zip([d._native for d in datasets]),
                       datasets[0]._options)

    # ---- transformations ----

    def map(self, map_func, num_parallel_calls=None, deterministic=None, name=None):
        """map_func: a built-in function (kiln.functions: runs in C++ without the GIL) or any
        Python callable (called as map_func(*components) for a tuple, map_func(value) for one
        value or a dict; the GIL is held only during the call). It returns a value, a tuple or
        a dict of values (NumPy arrays, numbers, bytes)."""
        n, det = _parallelism(num_parallel_calls), _deterministic(deterministic)
        if isinstance(map_func, functions.Function):
            return self._wrap(self._native.map_native(map_func, n, det))
        if not callable(map_func):
            raise TypeError(f"map_func must be callable, not {type(map_func).__name__}")
        return self._wrap(self._native.map_python(map_func, n, det))

    def flat_map(self, map_func, name=None):
        if not callable(map_func):
            raise TypeError("map_func must be callable")
        return self._wrap(self._native.flat_map(_dataset_fn(map_func)))

    def interleave(self, map_func, cycle_length=None, block_length=None,
                   num_parallel_calls=None, deterministic=None, name=None):
        if not callable(map_func):
            raise TypeError("map_func must be callable")
        cycle = AUTOTUNE if cycle_length is None else _int(cycle_length, "cycle_length")
        block = 1 if block_length is None else _int(block_length, "block_length")
        return self._wrap(self._native.interleave(
            _dataset_fn(map_func), cycle, block, _parallelism(num_parallel_calls),
            _deterministic(deterministic)))

    def filter(self, predicate, name=None):
        if not callable(predicate):
            raise TypeError("predicate must be callable")
        return self._wrap(self._native.filter(predicate))

    def batch(self, batch_size, drop_remainder=False, num_parallel_calls=None,
              deterministic=None, name=None):
        return self._wrap(self._native.batch(_int(batch_size, "batch_size"), bool(drop_remainder),
                                             _parallelism(num_parallel_calls),
                                             _deterministic(deterministic)))

    def padded_batch(self, batch_size, padded_shapes=None, padding_values=None,
                     drop_remainder=False, name=None):
        """padded_shapes: None (pad every dimension to the batch's largest), one shape (one
        component) or a tuple of shapes; None or -1 in a shape: the batch's largest.
        padding_values: None (0 / b""), a scalar, or a tuple of scalars."""
        if padded_shapes is None:
            shapes = []
        elif isinstance(padded_shapes, dict):
            raise TypeError("padded_shapes as a dict is not supported; give a tuple in the "
                            "element's component order")
        elif _is_shape(padded_shapes):
            shapes = [_shape_list(padded_shapes)]
        else:
            shapes = [_shape_list(s) for s in padded_shapes]
        if padding_values is None:
            values = []
        elif isinstance(padding_values, tuple):
            values = list(padding_values)
        else:
            values = [padding_values]
        return self._wrap(self._native.padded_batch(_int(batch_size, "batch_size"), shapes, values,
                                                    bool(drop_remainder)))

    def unbatch(self, name=None):
        return self._wrap(self._native.unbatch())

    def shuffle(self, buffer_size, seed=None, reshuffle_each_iteration=None, name=None):
        return self._wrap(self._native.shuffle(
            _int(buffer_size, "buffer_size"), None if seed is None else _int(seed, "seed"),
            True if reshuffle_each_iteration is None else bool(reshuffle_each_iteration)))

    def repeat(self, count=None, name=None):
        return self._wrap(self._native.repeat(_count(count, "count")))

    def take(self, count, name=None):
        return self._wrap(self._native.take(_count(count, "count")))

    def skip(self, count, name=None):
        return self._wrap(self._native.skip(_count(count, "count")))

    def shard(self, num_shards, index, name=None):
        return self._wrap(self._native.shard(_int(num_shards, "num_shards"), _int(index, "index")))

    def cache(self, filename="", name=None):
        return self._wrap(self._native.cache(str(filename)))

    def prefetch(self, buffer_size, name=None):
        return self._wrap(self._native.prefetch(_int(buffer_size, "buffer_size")))

    def concatenate(self, dataset, name=None):
        if not isinstance(dataset, Dataset):
            raise TypeError("concatenate() takes a kiln.data.Dataset")
        return self._wrap(self._native.concatenate(dataset._native))

    def enumerate(self, start=0, name=None):
        """(index, *components): the int64 counter first (an "index" entry for dicts)."""
        return self._wrap(self._native.enumerate(_int(start, "start")))

    def ignore_errors(self, log_warning=False, name=None):
        """Drops elements whose production failed (a Python exception in a map function
        too); the count is in the iterator's stats() (errors_ignored)."""
        return self._wrap(self._native.ignore_errors())

    def apply(self, transformation_func):
        return transformation_func(self)

    def with_options(self, options, name=None):
        if not isinstance(options, Options):
            raise TypeError("with_options() takes a kiln.data.Options")
        return Dataset(self._native, self._options.merge(options))

    def options(self):
        return self._options

    # ---- running ----

    def cardinality(self):
        """The number of elements, INFINITE_CARDINALITY (-1) or UNKNOWN_CARDINALITY (-2)."""
        return self._native.cardinality()

    def __len__(self):
        n = self.cardinality()
        if n == INFINITE_CARDINALITY:
            raise TypeError("The dataset is infinite.")
        if n == UNKNOWN_CARDINALITY:
            raise TypeError("The dataset length is unknown.")
        return n

    def __iter__(self):
        """An iterator of NumPy elements: it.stats(), it.write_trace(path)."""
        return self._native.make_iterator(*self._options._native_args(), False)

    def as_numpy_iterator(self):
        """tf.data's name for iteration yielding NumPy values (what __iter__ already does)."""
        return iter(self)

    def as_torch(self):
        """An iterator yielding torch tensors, shared with Kiln through DLPack (no copy; an
        element that someone else also holds, such as a cached one, is copied). String
        components stay bytes / object arrays."""
        return self._native.make_iterator(*self._options._native_args(), True)

    def __repr__(self):
        return f"<kiln.data.Dataset cardinality={self.cardinality()}>"


def _signature_from_types(output_types, output_shapes):
    if isinstance(output_types, dict):
        shapes = output_shapes or {}
        return {k: TensorSpec(shapes.get(k), t) for k, t in output_types.items()}
    if isinstance(output_types, tuple):
        shapes = output_shapes or (None,) * len(output_types)
        return tuple(TensorSpec(s, t) for s, t in zip(shapes, output_types))
    return TensorSpec(output_shapes, output_types)


def _conformer(signature):
    if isinstance(signature, TensorSpec):
        return signature._conform
    if isinstance(signature, tuple):
        def conform_tuple(value):
            if not isinstance(value, tuple) or len(value) != len(signature):
                raise ValueError(f"generator yielded {type(value).__name__}, expected a tuple of "
                                 f"{len(signature)}")
            return tuple(spec._conform(v) for spec, v in zip(signature, value))
        return conform_tuple
    if isinstance(signature, dict):
        def conform_dict(value):
            if not isinstance(value, dict) or set(value) != set(signature):
                raise ValueError(f"generator yielded {value!r:.80}, expected a dict with keys "
                                 f"{sorted(signature)}")
            return {k: spec._conform(value[k]) for k, spec in signature.items()}
        return conform_dict
    raise TypeError("output_signature must be a TensorSpec, or a tuple or dict of them")


class TFRecordDataset(Dataset):
    """Records of TFRecord files (bytes scalars). compression_type: None/"" , "GZIP" or
    "ZLIB"; num_parallel_reads > 1 (or AUTOTUNE) reads files in parallel."""

    def __init__(self, filenames, compression_type=None, buffer_size=None,
                 num_parallel_reads=None, name=None):
        super().__init__(_native.Dataset.tfrecord(
            _filenames(filenames), compression_type or "",
            256 << 10 if buffer_size is None else _int(buffer_size, "buffer_size"),
            _parallelism(num_parallel_reads)))


class TextLineDataset(Dataset):
    """Lines of text files (bytes scalars, without the line ending)."""

    def __init__(self, filenames, compression_type=None, buffer_size=None,
                 num_parallel_reads=None, name=None):
        if num_parallel_reads not in (None, 0, 1):
            raise ValueError("TextLineDataset: num_parallel_reads is not supported by Kiln's "
                             "text reader; interleave over Dataset.list_files instead")
        super().__init__(_native.Dataset.text_line(_filenames(filenames),
                                                   compression_type or ""))


class CsvDataset(Dataset):
    """tf.data.experimental.CsvDataset: a tuple of typed columns per record.
    record_defaults: per selected column a default value (its type is the column's) or a
    dtype (the column is then required)."""

    def __init__(self, filenames, record_defaults, compression_type=None, buffer_size=None,
                 header=False, field_delim=",", use_quote_delim=True, na_value="",
                 select_cols=None, exclude_cols=None, name=None):
        if exclude_cols is not None:
            raise ValueError("CsvDataset: exclude_cols is not supported; use select_cols")
        defaults = []
        for d in record_defaults:
            # tf.data accepts [] / [value] per column as well as a dtype or a value.
            if isinstance(d, list):
                d = d[0] if d else None
            if d is None:
                raise ValueError("CsvDataset: a record default of [] needs a dtype; give the "
                                 "dtype itself (e.g. 'float32') for a required column")
            if isinstance(d, type) and d is not str and d is not bytes:
                d = np.dtype(d)
            defaults.append(d)
        super().__init__(_native.Dataset.csv(
            _filenames(filenames), defaults, compression_type or "", bool(header),
            str(field_delim), bool(use_quote_delim), str(na_value),
            [int(c) for c in (select_cols or [])]))


__all__ = ["tune_malloc", "AUTOTUNE", "INFINITE_CARDINALITY", "UNKNOWN_CARDINALITY", "Options",
           "AutotuneOptions", "TensorSpec", "Dataset", "TFRecordDataset", "TextLineDataset",
           "CsvDataset", "Iterator", "PipelineStats", "StageStats", "functions"]
