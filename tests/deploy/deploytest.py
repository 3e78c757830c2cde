"""Helpers shared by the deployment tests: free ports, real `kiln serve` processes, HTTP calls.

Every wait is bounded; processes started here are stopped (SIGTERM, then SIGKILL) by stop().
"""
import http.client
import json
import os
import shutil
import signal
import socket
import subprocess
import time

SOURCE_DIR = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def call(port, method, path, body=None, timeout=10, headers=None):
    """(status, body bytes); status 0 when the connection failed."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        conn.request(method, path, body=body, headers=headers or {})
        reply = conn.getresponse()
        return reply.status, reply.read()
    except OSError:
        return 0, b""
    finally:
        conn.close()


def make_model_dir(root, name="half_plus_two"):
    """<root>/<name>/1/model.onnx: the bundled ONNX half_plus_two (y = x / 2 + 2)."""
    version = os.path.join(root, name, "1")
    os.makedirs(version, exist_ok=True)
    shutil.copy(os.path.join(SOURCE_DIR, "examples/models/half_plus_two/1/model.onnx"), version)
    return os.path.join(root, name)


def wait_ready(port, proc=None, timeout=60):
    """True once /v2/health/ready answers 200; False when `proc` exited or time ran out."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            return False
        if call(port, "GET", "/v2/health/ready", timeout=2)[0] == 200:
            return True
        time.sleep(0.05)
    return False


def predict(port, values, model="half_plus_two"):
    body = json.dumps({"instances": [[v] for v in values]})
    status, reply = call(port, "POST", f"/v1/models/{model}:predict", body)
    return status, (json.loads(reply) if status == 200 else reply)


def stop(proc, timeout=20):
    """SIGTERM and wait; SIGKILL after `timeout`. Returns the exit code (None if killed)."""
    if proc.poll() is not None:
        return proc.returncode
    proc.send_signal(signal.SIGTERM)
    try:
        return proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        return None
