"""kiln.runtime on the example models of the repository (ONNX and SavedModel)."""

import os
import threading

import numpy as np
import pytest

import kiln

ROOT = os.environ.get("KILN_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))
ONNX = os.path.join(ROOT, "examples/models/half_plus_two/1/model.onnx")
SAVED_MODEL_BASE = os.path.join(ROOT, "examples/models/half_plus_two_savedmodel")


def test_onnx_model_runs_and_describes_its_signature():
    model = kiln.runtime.Model(ONNX)
    assert model.platform == "onnx"
    assert list(model.signatures) == ["serving_default"]
    sig = model.signatures["serving_default"]
    assert sig.input_keys == ["x"] and sig.output_keys == ["y"]
    assert sig.inputs["x"].dtype == "float32" and sig.inputs["x"].shape == (None, 1)
    x = np.array([[1.0], [2.0], [-4.0]], np.float32)
    out = model.run({"x": x})
    assert list(out) == ["y"]
    np.testing.assert_allclose(out["y"], x * 0.5 + 2)
    assert out["y"].flags.writeable  # a fresh output belongs to the caller
    assert model.run({"x": x}, signature="serving_default", output_keys=["y"])["y"].shape == (3, 1)


def test_saved_model_base_path_and_options():
    model = kiln.runtime.Model(SAVED_MODEL_BASE,
                               kiln.runtime.ModelOptions(disable_optimizer=True,
                                                         intra_op_threads=1))
    assert model.platform == "tensorflow"
    key = next(iter(model.signatures))
    sig = model.signatures[key]
    x = np.array([1.0, 3.0], np.float32).reshape([-1] + [1] * (len(sig.inputs[sig.input_keys[0]]
                                                                    .shape or [0]) - 1))
    out = model.run({sig.input_keys[0]: x}, signature=key)
    np.testing.assert_allclose(next(iter(out.values())).reshape(-1), [2.5, 3.5])


def test_non_contiguous_and_list_inputs_are_accepted():
    model = kiln.runtime.Model(ONNX)
    wide = np.arange(8, dtype=np.float32).reshape(4, 2)
    column = wide[:, 1:]  # a strided view: copied, not viewed
    np.testing.assert_allclose(model.run({"x": column})["y"], column * 0.5 + 2)
    np.testing.assert_allclose(model.run({"x": [[2.0]]})["y"], [[3.0]])


def test_errors_are_python_errors():
    with pytest.raises(FileNotFoundError):
        kiln.runtime.Model("/nonexistent/model.onnx")
    model = kiln.runtime.Model(ONNX)
    with pytest.raises(ValueError, match="needs input 'x'"):
        model.run({})
    with pytest.raises(ValueError, match="has no input 'z'"):
        model.run({"x": np.zeros((1, 1), np.float32), "z": 1})
    with pytest.raises(ValueError):
        model.run({"x": np.zeros((1, 1), np.float32)}, signature="nope")
    with pytest.raises(ValueError, match="x"):
        model.run({"x": np.zeros((1, 1), np.int64)})  # wrong dtype, named
    with pytest.raises(ValueError):
        model.run({"x": np.zeros((1, 1), np.float32)}, output_keys=["q"])
    with pytest.raises(TypeError):
        kiln.runtime.Model(ONNX, threads=2)
    with pytest.raises(TypeError):
        model.run({"x": np.zeros((1, 1), np.complex64)})


def test_corrupt_model_file_is_an_os_error(tmp_path):
    path = tmp_path / "model.onnx"
    path.write_bytes(b"\x08\x07\x12\xff\xff\xff\xff garbage")
    with pytest.raises(OSError) as info:
        kiln.runtime.Model(str(path))
    assert isinstance(info.value, kiln.Error) and str(info.value)


def test_concurrent_runs_from_threads():
    model = kiln.runtime.Model(ONNX)
    errors = []

    def work(seed):
        rng = np.random.default_rng(seed)
        for _ in range(50):
            x = rng.random((5, 1), dtype=np.float32)
            y = model.run({"x": x})["y"]
            if not np.allclose(y, x * 0.5 + 2):
                errors.append(seed)
    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
