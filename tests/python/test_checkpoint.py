"""Iterator checkpoints from Python: get_state() bytes, set_state() in a new iterator (here or in
another process) continues with exactly the elements the first would have produced."""

import os
import subprocess
import sys

import numpy as np
import pytest

import kiln
from kiln import functions as F
from kiln.data import Dataset

import records


def pipeline():
    # Seeded shuffle, parallel deterministic Python map, batch, repeat: every stage's position
    # and seed must be in the state.
    return (Dataset.range(200).shuffle(50, seed=3)
            .map(lambda x: x * 3, num_parallel_calls=2)
            .batch(8).repeat(2))


def as_lists(it):
    return [b.tolist() for b in it]


def test_restore_continues_exactly_in_this_process():
    it = iter(pipeline())
    for _ in range(17):
        next(it)
    state = it.get_state()
    assert isinstance(state, bytes) and len(state) < 4096
    rest = as_lists(it)
    assert len(rest) == 50 - 17
    assert as_lists(iter(pipeline()).set_state(state)) == rest


def test_restore_continues_exactly_in_another_process(tmp_path):
    it = iter(pipeline())
    for _ in range(30):
        next(it)
    state_path = tmp_path / "state"
    state_path.write_bytes(it.get_state())
    rest = as_lists(it)
    code = ("import sys; sys.path.insert(0, %r); import test_checkpoint as t; "
            "state = open(%r, 'rb').read(); "
            "print(t.as_lists(iter(t.pipeline()).set_state(state)))"
            % (os.path.dirname(__file__), str(state_path)))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == str(rest)


def test_image_style_pipeline_state_is_small_with_a_large_shuffle_buffer(tmp_path):
    path = str(tmp_path / "r.tfrecord")
    records.write_tfrecord(path, [records.example({"label": [i]}) for i in range(300)])
    spec = {"label": F.FixedLenFeature([], np.int64)}
    ds = (Dataset.list_files(path, shuffle=False)
          .interleave(kiln.data.TFRecordDataset, cycle_length=2, num_parallel_calls=2)
          .map(F.parse_example(spec), num_parallel_calls=2)
          .shuffle(10000, seed=7).batch(16).prefetch(2))
    it = iter(ds)
    for _ in range(5):
        next(it)
    state = it.get_state()
    assert len(state) <= 4096
    rest = [b["label"].tolist() for b in it]
    assert [b["label"].tolist() for b in iter(ds).set_state(state)] == rest


def test_state_errors():
    with pytest.raises(kiln.FailedPreconditionError):
        iter(Dataset.range(10).shuffle(5)).get_state()  # no seed: not reproducible
    it = iter(pipeline())
    next(it)
    state = it.get_state()
    with pytest.raises(kiln.FailedPreconditionError):
        it.set_state(state)  # only a new iterator can be moved
    with pytest.raises(ValueError):
        iter(Dataset.range(10).batch(3)).set_state(state)  # another pipeline's state
    with pytest.raises(OSError):
        iter(pipeline()).set_state(state[:-3])  # truncated
