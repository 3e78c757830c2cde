"""kiln.data against tf.data's documented behaviour, on small real files."""

import os
import signal
import subprocess
import sys
import threading
import time
import traceback

import numpy as np
import pytest

import kiln
from kiln.data import AUTOTUNE, Dataset
from kiln import functions as F

import records


def values(ds):
    return [x.item() if isinstance(x, np.ndarray) and x.ndim == 0 else x for x in ds]


# ---- sources ----

def test_range_yields_int64_scalars_as_tf_data():
    out = list(Dataset.range(5))
    assert [int(x) for x in out] == [0, 1, 2, 3, 4]
    assert all(x.dtype == np.int64 and x.shape == () for x in out)
    assert values(Dataset.range(2, 10, 3)) == [2, 5, 8]
    assert values(Dataset.range(5, 0, -2)) == [5, 3, 1]
    assert values(Dataset.range(3, dtype=np.int32)) == [0, 1, 2]
    assert list(Dataset.range(3, dtype=np.int32))[0].dtype == np.int32


def test_from_tensor_slices_tuple_dict_and_python_lists():
    x = np.arange(6, dtype=np.float32).reshape(3, 2)
    y = np.array([b"a", b"b", b"c"], dtype=object)
    out = list(Dataset.from_tensor_slices((x, y)))
    assert len(out) == 3
    np.testing.assert_array_equal(out[1][0], [2, 3])
    assert out[1][1] == b"b"
    d = list(Dataset.from_tensor_slices({"x": x, "label": np.array([0, 1, 2])}))
    assert set(d[2]) == {"x", "label"} and d[2]["label"] == 2
    # Python numbers take tf.constant's dtypes: int32 and float32.
    assert list(Dataset.from_tensor_slices([1, 2]))[0].dtype == np.int32
    assert list(Dataset.from_tensor_slices([1.5, 2.5]))[0].dtype == np.float32
    assert list(Dataset.from_tensor_slices(["é", "b"]))[0] == "é".encode()


def test_from_tensor_slices_is_a_snapshot():
    x = np.arange(4)
    ds = Dataset.from_tensor_slices(x)
    x[:] = 100
    assert values(ds) == [0, 1, 2, 3]


def test_from_tensors_one_element():
    out = list(Dataset.from_tensors(np.ones((2, 3), np.float32)))
    assert len(out) == 1 and out[0].shape == (2, 3)


def test_from_generator_called_per_epoch_and_conformed():
    calls = []

    def gen(n):
        calls.append(n)
        for i in range(n):
            yield i, [float(i)] * 2

    sig = (kiln.data.TensorSpec([], np.int64), kiln.data.TensorSpec([2], np.float32))
    ds = Dataset.from_generator(gen, args=(3,), output_signature=sig).repeat(2)
    out = list(ds)
    assert len(out) == 6 and len(calls) == 2
    assert out[2][0].dtype == np.int64 and out[2][1].dtype == np.float32
    np.testing.assert_array_equal(out[2][1], [2.0, 2.0])
    bad = Dataset.from_generator(lambda: iter([np.zeros(3)]),
                                 output_signature=kiln.data.TensorSpec([2], np.float32))
    with pytest.raises(ValueError, match="does not match"):
        list(bad)
    with pytest.raises(TypeError):
        Dataset.from_generator(iter([1, 2]))


def test_text_line_and_list_files(tmp_path):
    for name, lines in [("b.txt", ["3", "4"]), ("a.txt", ["1", "2"])]:
        (tmp_path / name).write_text("\n".join(lines) + "\n")
    files = values(Dataset.list_files(str(tmp_path / "*.txt"), shuffle=False))
    assert files == [str(tmp_path / "a.txt").encode(), str(tmp_path / "b.txt").encode()]
    ds = Dataset.list_files(str(tmp_path / "*.txt"), shuffle=False).flat_map(
        lambda f: kiln.data.TextLineDataset(f.decode()))
    assert values(ds) == [b"1", b"2", b"3", b"4"]
    seeded = [values(Dataset.list_files(str(tmp_path / "*.txt"), seed=3)) for _ in range(2)]
    assert seeded[0] == seeded[1] and sorted(seeded[0]) == files
    with pytest.raises(FileNotFoundError):
        Dataset.list_files(str(tmp_path / "*.none"))


