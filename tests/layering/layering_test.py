#!/usr/bin/env python3
"""scripts/check-layering.py passes on the tree and fails on each planted violation.

Each case copies src/, include/ and scripts/ of the tree given as argv[1] to a temporary
folder, plants one edge the plan of DESIGN.md forbids, and expects the check to exit 1
naming that edge.
"""

import os
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.abspath(sys.argv[1])


def run_check(root):
    script = os.path.join(root, "scripts", "check-layering.py")
    done = subprocess.run([sys.executable, script, root], capture_output=True, text=True)
    return done.returncode, done.stdout + done.stderr


def copy_tree():
    tmp = tempfile.mkdtemp(prefix="kiln_layering_")
    for part in ("src", "include", "scripts"):
        shutil.copytree(os.path.join(ROOT, part), os.path.join(tmp, part))
    return tmp


def plant_include(root, path, include):
    full = os.path.join(root, path)
    with open(full, encoding="utf-8") as f:
        text = f.read()
    with open(full, "w", encoding="utf-8") as f:
        f.write(f'#include "{include}"\n' + text)


def plant_link(root, cmake, library, dep):
    full = os.path.join(root, cmake)
    with open(full, "a", encoding="utf-8") as f:
        f.write(f"\ntarget_link_libraries({library} PUBLIC {dep})\n")


CASES = [
    # (what is planted, text the report must contain)
    (lambda r: plant_include(r, "src/runtime/model.cc", "kiln/data/dataset.h"),
     "src/runtime/model.cc:1: #include \"kiln/data/dataset.h\"  (runtime may not depend on data)"),
    (lambda r: plant_include(r, "src/serving/json_values.cc", "kiln/runtime/model.h"),
     "(serving_base may not depend on runtime)"),
    (lambda r: plant_include(r, "src/data/formats/tfrecord.cc", "kiln/data/dataset.h"),
     "(formats may not depend on data)"),
    (lambda r: plant_link(r, "src/kernels/cpu/CMakeLists.txt", "kiln_kernels_cpu", "kiln_data"),
     "kiln_kernels_cpu links kiln_data  (kernels may not depend on data)"),
    (lambda r: plant_link(r, "src/opt/CMakeLists.txt", "kiln_opt", "kiln_kernels_cpu"),
     "kiln_opt links kiln_kernels_cpu  (opt may not depend on kernels)"),
]


def main():
    failures = []
    rc, out = run_check(ROOT)
    if rc != 0:
        failures.append(f"the tree itself fails the check:\n{out}")
    for plant, expected in CASES:
        tmp = copy_tree()
        try:
            plant(tmp)
            rc, out = run_check(tmp)
            if rc != 1 or expected not in out:
                failures.append(f"planted violation not reported (rc {rc}), expected "
                                f"'{expected}' in:\n{out}")
        finally:
            shutil.rmtree(tmp)
    for f in failures:
        print(f)
    print(f"{len(CASES) + 1 - len(failures)} of {len(CASES) + 1} cases passed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
