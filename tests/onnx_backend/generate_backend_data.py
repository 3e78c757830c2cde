"""Writes ONNX's backend node test suite (model.onnx + test_data_set_*/{input,output}_*.pb per
case) into the directory given as argv[1], using the onnx Python package installed on the
machine (Debian's python3-onnx 1.12). Nothing is downloaded.

onnx 1.12's case generators still use the NumPy aliases that NumPy 1.24 removed, so they are
restored before the generator module is run.
"""
import runpy
import sys

import numpy as np

for alias, target in (("float", float), ("int", int), ("bool", bool), ("object", object)):
    if not hasattr(np, alias):
        setattr(np, alias, target)

out_dir = sys.argv[1]
sys.argv = ["backend-test-tools", "generate-data", "-o", out_dir]
runpy.run_module("onnx.backend.test.cmd_tools", run_name="__main__")
