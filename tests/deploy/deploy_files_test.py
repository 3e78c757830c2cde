"""deploy/: the TF Serving entrypoint, the Dockerfile and the Kubernetes/KServe manifests.

There is no container runtime on CI machines, so the entrypoint runs directly (with the real
`tensorflow_model_server` on PATH), the Dockerfile's packages are checked against
scripts/install-deps.sh and against the shared libraries the built binary links, and every
manifest is parsed and checked against the server: its flags are given to the real server,
the probe and metrics paths are asked of a real server started with the manifest's arguments.

usage: deploy_files_test.py --kiln <path of the kiln binary>
"""
import argparse
import json
import os
import re
import shlex
import subprocess
import sys
import tempfile
import unittest

import yaml

import deploytest as dt

KILN = None  # set by main
DEPLOY = os.path.join(dt.SOURCE_DIR, "deploy")
ENTRYPOINT = os.path.join(DEPLOY, "tf_serving_entrypoint.sh")
# Packages every debian:12-slim image has (apt itself needs them).
BASE_IMAGE_PACKAGES = {"libc6", "libgcc-s1", "libstdc++6"}
HEALTH_PATHS = {"/v2/health/live", "/v2/health/ready"}


def read(path):
    with open(path) as f:
        return f.read()


def server_bin_dir():
    """A folder whose tensorflow_model_server is the kiln binary under test (the build's
    symlink sits next to the binary)."""
    link = os.path.join(os.path.dirname(KILN), "tensorflow_model_server")
    assert os.path.realpath(link) == os.path.realpath(KILN), link
    return os.path.dirname(KILN)


def flag_values(args):
    """{"name": "value"} of --name=value arguments; a later flag wins, as in the server."""
    out = {}
    for arg in args:
        m = re.fullmatch(r"--?([A-Za-z0-9_]+)(?:=(.*))?", arg)
        assert m, f"not a flag: {arg}"
        out[m.group(1)] = m.group(2) if m.group(2) is not None else "true"
    return out


def entrypoint_flags():
    """The flags deploy/tf_serving_entrypoint.sh passes before the user's arguments."""
    text = read(ENTRYPOINT)
    command = re.search(r"^exec tensorflow_model_server (.*?)\"\$@\"", text, re.S | re.M)
    assert command, "the entrypoint must exec tensorflow_model_server ... \"$@\""
    words = shlex.split(command.group(1).replace("\\\n", " "))
    return flag_values(w for w in words if not w.startswith("--model_"))


def server_accepts(args):
    """(exit code, output) of `kiln serve <args> --help`: 0 only when every flag exists and
    its value parses (a bad value is exit code 2; an unknown flag is reported as "unknown
    argument", as tensorflow_model_server does, and counts as exit code 2 here)."""
    proc = subprocess.run([KILN, "serve", *args, "--help"], capture_output=True, text=True,
                          timeout=30)
    if proc.returncode == 0 and "unknown argument" in proc.stderr:
        return 2, proc.stderr
    return proc.returncode, proc.stderr


def shutdown_grace_seconds():
    header = read(os.path.join(dt.SOURCE_DIR, "include/kiln/serving/server.h"))
    m = re.search(r"kShutdownGraceSeconds = (\d+);", header)
    assert m, "kShutdownGraceSeconds not found in server.h"
    return int(m.group(1))


def quantity_bytes(text):
    units = {"Ki": 1 << 10, "Mi": 1 << 20, "Gi": 1 << 30, "Ti": 1 << 40, "k": 10**3, "M": 10**6,
             "G": 10**9}
    m = re.fullmatch(r"(\d+)([A-Za-z]*)", str(text))
    return int(m.group(1)) * units.get(m.group(2), 1)


def load_yaml(path):
    with open(os.path.join(DEPLOY, path)) as f:
        return [doc for doc in yaml.safe_load_all(f) if doc]


