#!/usr/bin/env python3
"""Two `kiln serve` replicas behind a real nginx (Debian's package), a REST predict load, and
each replica restarted in turn during the load (SIGTERM, drain, start again, ready): how many
requests failed, and the latency while replicas restart.

  python3 bench/serving/run_replicas_bench.py --kiln build/tools/kiln/kiln --requests 20000

Prints a JSON summary (also written with --json). A request fails when its answer is not 200
with the right predictions, or its connection breaks. The load runs until --requests were sent
AND both restarts finished, so a short run still covers both restarts. tests/deploy runs a
short load of this program in `make test`; docs/performance/serving.md has the long one.

nginx is configured as one would in production (see nginx_config): keep-alive connections to
the replicas, and a request whose replica failed is retried on the other (proxy_next_upstream;
max_fails=0, see MIN_PAUSE_S). Retrying
predictions is safe because they change nothing on the server ("non_idempotent": nginx does
not retry POSTs otherwise, and a keep-alive connection closed by a stopping replica just as
nginx reuses it is a race no server can prevent).
"""
import argparse
import http.client
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

SOURCE_DIR = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def get(port, path, timeout=2):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        conn.request("GET", path)
        reply = conn.getresponse()
        reply.read()
        return reply.status
    except OSError:
        return 0
    finally:
        conn.close()


# Seconds of load before, between and after the restarts, at least. With `max_fails=0` nginx
# never marks a replica down: a request that reaches a stopped replica is refused at connect
# time (or reset on a pooled connection) and retried on the other one. With nginx's default
# max_fails=1, a replica that failed is skipped for fail_timeout even once it is ready again,
# and when the next replica goes down within that time both are skipped: nginx answers 502
# "no live upstreams" although one replica is up (measured: docs/performance/serving.md).
MIN_PAUSE_S = 1.5


def nginx_config(prefix, listen_port, replica_ports):
    servers = "\n".join(f"    server 127.0.0.1:{p} max_fails=0;"
                        for p in replica_ports)
    return f"""
worker_processes 1;
daemon off;
pid {prefix}/nginx.pid;
error_log {prefix}/error.log warn;
events {{ worker_connections 1024; }}
http {{
  access_log off;
  client_body_temp_path {prefix}/client_body;
  proxy_temp_path {prefix}/proxy;
  fastcgi_temp_path {prefix}/fastcgi;
  uwsgi_temp_path {prefix}/uwsgi;
  scgi_temp_path {prefix}/scgi;
  upstream kiln {{
{servers}
    keepalive 32;
  }}
  server {{
    listen 127.0.0.1:{listen_port};
    location / {{
      proxy_pass http://kiln;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_connect_timeout 1s;
      proxy_next_upstream error timeout http_502 http_503 non_idempotent;
      proxy_next_upstream_tries 3;
    }}
  }}
}}
"""


class Replica:
    def __init__(self, kiln, model_dir, workdir, index):
        self.kiln, self.model_dir, self.index = kiln, model_dir, index
        self.grpc, self.rest = free_port(), free_port()
        self.log_path = os.path.join(workdir, f"replica{index}.log")
        self.proc = None

    def start(self):
        log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(
            [self.kiln, "serve", f"--port={self.grpc}", f"--rest_api_port={self.rest}",
             "--model_name=half_plus_two", f"--model_base_path={self.model_dir}",
             "--rest_api_num_threads=4"], stdout=log, stderr=subprocess.STDOUT)
        log.close()

    def wait_ready(self, timeout=60):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"replica {self.index} exited: {self.log()}")
            if get(self.rest, "/v2/health/ready") == 200:
                return
            time.sleep(0.02)
        raise RuntimeError(f"replica {self.index} not ready after {timeout} s")

    def stop(self, timeout=30):
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            return None

    def log(self):
        with open(self.log_path, errors="replace") as f:
            return f.read()[-2000:]


def percentile(values, q):
    if not values:
        return None
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))]


