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


def requests_of(text, model):
    """The `requests` column of `model`'s predict/REST row in the rendered text."""
    m = re.search(rf"^{re.escape(model)}\tpredict\tREST\t(\d+)\t", text, re.M)
    return int(m.group(1)) if m else None


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
        config = os.path.join(root, "models.config")
        with open(config, "w") as f:
            f.write("model_config_list {\n" + "".join(
                f'  config {{ name: "{name}" base_path: "{root}/{name}" model_platform: "onnx" }}\n'
                for name in ("half_plus_two", "second")) + "}\n")
        cls.port = dt.free_port()
        cls.log = tempfile.TemporaryFile()
        cls.proc = subprocess.Popen(
            [KILN, "serve", f"--port={dt.free_port()}", f"--rest_api_port={cls.port}",
             f"--model_config_file={config}", "--enable_batching",
             "--file_system_poll_wait_seconds=1"], stdout=cls.log, stderr=subprocess.STDOUT)
        if not dt.wait_ready(cls.port, cls.proc):
            dt.stop(cls.proc)
            cls.log.seek(0)
            raise AssertionError("server did not start:\n" + cls.log.read().decode())
        for i in range(20):
            assert dt.predict(cls.port, [float(i)])[0] == 200
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
            self.assertEqual(browser.evaluate("document.querySelectorAll('details').length"), 2)

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
