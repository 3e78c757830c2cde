"""The status page at / and /status on the REST port, in headless Chromium (Debian's package).

A real server with two models (one gets a broken version 2, whose load error the page must
show), real requests, then the browser: the rendered text, a screenshot (its header must have
the page's CSS colour), the live part updated in place by the page's script, and the static
parts with JavaScript off.

usage: status_page_test.py --kiln <path of the kiln binary>
"""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
import unittest
import zlib

import deploytest as dt
import headless

KILN = None
SCREENSHOT = "status_page.png"  # in the test's working directory (the build tree)


def png_first_row(path):
    """(width, [(r, g, b), ...]) of the first row of an 8-bit RGB or RGBA PNG."""
    with open(path, "rb") as f:
        data = f.read()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    pos, idat, header = 8, b"", None
    while pos < len(data):
        length = int.from_bytes(data[pos:pos + 4], "big")
        kind, body = data[pos + 4:pos + 8], data[pos + 8:pos + 8 + length]
        if kind == b"IHDR":
            header = body
        elif kind == b"IDAT":
            idat += body
        pos += 12 + length
    width = int.from_bytes(header[0:4], "big")
    depth, color = header[8], header[9]
    assert depth == 8 and color in (2, 6), (depth, color)
    channels = 3 if color == 2 else 4
    raw = zlib.decompressobj().decompress(idat, 1 + width * channels)
    kind, row = raw[0], bytearray(raw[1:1 + width * channels])
    # Row 0: the previous row is zeros, so Up is None and Average/Paeth use only the left pixel.
    for i in range(channels, len(row)):
        left = row[i - channels]
        if kind == 1 or kind == 4:
            row[i] = (row[i] + left) & 0xFF
        elif kind == 3:
            row[i] = (row[i] + left // 2) & 0xFF
    return width, [tuple(row[i:i + 3]) for i in range(0, len(row), channels)]


def requests_of(text, model, signature="serving_default"):
    """The `requests` column of the row of `model` version 1, `signature`, predict over REST."""
    m = re.search(rf"^{re.escape(model)}\t1\t{re.escape(signature)}\tpredict\tREST\t(\d+)\t",
                  text, re.M)
    return int(m.group(1)) if m else None


def _varint(n):
    n &= (1 << 64) - 1  # negative int64s as protobuf writes them: ten bytes
    out = bytearray()
    while True:
        out.append((n & 0x7F) | (0x80 if n > 0x7F else 0))
        n >>= 7
        if not n:
            return bytes(out)


def _int(field, n):
    return _varint(field << 3) + _varint(n)


def _bytes(field, data):
    data = data.encode() if isinstance(data, str) else data
    return _varint(field << 3 | 2) + _varint(len(data)) + data


def write_two_signature_saved_model(version_dir):
    """A SavedModel with two predict signatures of x (DT_FLOAT [-1]): serving_default
    (y = Relu(x)) and negate (y = Neg(x)). Encoded by hand from TensorFlow's schemas (field
    numbers from proto/tensorflow/core/...): this Python has no protobuf module."""
    float_type = lambda: _int(6, 1)  # AttrValue.type = DT_FLOAT
    def node(name, op, inputs, attrs):
        return _bytes(1, b"".join(
            [_bytes(1, name), _bytes(2, op)] + [_bytes(3, i) for i in inputs] +
            [_bytes(5, _bytes(1, k) + _bytes(2, v)) for k, v in attrs.items()]))
    graph = (node("x", "Placeholder", [], {"dtype": float_type(),
                                           "shape": _bytes(7, _int(3, 1))}) +
             node("relu", "Relu", ["x"], {"T": float_type()}) +
             node("neg", "Neg", ["x"], {"T": float_type()}) +
             _bytes(4, _int(1, 1087)))  # versions.producer
    def tensor_info(name):  # name, dtype DT_FLOAT, shape [-1]
        return _bytes(1, name) + _int(2, 1) + _bytes(3, _bytes(2, _int(1, -1)))
    def signature(key, output):
        sig = (_bytes(1, _bytes(1, "x") + _bytes(2, tensor_info("x:0"))) +
               _bytes(2, _bytes(1, "y") + _bytes(2, tensor_info(output))) +
               _bytes(3, "tensorflow/serving/predict"))
        return _bytes(5, _bytes(1, key) + _bytes(2, sig))
    meta_graph = (_bytes(1, _bytes(4, "serve")) + _bytes(2, graph) +
                  signature("serving_default", "relu:0") + signature("negate", "neg:0"))
    os.makedirs(version_dir, exist_ok=True)
    with open(os.path.join(version_dir, "saved_model.pb"), "wb") as f:
        f.write(_int(1, 1) + _bytes(2, meta_graph))


@unittest.skipIf(headless.find_chromium() is None, "chromium is not installed "
                 "(scripts/install-deps.sh installs it)")
class StatusPageTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.root = tempfile.TemporaryDirectory()
        # Markup in a path the page shows: it must come out escaped.
        root = os.path.join(cls.root.name, "models<b>&")
        dt.make_model_dir(root, "half_plus_two")
        cls.broken = dt.make_model_dir(root, "second")
        write_two_signature_saved_model(os.path.join(root, "signatures", "1"))
        config = os.path.join(root, "models.config")
        with open(config, "w") as f:
            f.write("model_config_list {\n" + "".join(
                f'  config {{ name: "{name}" base_path: "{root}/{name}" '
                f'model_platform: "{platform}" }}\n'
                for name, platform in (("half_plus_two", "onnx"), ("second", "onnx"),
                                       ("signatures", "tensorflow"))) + "}\n")
        cls.port = dt.free_port()
        cls.log = tempfile.TemporaryFile()
        cls.proc = subprocess.Popen(
            [KILN, "serve", f"--port={dt.free_port()}", f"--rest_api_port={cls.port}",
             f"--model_config_file={config}", "--enable_batching",
             # Version 2 of 'second' is broken on purpose: fail at the first attempt instead
             # of TF Serving's default 5 retries a minute apart.
             "--file_system_poll_wait_seconds=1", "--max_num_load_retries=0"],
            stdout=cls.log, stderr=subprocess.STDOUT)
        if not dt.wait_ready(cls.port, cls.proc):
            dt.stop(cls.proc)
            cls.log.seek(0)
            raise AssertionError("server did not start:\n" + cls.log.read().decode())
        for i in range(20):
            assert dt.predict(cls.port, [float(i)])[0] == 200
        # Two signatures of one model: each gets its own row with its own count.
        for body in [{"instances": [1.0, -2.0]}] * 4 + [
                {"signature_name": "negate", "instances": [3.0]}] * 3:
            status, reply = dt.call(cls.port, "POST", "/v1/models/signatures:predict",
                                    json.dumps(body))
            assert status == 200, reply
        # A version 2 that cannot load: version 1 keeps serving, the page shows the error.
        os.makedirs(os.path.join(cls.broken, "2"))
        with open(os.path.join(cls.broken, "2", "model.onnx"), "wb") as f:
            f.write(b"this is not an ONNX model")
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            status, body = dt.call(cls.port, "GET", "/v1/models/second")
            if status == 200 and any(v["status"]["error_code"] != "OK"
                                     for v in json.loads(body)["model_version_status"]):
                break
            time.sleep(0.1)
        else:
            raise AssertionError("version 2 of 'second' never failed to load")

    @classmethod
    def tearDownClass(cls):
        dt.stop(cls.proc)
        cls.log.close()
        cls.root.cleanup()

    def test_page_in_a_browser(self):
        with headless.Browser() as browser:
            browser.navigate(f"http://127.0.0.1:{self.port}/status")
            text = browser.text()
            for expected in ["kiln serve", "TensorFlow ModelServer: kiln", "serving",
                             "Models", "Requests", "Batching", "Loaded versions", "Flags",
                             "p50 ms", "p90 ms", "p99 ms", "req/s", "--enable_batching\ttrue",
                             "half_plus_two version 1",
                             "queued batches", "serving_default\tPredict"]:
                self.assertIn(expected, text)
            self.assertRegex(text, r"half_plus_two\t1\tAVAILABLE\tOK")
            self.assertRegex(text, r"second\t1\tAVAILABLE\tOK")
            self.assertRegex(text, r"second\t2\t\S+\t.*(INVALID_ARGUMENT|DATA_LOSS|NOT_FOUND"
                                   r"|INTERNAL|UNKNOWN)")
            self.assertEqual(requests_of(text, "half_plus_two"), 20)
            self.assertRegex(text, r"half_plus_two\tOK\t20")
            self.assertEqual(requests_of(text, "signatures", "serving_default"), 4, text)
            self.assertEqual(requests_of(text, "signatures", "negate"), 3, text)
            self.assertRegex(text, r"signatures\tOK\t7")
            # The optimization log is in a closed <details>: in the DOM, not in the text.
            self.assertIn("optimization log", browser.evaluate(
                "document.querySelector('details pre').textContent"))
            browser.screenshot(SCREENSHOT)
            width, row = png_first_row(SCREENSHOT)
            self.assertEqual(width, 1280)
            self.assertEqual(row[5], (0x1F, 0x2A, 0x44))  # the header's colour: CSS applied

            # The script replaces the live part in place: no reload (the marker survives),
            # new numbers.
            browser.evaluate("window.kilnMarker = 42")
            for i in range(15):
                self.assertEqual(dt.predict(self.port, [float(i)])[0], 200)
            deadline = time.monotonic() + 15
            while time.monotonic() < deadline:
                text = browser.text()
                if requests_of(text, "half_plus_two") == 35:
                    break
                time.sleep(0.5)
            self.assertEqual(requests_of(text, "half_plus_two"), 35, text)
            self.assertEqual(browser.evaluate("window.kilnMarker"), 42)
            # One per loaded version: half_plus_two, second (version 1), signatures.
            self.assertEqual(browser.evaluate("document.querySelectorAll('details').length"), 3)

    def test_without_javascript(self):
        with headless.Browser(javascript=False) as browser:
            browser.navigate(f"http://127.0.0.1:{self.port}/")
            text = browser.text()
            for expected in ["kiln serve", "Models", "half_plus_two\t1\tAVAILABLE", "Requests",
                             "Flags", "--file_system_poll_wait_seconds\t1", "Loaded versions"]:
                self.assertIn(expected, text)
            # Without scripts, <noscript>'s meta refresh is parsed as an element: the page
            # reloads itself.
            self.assertEqual(browser.evaluate(
                "document.querySelectorAll('noscript meta[http-equiv=refresh]').length"), 1)

    def test_plain_html_without_external_assets(self):
        for path in ("/", "/status", "/status?x=1"):
            status, body = dt.call(self.port, "GET", path)
            self.assertEqual(status, 200, path)
            html = body.decode()
            self.assertTrue(html.startswith("<!DOCTYPE html>"))
            self.assertNotRegex(html, r"(?i)(src=|<link|url\(|@import|https?://)")
            self.assertIn('<meta http-equiv="refresh"', html)
        status, body = dt.call(self.port, "HEAD", "/status")
        self.assertEqual((status, body), (200, b""))
        # Other paths still belong to the REST API.
        self.assertEqual(dt.call(self.port, "GET", "/statusx")[0], 404)
        self.assertEqual(dt.call(self.port, "GET", "/v2/health/ready")[0], 200)

    def test_page_escapes_what_it_shows(self):
        status, body = dt.call(self.port, "GET", "/status")
        self.assertEqual(status, 200)
        self.assertIn(b"models&lt;b&gt;&amp;/half_plus_two", body)
        self.assertNotIn(b"models<b>", body)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--kiln", required=True)
    options, rest = parser.parse_known_args()
    KILN = os.path.abspath(options.kiln)
    unittest.main(argv=[sys.argv[0], *rest], verbosity=2)