def run(kiln, requests, concurrency, pause_s):
    nginx = shutil.which("nginx") or "/usr/sbin/nginx"
    if not os.path.exists(nginx):
        raise RuntimeError("nginx is not installed (scripts/install-deps.sh installs it)")
    work = tempfile.mkdtemp(prefix="kiln-replicas-")
    try:
        model_dir = os.path.join(work, "half_plus_two")
        os.makedirs(os.path.join(model_dir, "1"))
        shutil.copy(os.path.join(SOURCE_DIR, "examples/models/half_plus_two/1/model.onnx"),
                    os.path.join(model_dir, "1"))
        replicas = [Replica(kiln, model_dir, work, i) for i in range(2)]
        for r in replicas:
            r.start()
        for r in replicas:
            r.wait_ready()
        lb_port = free_port()
        with open(os.path.join(work, "nginx.conf"), "w") as f:
            f.write(nginx_config(work, lb_port, [r.rest for r in replicas]))
        lb = subprocess.Popen([nginx, "-p", work, "-c", os.path.join(work, "nginx.conf"),
                               "-e", os.path.join(work, "error.log")],
                              stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
        try:
            deadline = time.monotonic() + 10
            while get(lb_port, "/v2/health/ready") != 200:
                if time.monotonic() > deadline or lb.poll() is not None:
                    raise RuntimeError("nginx did not start: " +
                                       open(os.path.join(work, "error.log")).read())
                time.sleep(0.02)
            summary = load(lb_port, replicas, requests, concurrency, pause_s, work)
            if summary["failed"]:
                with open(os.path.join(work, "error.log"), errors="replace") as f:
                    lines = f.read().splitlines()
                # The distinct reasons nginx gave, without times and connection numbers.
                reasons = {}
                for line in lines:
                    m = re.search(r"\[(\w+)\] \d+#\d+: (?:\*\d+ )?(.*?)(?:, client:|$)", line)
                    reason = m.group(2) if m else line
                    reasons[reason] = reasons.get(reason, 0) + 1
                summary["nginx_errors"] = sorted(reasons.items(), key=lambda kv: -kv[1])[:8]
            return summary
        finally:
            lb.send_signal(signal.SIGQUIT)  # graceful: finish and exit
            try:
                lb.wait(10)
            except subprocess.TimeoutExpired:
                lb.kill()
            for r in replicas:
                if r.proc.poll() is None:
                    r.stop()
    finally:
        shutil.rmtree(work, ignore_errors=True)


def load(port, replicas, requests, concurrency, pause_s, work):
    lock = threading.Lock()
    records = []  # (start, latency_s, ok)
    failures = []  # (start, what)
    sent = [0]
    restarts_done = threading.Event()
    restart_windows = []  # (SIGTERM time, ready time)
    restart_info = []
    errors = []

    def worker(seed):
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        i = seed
        while True:
            with lock:
                if sent[0] >= requests and restarts_done.is_set():
                    break
                sent[0] += 1
            i += 1
            x = float(i % 1000)
            body = json.dumps({"instances": [[x]]})
            start = time.monotonic()
            try:
                conn.request("POST", "/v1/models/half_plus_two:predict", body,
                             {"Content-Type": "application/json"})
                reply = conn.getresponse()
                data = reply.read()
                ok = reply.status == 200 and json.loads(data) == {"predictions": [[x / 2 + 2]]}
                what = None if ok else f"HTTP {reply.status}: {data[:200]!r}"
            except (OSError, http.client.HTTPException, ValueError) as e:
                ok, what = False, f"{type(e).__name__}: {e}"
                conn.close()
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
            latency = time.monotonic() - start
            with lock:
                records.append((start, latency, ok))
                if not ok:
                    failures.append((start, what))
        conn.close()

    def restarter():
        try:
            # Let the load settle, then restart each replica in turn with a pause between.
            while True:
                with lock:
                    if sent[0] >= min(requests // 5, 2000):
                        break
                time.sleep(0.01)
            for r in replicas:
                time.sleep(max(pause_s, MIN_PAUSE_S))
                t0 = time.monotonic()
                code = r.stop()
                t1 = time.monotonic()
                r.start()
                r.wait_ready()
                t2 = time.monotonic()
                restart_windows.append((t0, t2))
                restart_info.append({"replica": r.index, "exit_code": code,
                                     "drain_s": round(t1 - t0, 3),
                                     "restart_to_ready_s": round(t2 - t1, 3)})
            time.sleep(max(pause_s, MIN_PAUSE_S))
        except Exception as e:  # reported, and the load stops
            errors.append(repr(e))
        finally:
            restarts_done.set()

    threads = [threading.Thread(target=worker, args=(k * 1000003,)) for k in range(concurrency)]
    restart_thread = threading.Thread(target=restarter)
    began = time.monotonic()
    for t in threads:
        t.start()
    restart_thread.start()
    for t in threads:
        t.join()
    restart_thread.join()
    elapsed = time.monotonic() - began

    def during(start):
        return any(a <= start <= b for a, b in restart_windows)

    latencies = [lat for _, lat, _ in records]
    restart_latencies = [lat for start, lat, _ in records if during(start)]
    ms = lambda v: None if v is None else round(v * 1000, 2)  # noqa: E731
    return {
        "requests": len(records),
        "failed": len(failures),
        "failures": [w for _, w in failures[:10]],
        "requests_during_restarts": len(restart_latencies),
        "failed_during_restarts": sum(1 for s, _ in failures if during(s)),
        "seconds": round(elapsed, 2),
        "requests_per_second": round(len(records) / elapsed, 1),
        "concurrency": concurrency,
        "p50_ms": ms(percentile(latencies, 0.50)),
        "p99_ms": ms(percentile(latencies, 0.99)),
        "p50_during_restarts_ms": ms(percentile(restart_latencies, 0.50)),
        "p99_during_restarts_ms": ms(percentile(restart_latencies, 0.99)),
        "max_during_restarts_ms": ms(max(restart_latencies) if restart_latencies else None),
        "restarts": restart_info,
        "errors": errors,
        "replica_logs": [] if not errors else [r.log() for r in replicas],
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--kiln", default=os.path.join(SOURCE_DIR, "build/tools/kiln/kiln"))
    parser.add_argument("--requests", type=int, default=20000)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--pause", type=float, default=2.0,
                        help="seconds of load before, between and after the restarts (at "
                        f"least {MIN_PAUSE_S})")
    parser.add_argument("--json", help="also write the summary here")
    args = parser.parse_args()
    summary = run(os.path.abspath(args.kiln), args.requests, args.concurrency, args.pause)
    text = json.dumps(summary, indent=2)
    print(text)
    if args.json:
        with open(args.json, "w") as f:
            f.write(text + "\n")
    ok = summary["failed"] == 0 and not summary["errors"] and len(summary["restarts"]) == 2 \
        and all(r["exit_code"] == 0 for r in summary["restarts"])
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