def test_csv_dataset(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text("a,b,c\n1,2.5,x\n3,,y\n")
    ds = kiln.data.CsvDataset(str(path), [np.int32, 0.5, str], header=True)
    out = list(ds)
    assert len(out) == 2
    assert out[0][0] == 1 and out[0][0].dtype == np.int32
    assert out[1][1] == np.float32(0.5)  # the default for an empty field
    assert out[1][2] == b"y"


def test_tfrecord_parse_example_and_corrupt_file(tmp_path):
    path = str(tmp_path / "r.tfrecord")
    records.write_tfrecord(path, [records.example({"v": [i, i + 1], "s": [b"x%d" % i]})
                                  for i in range(5)])
    spec = {"v": F.FixedLenFeature([2], np.int64), "s": F.FixedLenFeature([], "string")}
    out = list(kiln.data.TFRecordDataset(path).map(F.parse_example(spec)))
    assert len(out) == 5
    np.testing.assert_array_equal(out[3]["v"], [3, 4])
    assert out[3]["s"] == b"x3"
    batched = list(kiln.data.TFRecordDataset([path]).batch(2).map(F.parse_example(spec)))
    assert batched[0]["v"].shape == (2, 2)

    data = bytearray(open(path, "rb").read())
    data[20] ^= 0xFF  # inside the first record's payload: its CRC no longer matches
    bad = str(tmp_path / "bad.tfrecord")
    open(bad, "wb").write(bytes(data))
    with pytest.raises(OSError) as info:
        list(kiln.data.TFRecordDataset(bad))
    assert isinstance(info.value, kiln.Error) and "bad.tfrecord" in str(info.value)
    with pytest.raises(OSError):
        list(kiln.data.TFRecordDataset(str(tmp_path / "missing.tfrecord")))


# ---- transformations ----

def test_map_python_spreads_tuples_and_passes_dicts():
    ds = Dataset.from_tensor_slices((np.arange(3), np.arange(3) * 10))
    assert [tuple(map(int, e)) for e in ds.map(lambda a, b: (b, a))] == [(0, 0), (10, 1), (20, 2)]
    d = Dataset.from_tensor_slices({"a": np.arange(3)}).map(lambda e: {"b": e["a"] + 1})
    assert [int(e["b"]) for e in d] == [1, 2, 3]
    par = Dataset.range(100).map(lambda x: x * 2, num_parallel_calls=4)
    assert values(par) == list(range(0, 200, 2))  # deterministic order by default
    assert values(Dataset.range(3).map(lambda x: np.float64(x) / 2)) == [0.0, 0.5, 1.0]


def test_map_python_function_that_returns_its_input_is_not_copied():
    seen = []

    def identity(x):
        seen.append(x.__array_interface__["data"][0])
        return x
    out = list(Dataset.from_tensors(np.zeros(1000, np.float32)).map(identity))
    assert out[0].__array_interface__["data"][0] == seen[0]


def test_builtin_functions_cast_one_hot_chain():
    ds = Dataset.from_tensor_slices(np.array([0, 2, 1])).map(
        F.chain(F.cast(0, np.int32), F.one_hot(0, 3)), num_parallel_calls=AUTOTUNE)
    out = np.stack(list(ds))
    np.testing.assert_array_equal(out, np.eye(3, dtype=np.float32)[[0, 2, 1]])
    with pytest.raises(TypeError):
        F.chain(lambda x: x)
    with pytest.raises(ValueError):
        F.normalize(0, [0.5], [0.0])


def test_decode_jpeg_resize_normalize_match_pillow_and_numpy():
    rng = np.random.default_rng(0)
    image = (rng.random((20, 30, 3)) * 255).astype(np.uint8)
    jpeg = records.jpeg_bytes(image)
    from PIL import Image
    import io
    reference = np.asarray(Image.open(io.BytesIO(jpeg)).convert("RGB"))
    decoded = list(Dataset.from_tensors(jpeg).map(F.decode_jpeg(0, channels=3,
                                                                dct_method="INTEGER_ACCURATE")))[0]
    assert decoded.dtype == np.uint8 and decoded.shape == (20, 30, 3)
    assert np.abs(decoded.astype(int) - reference.astype(int)).max() <= 1
    # Same size: bilinear resize is the identity; normalize is (x*scale - mean) / std.
    ds = Dataset.from_tensors(jpeg).map(F.chain(F.decode_jpeg(channels=3), F.resize(0, (20, 30)),
                                                F.normalize(0, [1, 2, 3], [2, 2, 2], 0.5)))
    out = list(ds)[0]
    fast = list(Dataset.from_tensors(jpeg).map(F.decode_jpeg(channels=3)))[0]
    np.testing.assert_allclose(out, (fast * 0.5 - np.array([1, 2, 3])) / 2, rtol=1e-6)
    with pytest.raises(ValueError):
        list(Dataset.from_tensors(b"not a jpeg").map(F.decode_jpeg()))


def test_decode_png_is_lossless():
    import io
    from PIL import Image
    image = np.arange(5 * 7 * 3, dtype=np.uint8).reshape(5, 7, 3)
    png = io.BytesIO()
    Image.fromarray(image).save(png, format="PNG")
    ds = Dataset.from_tensor_slices({"png": np.array([png.getvalue()] * 2, object)}).batch(2)
    out = list(ds.map(F.decode_png("png", channels=3)))[0]["png"]
    np.testing.assert_array_equal(out, np.stack([image, image]))


def test_filter_flat_map_interleave_order():
    assert values(Dataset.range(10).filter(lambda x: x % 3 == 0)) == [0, 3, 6, 9]
    ds = Dataset.range(3).flat_map(lambda x: Dataset.range(int(x)))
    assert values(ds) == [0, 0, 1]
    # tf.data's documented interleave order (cycle_length=2, block_length=2).
    ds = Dataset.range(1, 6).interleave(lambda x: Dataset.from_tensors(x).repeat(6),
                                        cycle_length=2, block_length=2)
    expected = [1, 1, 2, 2, 1, 1, 2, 2, 1, 1, 2, 2, 3, 3, 4, 4, 3, 3, 4, 4, 3, 3, 4, 4,
                5, 5, 5, 5, 5, 5]
    assert values(ds) == expected
    par = Dataset.range(1, 6).interleave(lambda x: Dataset.from_tensors(x).repeat(6),
                                         cycle_length=2, block_length=2, num_parallel_calls=2)
    assert values(par) == expected
    with pytest.raises(TypeError, match="must return a kiln.data.Dataset"):
        list(Dataset.range(2).flat_map(lambda x: x))


def test_batch_padded_batch_unbatch():
    b = list(Dataset.range(7).batch(3))
    assert [x.tolist() for x in b] == [[0, 1, 2], [3, 4, 5], [6]]
    assert len(list(Dataset.range(7).batch(3, drop_remainder=True))) == 2
    par = list(Dataset.range(7).batch(3, num_parallel_calls=2))
    assert [x.tolist() for x in par] == [[0, 1, 2], [3, 4, 5], [6]]
    ragged = Dataset.range(1, 4).map(lambda x: np.arange(x))
    pb = list(ragged.padded_batch(3))
    np.testing.assert_array_equal(pb[0], [[0, 0, 0], [0, 1, 0], [0, 1, 2]])
    pb = list(ragged.padded_batch(2, padded_shapes=[4], padding_values=np.int64(-1)))
    np.testing.assert_array_equal(pb[0], [[0, -1, -1, -1], [0, 1, -1, -1]])
    assert values(Dataset.range(6).batch(4).unbatch()) == list(range(6))


def test_shuffle_seeded_is_a_reproducible_permutation():
    a = values(Dataset.range(100).shuffle(20, seed=7))
    b = values(Dataset.range(100).shuffle(20, seed=7))
    assert a == b and sorted(a) == list(range(100)) and a != list(range(100))
    epochs = values(Dataset.range(10).shuffle(10, seed=1).repeat(2))
    assert epochs[:10] != epochs[10:]  # reshuffled each iteration
    fixed = values(Dataset.range(10).shuffle(10, seed=1, reshuffle_each_iteration=False).repeat(2))
    assert fixed[:10] == fixed[10:]


def test_repeat_take_skip_shard_concatenate_enumerate_zip():
    assert values(Dataset.range(3).repeat(2)) == [0, 1, 2, 0, 1, 2]
    assert values(Dataset.range(3).repeat().take(5)) == [0, 1, 2, 0, 1]
    assert values(Dataset.range(5).skip(3)) == [3, 4]
    assert values(Dataset.range(10).shard(3, 1)) == [1, 4, 7]
    assert values(Dataset.range(2).concatenate(Dataset.range(5, 7))) == [0, 1, 5, 6]
    e = [tuple(map(int, x)) for x in Dataset.range(10, 12).enumerate(start=5)]
    assert e == [(5, 10), (6, 11)]
    z = [tuple(map(int, x)) for x in Dataset.zip(Dataset.range(3), Dataset.range(10, 20))]
    assert z == [(0, 10), (1, 11), (2, 12)]
    z2 = [tuple(map(int, x)) for x in Dataset.zip((Dataset.range(2), Dataset.range(5)))]
    assert z2 == [(0, 0), (1, 1)]


def test_cache_in_memory_and_file(tmp_path):
    calls = []

    def count(x):
        calls.append(int(x))
        return x
    ds = Dataset.range(4).map(count).cache()
    assert values(ds) == [0, 1, 2, 3] and values(ds) == [0, 1, 2, 3]
    assert len(calls) == 4  # the second epoch came from the cache
    cached = list(ds)
    assert not cached[0].flags.writeable  # writing must not change what later epochs see
    path = str(tmp_path / "cache")
    assert values(Dataset.range(3).cache(path)) == [0, 1, 2]
    assert values(Dataset.range(3).map(lambda x: x + 100).cache(path)) == [0, 1, 2]


def test_prefetch_cardinality_len():
    assert values(Dataset.range(5).prefetch(AUTOTUNE)) == list(range(5))
    assert Dataset.range(5).cardinality() == 5 and len(Dataset.range(5).batch(2)) == 3
    assert Dataset.range(5).repeat().cardinality() == kiln.data.INFINITE_CARDINALITY
    assert Dataset.range(5).filter(lambda x: True).cardinality() == kiln.data.UNKNOWN_CARDINALITY
    with pytest.raises(TypeError):
        len(Dataset.range(5).repeat())


# ---- NumPy and torch without copies ----

def test_arrays_view_kiln_memory_and_fresh_ones_are_writable():
    batch = list(Dataset.range(8).map(lambda x: np.full(4, x, np.float32)).batch(4))[0]
    assert not batch.flags.owndata and type(batch.base).__name__ == "PyCapsule"
    assert batch.flags.writeable and batch.flags.c_contiguous
    batch[0, 0] = -1  # a fresh batch belongs to the caller
    src = list(Dataset.from_tensor_slices(np.arange(4)))
    assert not src[0].flags.writeable  # a view of the dataset's own snapshot


def test_as_torch_through_dlpack():
    torch = pytest.importorskip("torch")
    ds = Dataset.from_tensor_slices({"x": np.arange(12, dtype=np.float32).reshape(6, 2),
                                     "m": np.array([True, False] * 3)}).batch(3)
    out = list(ds.as_torch())
    assert isinstance(out[0]["x"], torch.Tensor) and out[0]["x"].dtype == torch.float32
    assert out[1]["x"].tolist() == [[6, 7], [8, 9], [10, 11]]
    assert out[0]["m"].dtype == torch.bool and out[0]["m"].tolist() == [True, False, True]
    # A cached element is copied for torch (DLPack cannot mark it read-only).
    cached = Dataset.from_tensors(np.zeros(3, np.float32)).cache()
    list(cached)
    t = next(iter(cached.as_torch()))
    t += 1
    assert values(cached)[0].tolist() == [0, 0, 0]


# ---- errors ----

def test_bad_arguments_raise_value_and_type_errors():
    with pytest.raises(ValueError):
        Dataset.range(3).batch(0)
    with pytest.raises(TypeError):
        Dataset.range(3).batch("two")
    with pytest.raises(TypeError):
        Dataset.range(3).map(3)
    with pytest.raises(ValueError):
        Dataset.range(3).shard(2, 5)
    with pytest.raises(ValueError):
        Dataset.range(3).shuffle(0)
    assert issubclass(kiln.InvalidArgumentError, ValueError)
    assert issubclass(kiln.InvalidArgumentError, kiln.Error)
    with pytest.raises(kiln.Error) as info:
        Dataset.range(3).batch(-3)
    assert info.value.code == "INVALID_ARGUMENT"


class Boom(Exception):
    pass


def failing(x):
    if x == 2:
        raise Boom(f"no {int(x)}")
    return x


@pytest.mark.parametrize("parallel", [None, 2])
def test_python_exception_reaches_the_consumer_with_its_traceback(parallel):
    it = iter(Dataset.range(5).map(failing, num_parallel_calls=parallel))
    assert int(next(it)) == 0 and int(next(it)) == 1
    with pytest.raises(Boom, match="no 2") as info:
        next(it)
    frames = [f.name for f in traceback.extract_tb(info.value.__traceback__)]
    assert "failing" in frames
    assert int(next(it)) == 3  # iteration goes on after an element's error, as in tf.data


def test_ignore_errors_skips_and_counts():
    it = iter(Dataset.range(6).map(failing).ignore_errors())
    assert [int(x) for x in it] == [0, 1, 3, 4, 5]
    stats = it.stats()
    assert sum(s.errors_ignored for s in stats.stages) == 1
    assert "IgnoreErrors" in str(stats)


def test_ctrl_c_while_the_pipeline_is_stalled_raises_keyboard_interrupt():
    def slow(x):
        time.sleep(0.05 if x == 0 else 2)
        return x
    it = iter(Dataset.range(3).map(slow))
    assert int(next(it)) == 0
    timer = threading.Timer(0.2, os.kill, (os.getpid(), signal.SIGINT))
    timer.start()
    start = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        next(it)
    assert time.monotonic() - start < 1.5  # not after the 2 s element
    del it  # the interrupted GetNext finishes on its own thread


def test_exit_while_a_pipeline_thread_runs_a_python_function():
    # The interpreter exits while a pipeline thread is inside a Python map function (the
    # request that Ctrl-C interrupted goes on): the exit waits for the call in flight and
    # refuses new ones. Before, the thread was ended inside Kiln's frames when it took the GIL
    # back during finalization, and the process aborted after its last line (3 runs in 5 with
    # torch imported, whose teardown gives the thread time to wake).
    pytest.importorskip("torch")
    code = "\n".join([
        "import os, signal, threading, time",
        "import torch",
        "from kiln.data import Dataset",
        "def slow(x):",
        "    time.sleep(0.05 if x == 0 else 0.3)",
        "    return x",
        "stalled = iter(Dataset.range(3).map(slow))",
        "next(stalled)",
        "threading.Timer(0.1, os.kill, (os.getpid(), signal.SIGINT)).start()",
        "try:",
        "    next(stalled)",
        "except KeyboardInterrupt:",
        "    pass",
        "del stalled",
        "print('done', flush=True)",
    ])
    for _ in range(5):
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                             timeout=60)
        assert out.returncode == 0, out.stderr
        assert out.stdout.strip() == "done"


# ---- options and stats ----

def test_options_and_trace(tmp_path):
    trace = str(tmp_path / "trace.json")
    options = kiln.data.Options()
    options.autotune.cpu_budget = 1
    options.trace_path = trace
    ds = Dataset.range(50).map(lambda x: x + 1, num_parallel_calls=AUTOTUNE).with_options(options)
    assert ds.options().autotune.cpu_budget == 1
    it = iter(ds)
    assert len(list(it)) == 50
    stats = it.stats()
    assert stats.stages and stats.wall_ns > 0
    del it
    assert os.path.getsize(trace) > 0
    with pytest.raises(ValueError):
        iter(Dataset.range(3).with_options(kiln.data.Options(cpu_budget=-1)))


def test_tune_malloc_rejects_bad_values():
    kiln.data.tune_malloc()  # what bench/python/images_bench.py measures with
    assert values(Dataset.range(3).map(lambda x: np.zeros(1 << 18) + x)) is not None
    with pytest.raises(ValueError):
        kiln.data.tune_malloc(mmap_threshold=-1)
    with pytest.raises(TypeError):
        kiln.data.tune_malloc(mmap_threshold="big")
