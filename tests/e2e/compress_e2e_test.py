"""`kiln compress --prune_channels` end to end: the real binary on a CNN built here with
python3-onnx (trained-looking random weights), the pruned model checked by onnx.checker and
run again with `kiln run`, and the printed accuracy report compared with that recomputation.

usage: compress_e2e_test.py --kiln PATH/TO/kiln
"""
import argparse
import os
import re
import subprocess
import sys
import tempfile
import unittest

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

KILN = None


def conv_weights(rng, out_c, in_c, k):
    # He-initialised filters with a spread of per-filter scales, as training leaves them, so
    # that the L1 ranking is not a coin toss.
    w = rng.normal(0, np.sqrt(2.0 / (in_c * k * k)), (out_c, in_c, k, k))
    return (w * rng.uniform(0.2, 1.5, (out_c, 1, 1, 1))).astype(np.float32)


def build_model(path):
    """x[N,3,16,16] -> conv1 3->16 -> Relu -> MaxPool -> depthwise 16 -> Relu -> conv2 16->32
    -> BN -> Relu -> {conv3 32->32 1x1, residual} -> Add -> Relu -> GAP -> Flatten -> Gemm."""
    rng = np.random.default_rng(7)
    inits = []

    def init(name, array):
        inits.append(numpy_helper.from_array(np.asarray(array, np.float32), name))
        return name

    nodes = [
        helper.make_node("Conv", ["x", init("w1", conv_weights(rng, 16, 3, 3)),
                                  init("b1", rng.normal(0, 0.1, 16))], ["c1"],
                         name="conv1", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"]),
        helper.make_node("MaxPool", ["r1"], ["p1"], kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Conv", ["p1", init("wd", conv_weights(rng, 16, 1, 3)),
                                  init("bd", rng.normal(0, 0.1, 16))], ["d1"],
                         name="depthwise", group=16, pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["d1"], ["rd"]),
        helper.make_node("Conv", ["rd", init("w2", conv_weights(rng, 32, 16, 3))], ["c2"],
                         name="conv2", pads=[1, 1, 1, 1]),
        helper.make_node("BatchNormalization",
                         ["c2", init("g2", rng.uniform(0.5, 1.5, 32)),
                          init("s2", rng.normal(0, 0.1, 32)), init("m2", rng.normal(0, 0.1, 32)),
                          init("v2", rng.uniform(0.5, 2, 32))], ["n2"], name="bn2"),
        helper.make_node("Relu", ["n2"], ["r2"]),
        helper.make_node("Conv", ["r2", init("w3", conv_weights(rng, 32, 32, 1))], ["c3"],
                         name="conv3"),
        helper.make_node("Add", ["c3", "r2"], ["a3"], name="residual"),
        helper.make_node("Relu", ["a3"], ["r3"]),
        helper.make_node("GlobalAveragePool", ["r3"], ["gp"]),
        helper.make_node("Flatten", ["gp"], ["fl"]),
        helper.make_node("Gemm", ["fl", init("fc", rng.normal(0, 0.3, (32, 10))),
                                  init("fcb", rng.normal(0, 0.1, 10))], ["logits"], name="fc"),
    ]
    graph = helper.make_graph(
        nodes, "small_cnn",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, 16, 16])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", 10])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    onnx.checker.check_model(model)
    onnx.save(model, path)


def parse_report(stdout):
    m = re.search(r"output 'logits': max abs error ([0-9.eE+-]+), max rel error ([0-9.eE+-]+), "
                  r"top-1 agreement (\d+)/(\d+)", stdout)
    assert m, stdout
    return float(m.group(1)), float(m.group(2)), int(m.group(3)), int(m.group(4))


class CompressTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="kiln_compress_")
        self.model = os.path.join(self.dir, "cnn.onnx")
        build_model(self.model)
        self.calib = os.path.join(self.dir, "calib")
        os.makedirs(self.calib)
        self.x = np.random.default_rng(3).normal(0, 1, (40, 3, 16, 16)).astype(np.float32)
        np.save(os.path.join(self.calib, "x.npy"), self.x)

    def kiln(self, *args, check=True):
        p = subprocess.run([KILN, *args], capture_output=True, text=True, timeout=120)
        if check:
            self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        return p

    def run_model(self, model, name):
        out = os.path.join(self.dir, name)
        os.makedirs(out, exist_ok=True)
        self.kiln("run", model, "--input", "x=" + os.path.join(self.calib, "x.npy"),
                  "--output_dir", out)
        return np.load(os.path.join(out, "logits.npy"))

    def test_prunes_writes_a_smaller_valid_model_and_reports_what_a_rerun_measures(self):
        pruned_path = os.path.join(self.dir, "pruned.onnx")
        p = self.kiln("compress", self.model, "--prune_channels=0.25", "--calibration_inputs",
                      self.calib, "--output", pruned_path, "--batch", "40")
        out = p.stdout
        # conv1 (through MaxPool and the depthwise conv into conv2) loses floor(0.25 * 16);
        # conv2 and conv3 reach the residual Add and stay whole.
        self.assertIn("conv1: 16 -> 12 channels", out)
        self.assertRegex(out, r"conv2: kept whole: its channels reach Add 'residual'")
        self.assertRegex(out, r"conv3: kept whole: its channels reach Add 'residual'")
        self.assertRegex(out, r"depthwise: kept whole: grouped convolution")
        self.assertLess(os.path.getsize(pruned_path), os.path.getsize(self.model))

        pruned = onnx.load(pruned_path)
        onnx.checker.check_model(pruned, full_check=True)
        inits = {t.name: numpy_helper.to_array(t) for t in pruned.graph.initializer}
        node = {n.name: n for n in pruned.graph.node}
        self.assertEqual(inits[node["conv1"].input[1]].shape, (12, 3, 3, 3))
        self.assertEqual(inits[node["conv1"].input[2]].shape, (12,))
        self.assertEqual(inits[node["depthwise"].input[1]].shape, (12, 1, 3, 3))
        self.assertEqual([a.i for a in node["depthwise"].attribute if a.name == "group"], [12])
        self.assertEqual(inits[node["conv2"].input[1]].shape, (32, 12, 3, 3))
        # The filters that went are the four of smallest L1 norm.
        original = {t.name: numpy_helper.to_array(t) for t in onnx.load(self.model).graph.initializer}
        l1 = np.abs(original["w1"]).sum(axis=(1, 2, 3))
        kept = np.sort(np.argsort(l1, kind="stable")[4:])
        np.testing.assert_array_equal(inits[node["conv1"].input[1]], original["w1"][kept])
        np.testing.assert_array_equal(inits[node["conv2"].input[1]], original["w2"][:, kept])

        # The report against a recomputation: both models run again by `kiln run`.
        reported_abs, reported_rel, agree, examples = parse_report(out)
        ref = self.run_model(self.model, "original")
        new = self.run_model(pruned_path, "pruned")
        max_abs = float(np.max(np.abs(new - ref)))
        max_rel = max_abs / float(np.max(np.abs(ref)))
        top1 = int(np.sum(np.argmax(ref, 1) == np.argmax(new, 1)))
        self.assertEqual(examples, 40)
        self.assertGreater(max_abs, 0)  # lossy: the removed filters were not zero
        self.assertAlmostEqual(reported_abs, max_abs, delta=1e-5 * max_abs + 1e-7)
        self.assertAlmostEqual(reported_rel, max_rel, delta=1e-5 * max_rel + 1e-7)
        self.assertEqual(agree, top1)

    def test_the_last_conv_of_a_classifier_goes_with_the_head_weights(self):
        # conv 3->8 -> Relu -> GlobalAveragePool -> Flatten -> Gemm(transB) 8->5: the pooled
        # channels are the Gemm's input columns, so the Gemm's B loses its matching columns.
        rng = np.random.default_rng(5)
        w = conv_weights(rng, 8, 3, 3)
        fc = rng.normal(0, 0.3, (5, 8)).astype(np.float32)
        graph = helper.make_graph(
            [helper.make_node("Conv", ["x", "w"], ["c"], name="conv", pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["r"]),
             helper.make_node("GlobalAveragePool", ["r"], ["g"]),
             helper.make_node("Flatten", ["g"], ["f"]),
             helper.make_node("Gemm", ["f", "fc"], ["logits"], name="fc", transB=1)],
            "head", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, 16, 16])],
            [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", 5])],
            [numpy_helper.from_array(w, "w"), numpy_helper.from_array(fc, "fc")])
        model = os.path.join(self.dir, "head.onnx")
        onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), model)
        pruned_path = os.path.join(self.dir, "head_pruned.onnx")
        p = self.kiln("compress", model, "--prune_channels=0.5", "--calibration_inputs",
                      self.calib, "--output", pruned_path)
        self.assertIn("conv: 8 -> 4 channels", p.stdout)
        pruned = onnx.load(pruned_path)
        onnx.checker.check_model(pruned, full_check=True)
        inits = {t.name: numpy_helper.to_array(t) for t in pruned.graph.initializer}
        node = {n.name: n for n in pruned.graph.node}
        kept = np.sort(np.argsort(np.abs(w).sum(axis=(1, 2, 3)), kind="stable")[4:])
        np.testing.assert_array_equal(inits[node["fc"].input[1]], fc[:, kept])
        # The pruned model is the original without those channels: recompute it in numpy.
        x = self.x[:2]
        def forward(weights, head):
            n, _, h, wd = x.shape
            xp = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
            out = np.zeros((n, weights.shape[0], h, wd), np.float64)
            for i in range(3):
                for j in range(3):
                    out += np.einsum("nchw,oc->nohw", xp[:, :, i:i + h, j:j + wd],
                                     weights[:, :, i, j])
            return np.maximum(out, 0).mean(axis=(2, 3)) @ head.T
        np.save(os.path.join(self.calib, "x.npy"), x)
        got = self.run_model(pruned_path, "head_pruned")
        np.testing.assert_allclose(got, forward(w[kept], fc[:, kept]), rtol=1e-4, atol=1e-5)

    def test_fraction_zero_changes_nothing(self):
        pruned_path = os.path.join(self.dir, "same.onnx")
        p = self.kiln("compress", self.model, "--prune_channels=0", "--calibration_inputs",
                      self.calib, "--output", pruned_path)
        abs_err, rel_err, agree, examples = parse_report(p.stdout)
        self.assertEqual((abs_err, rel_err, agree, examples), (0.0, 0.0, 40, 40))

    def test_bad_flags_are_errors(self):
        for args in (["--prune_channels=1"], ["--prune_channels=0.5"],
                     ["--prune_channels=0.5", "--calibration_inputs", self.calib]):
            p = self.kiln("compress", self.model, *args, check=False)
            self.assertEqual(p.returncode, 2, p.stderr)
        p = self.kiln("compress", self.model, "--prune_channels=0.5", "--calibration_inputs",
                      os.path.join(self.dir, "missing"), "--output",
                      os.path.join(self.dir, "o.onnx"), check=False)
        self.assertEqual(p.returncode, 1)
        self.assertIn("input 'x'", p.stderr)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--kiln", required=True)
    args, rest = parser.parse_known_args()
    KILN = args.kiln
    unittest.main(argv=[sys.argv[0]] + rest)
