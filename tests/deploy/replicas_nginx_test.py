"""Draining on SIGTERM, and two replicas behind a real nginx restarted in turn under load.

usage: replicas_nginx_test.py --kiln <path of the kiln binary>
"""
import argparse
import http.client
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import unittest

import deploytest as dt

KILN = None
BENCH = os.path.join(dt.SOURCE_DIR, "bench/serving/run_replicas_bench.py")


class DrainTest(unittest.TestCase):
    def test_sigterm_turns_readiness_false_and_finishes_requests_in_flight(self):
        with tempfile.TemporaryDirectory() as root:
            model = dt.make_model_dir(root)
            # A batch waits 3 s for more requests: a request is in flight when SIGTERM comes.
            params = os.path.join(root, "batching.config")
            with open(params, "w") as f:
                f.write("max_batch_size { value: 64 }\nbatch_timeout_micros { value: 3000000 }\n")
            rest = dt.free_port()
            log = tempfile.TemporaryFile()
            proc = subprocess.Popen(
                [KILN, "serve", f"--port={dt.free_port()}", f"--rest_api_port={rest}",
                 "--model_name=half_plus_two", f"--model_base_path={model}", "--enable_batching",
                 f"--batching_parameters_file={params}"], stdout=log, stderr=subprocess.STDOUT)
            try:
                self.assertTrue(dt.wait_ready(rest, proc))
                probe = http.client.HTTPConnection("127.0.0.1", rest, timeout=10)
                probe.request("GET", "/v2/health/ready")
                self.assertEqual(probe.getresponse().read(), b'{"ready": true}')
                slow = {}

                def predict():
                    slow["reply"] = dt.predict(rest, [6.0])
                thread = threading.Thread(target=predict)
                thread.start()
                # The status page shows when the request waits in its batch queue.
                deadline = time.monotonic() + 2.5
                while time.monotonic() < deadline:
                    page = dt.call(rest, "GET", "/status")[1].decode()
                    if re.search(r">Predict</td><td class=\"n\">1</td><td class=\"n\">1</td>",
                                 page):
                        break
                    time.sleep(0.01)
                else:
                    self.fail("the request never waited in a batch queue")
                proc.send_signal(15)
                time.sleep(0.2)
                # New connections are refused at once...
                self.assertEqual(dt.call(rest, "GET", "/v2/health/live", timeout=2)[0], 0)
                # ...a connection already open is answered: not ready, and closed after.
                probe.request("GET", "/v2/health/ready")
                reply = probe.getresponse()
                self.assertEqual((reply.status, reply.read()), (503, b'{"ready": false}'))
                self.assertEqual(reply.getheader("Connection"), "close")
                thread.join(10)
                self.assertEqual(slow["reply"], (200, {"predictions": [[5.0]]}))
                self.assertEqual(proc.wait(15), 0)
            finally:
                dt.stop(proc)
                log.seek(0)
                output = log.read().decode(errors="replace")
                log.close()
            self.assertIn("draining", output)


@unittest.skipIf(shutil.which("nginx") is None and not os.path.exists("/usr/sbin/nginx"),
                 "nginx is not installed (scripts/install-deps.sh installs it)")
class ReplicasBehindNginxTest(unittest.TestCase):
    def test_each_replica_restarted_under_load_without_a_failed_request(self):
        # A short load (the 20,000-request run is in docs/performance/serving.md); the load
        # goes on until both replicas were restarted, however short it is.
        proc = subprocess.run([sys.executable, BENCH, "--kiln", KILN, "--requests", "2000",
                               "--concurrency", "4", "--pause", "1.5"],
                              capture_output=True, text=True, timeout=240)
        summary = json.loads(proc.stdout)
        self.assertEqual(summary["errors"], [], proc.stdout)
        self.assertEqual(len(summary["restarts"]), 2)
        for restart in summary["restarts"]:
            self.assertEqual(restart["exit_code"], 0)
        self.assertGreater(summary["requests_during_restarts"], 0)
        self.assertGreaterEqual(summary["requests"], 2000)
        self.assertEqual(summary["failed"], 0, proc.stdout)
        self.assertEqual(proc.returncode, 0, proc.stdout + proc.stderr)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--kiln", required=True)
    options, rest = parser.parse_known_args()
    KILN = os.path.abspath(options.kiln)
    unittest.main(argv=[sys.argv[0], *rest], verbosity=2)