class Served:
    """A server started like the container: the entrypoint or a manifest's command, with free
    ports appended (a later flag wins)."""

    def __init__(self, command, env):
        self.grpc = dt.free_port()
        self.rest = dt.free_port()
        self.log = tempfile.TemporaryFile()
        full_env = dict(os.environ, PATH=server_bin_dir() + os.pathsep + os.environ["PATH"])
        full_env.update(env)
        self.proc = subprocess.Popen(
            [*command, f"--port={self.grpc}", f"--rest_api_port={self.rest}"], env=full_env,
            stdout=self.log, stderr=subprocess.STDOUT)

    def output(self):
        self.log.seek(0)
        return self.log.read().decode(errors="replace")

    def __enter__(self):
        if not dt.wait_ready(self.rest, self.proc):
            dt.stop(self.proc)
            raise AssertionError("server did not become ready:\n" + self.output())
        return self

    def __exit__(self, *exc):
        dt.stop(self.proc)
        self.log.close()


class EntrypointTest(unittest.TestCase):
    def test_serves_model_name_under_base_path_and_passes_arguments_through(self):
        with tempfile.TemporaryDirectory() as root:
            dt.make_model_dir(root, "half_plus_two")
            env = {"MODEL_NAME": "half_plus_two", "MODEL_BASE_PATH": root}
            with Served(["bash", ENTRYPOINT], env) as s:
                status, reply = dt.predict(s.rest, [1.0, 2.0])
                self.assertEqual(status, 200, reply)
                self.assertEqual(reply, {"predictions": [[2.5], [3.0]]})
                status, body = dt.call(s.rest, "GET", "/v1/models/half_plus_two")
                self.assertEqual(status, 200, body)
                self.assertEqual(json.loads(body)["model_version_status"][0]["state"],
                                 "AVAILABLE")
                # exec: the shell is gone, the server itself gets the container's SIGTERM.
                self.assertEqual(os.path.realpath(f"/proc/{s.proc.pid}/exe"),
                                 os.path.realpath(KILN))
                self.assertEqual(dt.stop(s.proc), 0, s.output())
                self.assertIn("draining", s.output())

    def test_defaults_are_tf_servings(self):
        # MODEL_NAME unset: the model is called "model" and read from $MODEL_BASE_PATH/model.
        with tempfile.TemporaryDirectory() as root:
            dt.make_model_dir(root, "model")
            env = {"MODEL_BASE_PATH": root}
            with Served(["env", "-u", "MODEL_NAME", "bash", ENTRYPOINT], env) as s:
                status, reply = dt.predict(s.rest, [4.0], model="model")
                self.assertEqual(status, 200, reply)
                self.assertEqual(reply, {"predictions": [[4.0]]})
        self.assertEqual(entrypoint_flags(), {"port": "8500", "rest_api_port": "8501"})
        self.assertIn('"${MODEL_BASE_PATH:-/models}/${MODEL_NAME:-model}"',
                      read(ENTRYPOINT))

    def test_arguments_reach_the_server(self):
        env = dict(os.environ, PATH=server_bin_dir() + os.pathsep + os.environ["PATH"])
        proc = subprocess.run(["bash", ENTRYPOINT, "--version"], env=env, capture_output=True,
                              text=True, timeout=30)
        self.assertEqual(proc.returncode, 0, proc.stderr)
        self.assertIn("TensorFlow ModelServer: kiln", proc.stdout)
        # An unknown flag is reported and the server goes on, as tensorflow_model_server does
        # (--version then makes it exit instead of serving).
        proc = subprocess.run(["bash", ENTRYPOINT, "--no_such_flag=1", "--version"], env=env,
                              capture_output=True, text=True, timeout=30)
        self.assertEqual(proc.returncode, 0, proc.stderr)
        self.assertIn("unknown argument: --no_such_flag=1", proc.stderr)
        self.assertIn("TensorFlow ModelServer: kiln", proc.stdout)


class DockerfileTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        text = read(os.path.join(DEPLOY, "Dockerfile"))
        text = re.sub(r"\\\n", " ", text)
        cls.stages = []
        for line in text.splitlines():
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            word, _, rest = line.partition(" ")
            if word.upper() == "FROM":
                cls.stages.append([])
            cls.stages[-1].append((word.upper(), rest.strip()))

    def instructions(self, stage, word):
        return [rest for w, rest in self.stages[stage] if w == word]

    def install_deps_group(self, name):
        script = os.path.join(dt.SOURCE_DIR, "scripts/install-deps.sh")
        out = subprocess.run(
            ["bash", "-c", f'eval "$(sed -n "/^{name}=(/,/^)/p" "$0")"; echo "${{{name}[@]}}"',
             script], capture_output=True, text=True, check=True).stdout
        return set(out.split())

    def test_two_stages_on_debian_12(self):
        self.assertEqual(len(self.stages), 2)
        self.assertRegex(self.stages[0][0][1], r"^debian:12 AS build$")
        self.assertRegex(self.stages[1][0][1], r"^debian:12-slim$")

    def test_build_stage_installs_exactly_install_deps_build_group(self):
        runs = " ".join(self.instructions(0, "RUN"))
        self.assertIn("bash scripts/install-deps.sh --build", runs)
        self.assertNotIn("apt-get install", runs)  # nothing installed beside the script
        build = self.install_deps_group("BUILD_PACKAGES")
        self.assertTrue({"cmake", "libgrpc++-dev", "libdnnl-dev"} <= build)
        self.assertFalse(build & self.install_deps_group("TEST_PACKAGES"))
        self.assertIn("--target kiln", runs)
        self.assertIn("-DKILN_BUILD_TESTS=OFF", runs)

    def test_runtime_stage_has_exactly_the_libraries_the_binary_links(self):
        runs = " ".join(self.instructions(1, "RUN"))
        m = re.search(r"apt-get install -y --no-install-recommends ([^&]*)", runs)
        self.assertTrue(m, runs)
        listed = set(m.group(1).split())
        ldd = subprocess.run(["ldd", KILN], capture_output=True, text=True, check=True).stdout
        paths = set(re.findall(r"=> (/\S+)", ldd))
        # merged /usr: dpkg knows a library under one of its two names.
        names = sorted(paths | {os.path.realpath(p) for p in paths})
        owners = subprocess.run(["dpkg", "-S", *names], capture_output=True, text=True).stdout
        owner_of = {}
        for line in owners.splitlines():
            package, _, path = line.partition(": ")
            owner_of[path] = package.split(":")[0]
        needed = set()
        for path in paths:
            owner = owner_of.get(path) or owner_of.get(os.path.realpath(path))
            self.assertIsNotNone(owner, f"no Debian package owns {path}")
            needed.add(owner)
        self.assertFalse(needed - listed - BASE_IMAGE_PACKAGES,
                         "libraries kiln links that the runtime stage does not install")
        self.assertFalse(listed - needed, "runtime packages kiln does not link")

    def test_tf_serving_surface(self):
        runtime = self.stages[1]
        self.assertIn("MODEL_BASE_PATH=/models", self.instructions(1, "ENV"))
        self.assertIn("MODEL_NAME=model", self.instructions(1, "ENV"))
        self.assertEqual(sorted(self.instructions(1, "EXPOSE")), ["8500", "8501"])
        flags = entrypoint_flags()
        self.assertEqual({flags["port"], flags["rest_api_port"]},
                         set(self.instructions(1, "EXPOSE")))
        self.assertEqual(self.instructions(1, "ENTRYPOINT"),
                         ['["/usr/bin/tf_serving_entrypoint.sh"]'])
        self.assertIn("deploy/tf_serving_entrypoint.sh /usr/bin/tf_serving_entrypoint.sh",
                      self.instructions(1, "COPY"))
        self.assertIn("ln -s kiln /out/usr/local/bin/tensorflow_model_server",
                      " ".join(self.instructions(0, "RUN")))
        user = self.instructions(1, "USER")
        self.assertEqual(len(user), 1)
        self.assertRegex(user[0], r"^[1-9]\d*:[1-9]\d*$")  # numeric, not root
        # USER comes after every RUN (nothing later runs as root by accident).
        last_run = max(i for i, (w, _) in enumerate(runtime) if w == "RUN")
        self.assertGreater([w for w, _ in runtime].index("USER"), last_run)

    def test_dockerignore_keeps_what_the_build_reads(self):
        ignore = read(os.path.join(DEPLOY, "Dockerfile.dockerignore"))
        kept = [line[1:] for line in ignore.splitlines() if line.startswith("!")]
        for path in kept:
            self.assertTrue(os.path.exists(os.path.join(dt.SOURCE_DIR, path.strip())), path)
        for needed in ["CMakeLists.txt", "include", "src", "proto", "tools",
                       "scripts/install-deps.sh", "deploy/tf_serving_entrypoint.sh"]:
            self.assertIn(needed, [p.strip() for p in kept])


class KubernetesTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        docs = load_yaml("k8s/kiln-serve.yaml")
        cls.by_kind = {doc["kind"]: doc for doc in docs}
        cls.deployment = cls.by_kind["Deployment"]
        cls.pod = cls.deployment["spec"]["template"]["spec"]
        cls.container = cls.pod["containers"][0]
        cls.args = cls.container["args"]
        cls.flags = dict(entrypoint_flags(), **flag_values(cls.args))
        cls.ports = {p["name"]: p["containerPort"] for p in cls.container["ports"]}

    def test_every_kind_present(self):
        self.assertEqual(set(self.by_kind), {"ConfigMap", "Deployment", "Service"})
        selector = self.deployment["spec"]["selector"]["matchLabels"]
        self.assertEqual(self.by_kind["Service"]["spec"]["selector"], selector)
        labels = self.deployment["spec"]["template"]["metadata"]["labels"]
        self.assertTrue(selector.items() <= labels.items())

    def test_flags_are_the_servers(self):
        code, err = server_accepts(self.args)
        self.assertEqual(code, 0, err)

    def test_ports_agree_with_the_server(self):
        self.assertEqual(self.ports, {"grpc": int(self.flags["port"]),
                                      "http": int(self.flags["rest_api_port"])})
        for port in self.by_kind["Service"]["spec"]["ports"]:
            self.assertIn(port["targetPort"], self.ports)
            self.assertEqual(port["port"], self.ports[port["targetPort"]])
        annotations = self.deployment["spec"]["template"]["metadata"]["annotations"]
        self.assertEqual(int(annotations["prometheus.io/port"]), self.ports["http"])

    def test_probes(self):
        probes = {k: self.container[k]["httpGet"]
                  for k in ("startupProbe", "livenessProbe", "readinessProbe")}
        self.assertEqual(probes["livenessProbe"]["path"], "/v2/health/live")
        self.assertEqual(probes["readinessProbe"]["path"], "/v2/health/ready")
        for probe in probes.values():
            self.assertIn(probe["path"], HEALTH_PATHS)
            self.assertEqual(probe["port"], "http")

    def test_drain_fits_the_termination_grace_period(self):
        command = self.container["lifecycle"]["preStop"]["exec"]["command"]
        self.assertEqual(command[0], "sleep")
        pre_stop = int(command[1])
        self.assertGreaterEqual(pre_stop, 1)
        self.assertGreater(self.pod["terminationGracePeriodSeconds"],
                           pre_stop + shutdown_grace_seconds())

    def test_threads_and_memory_follow_the_resources(self):
        resources = self.container["resources"]
        cpu = int(resources["requests"]["cpu"])
        self.assertEqual(str(cpu), str(resources["limits"]["cpu"]))  # whole, guaranteed cores
        intra = int(self.flags["tensorflow_intra_op_parallelism"])
        inter = int(self.flags["tensorflow_inter_op_parallelism"])
        self.assertEqual(intra * inter, cpu)
        limit = quantity_bytes(resources["limits"]["memory"])
        budget = int(self.flags["run_memory_budget_bytes"])
        self.assertGreater(budget, 0)
        self.assertLessEqual(budget, limit // 2)

    def test_security_matches_the_image(self):
        context = self.pod["securityContext"]
        self.assertTrue(context["runAsNonRoot"])
        user = read(os.path.join(DEPLOY, "Dockerfile"))
        self.assertIn(f"USER {context['runAsUser']}:{context['runAsGroup']}", user)

    def test_a_server_started_with_these_arguments_answers_every_path(self):
        config = self.by_kind["ConfigMap"]["data"]["monitoring.config"]
        annotations = self.deployment["spec"]["template"]["metadata"]["annotations"]
        mounts = {m["name"]: m["mountPath"] for m in self.container["volumeMounts"]}
        model_name = {e["name"]: e["value"] for e in self.container["env"]}["MODEL_NAME"]
        self.assertEqual(mounts["models"], f"/models/{model_name}")
        with tempfile.TemporaryDirectory() as root:
            dt.make_model_dir(root, model_name)
            config_path = os.path.join(root, "monitoring.config")
            with open(config_path, "w") as f:
                f.write(config)
            args = [a.replace(mounts["config"] + "/monitoring.config", config_path)
                    for a in self.args]
            env = {"MODEL_NAME": model_name, "MODEL_BASE_PATH": root}
            with Served(["bash", ENTRYPOINT, *args], env) as s:
                self.assertEqual(dt.predict(s.rest, [1.0], model=model_name)[0], 200)
                for path in HEALTH_PATHS:
                    self.assertEqual(dt.call(s.rest, "GET", path)[0], 200, path)
                status, metrics = dt.call(s.rest, "GET", annotations["prometheus.io/path"])
                self.assertEqual(status, 200)
                self.assertIn(b":tensorflow:serving:request_count", metrics)


class KServeTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        (cls.runtime,) = load_yaml("kserve/servingruntime.yaml")
        (cls.service,) = load_yaml("kserve/inferenceservice.yaml")
        cls.container = cls.runtime["spec"]["containers"][0]
        cls.flags = flag_values(cls.container["args"])

    def test_formats_and_protocols(self):
        self.assertEqual(self.runtime["kind"], "ServingRuntime")
        self.assertEqual(self.runtime["apiVersion"], "serving.kserve.io/v1alpha1")
        formats = {f["name"] for f in self.runtime["spec"]["supportedModelFormats"]}
        self.assertEqual(formats, {"tensorflow", "onnx"})
        self.assertTrue({"v1", "v2"} <= set(self.runtime["spec"]["protocolVersions"]))

    def test_container_agrees_with_the_server(self):
        self.assertEqual(self.container["name"], "kserve-container")
        self.assertEqual(os.path.basename(self.container["command"][0]),
                         "tensorflow_model_server")
        self.assertIn("ln -s kiln /out" + self.container["command"][0],
                      read(os.path.join(DEPLOY, "Dockerfile")))
        args = [a.replace("{{.Name}}", "m") for a in self.container["args"]]
        code, err = server_accepts(args)
        self.assertEqual(code, 0, err)
        rest = int(self.flags["rest_api_port"])
        self.assertEqual([p["containerPort"] for p in self.container["ports"]], [rest])
        self.assertEqual(self.flags["model_base_path"], "/mnt/models")  # KServe's download dir
        for probe in ("readinessProbe", "livenessProbe"):
            self.assertIn(self.container[probe]["httpGet"]["path"], HEALTH_PATHS)
            self.assertEqual(self.container[probe]["httpGet"]["port"], rest)
        cpu = int(self.container["resources"]["limits"]["cpu"])
        self.assertEqual(int(self.flags["tensorflow_intra_op_parallelism"]) *
                         int(self.flags["tensorflow_inter_op_parallelism"]), cpu)
        self.assertLessEqual(int(self.flags["run_memory_budget_bytes"]),
                             quantity_bytes(self.container["resources"]["limits"]["memory"]) // 2)

    def test_inference_service_uses_the_runtime(self):
        self.assertEqual(self.service["kind"], "InferenceService")
        model = self.service["spec"]["predictor"]["model"]
        self.assertEqual(model["runtime"], self.runtime["metadata"]["name"])
        formats = {f["name"] for f in self.runtime["spec"]["supportedModelFormats"]}
        self.assertIn(model["modelFormat"]["name"], formats)

    def test_a_server_started_like_kserve_answers_v1_and_v2(self):
        name = self.service["metadata"]["name"]
        with tempfile.TemporaryDirectory() as root:
            base = dt.make_model_dir(root, "mnt_models")
            args = [a.replace("{{.Name}}", name).replace("/mnt/models", base)
                    for a in self.container["args"]]
            with Served([self.container["command"][0].split("/")[-1], *args], {}) as s:
                status, reply = dt.predict(s.rest, [2.0], model=name)
                self.assertEqual((status, reply), (200, {"predictions": [[3.0]]}))
                for path in [*HEALTH_PATHS, f"/v2/models/{name}/ready"]:
                    self.assertEqual(dt.call(s.rest, "GET", path)[0], 200, path)
                body = json.dumps({"inputs": [{"name": "x", "shape": [1, 1], "datatype": "FP32",
                                               "data": [2.0]}]})
                status, reply = dt.call(s.rest, "POST", f"/v2/models/{name}/infer", body)
                self.assertEqual(status, 200, reply)
                self.assertEqual(json.loads(reply)["outputs"][0]["data"], [3.0])


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--kiln", required=True)
    options, rest = parser.parse_known_args()
    KILN = os.path.abspath(options.kiln)
    unittest.main(argv=[sys.argv[0], *rest], verbosity=2)
