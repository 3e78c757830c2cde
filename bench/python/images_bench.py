#!/usr/bin/python3
"""The image input pipeline from Python against its peers, in one run, interleaved.

  kiln/python   kiln.data with the built-in functions: TFRecord shards -> parse_example ->
                decode_jpeg -> resize 224 -> normalize -> batch 64 -> prefetch (the pipeline of
                `kiln data bench --experiment=images`, written in Python)
  kiln/c++      that same pipeline in C++: `kiln data bench --experiment=images` (its own
                process; its "images/kiln" line)
  kiln/pillow   kiln.data over the JPEG files with a Python callable doing the decode/resize/
                normalize with Pillow and NumPy, num_parallel_calls = cores
  torch/2       PyTorch's DataLoader over the same JPEG files with 2 workers
                (bench/peers/torch_dataloader.py: PIL decode, torchvision resize/normalize)

Targets (issue 14): kiln/python within 5% of kiln/c++; kiln/pillow >= torch/2.

  PYTHONPATH=build/python /usr/bin/python3 bench/python/images_bench.py [--rounds=2]
Prints one JSON line per measurement and a summary with the load and the ISA.
"""
import argparse
import glob
import json
import os
import resource
import subprocess
import sys
import time

import numpy as np

import kiln
from kiln import functions as F

MEAN = [0.485, 0.456, 0.406]
STD = [0.229, 0.224, 0.225]
SIZE = 224


def cpu_seconds():
    u = resource.getrusage(resource.RUSAGE_SELF)
    return u.ru_utime + u.ru_stime


def measure(ds):
    cpu0, t0 = cpu_seconds(), time.perf_counter()
    images = 0
    for batch in ds:
        # A dict (the tf.Example pipeline) or one array (the Pillow pipeline's images).
        images += (batch["image/encoded"] if isinstance(batch, dict) else batch).shape[0]
    seconds = time.perf_counter() - t0
    return {"images_per_second": round(images / seconds, 1), "seconds": round(seconds, 3),
            "images": images, "cpu_ms_per_image": round((cpu_seconds() - cpu0) * 1e3 / images, 3)}


def kiln_python(args, cores):
    spec = {"image/encoded": F.FixedLenFeature([], "string"),
            "image/class/label": F.FixedLenFeature([], "int64")}
    work = F.chain(F.parse_example(spec), F.decode_jpeg("image/encoded", channels=3),
                   F.resize("image/encoded", (SIZE, SIZE)),
                   F.normalize("image/encoded", MEAN, STD, scale=1 / 255))
    ds = (kiln.data.Dataset.list_files(os.path.join(args.data_dir, "tfrecord/images-*.tfrecord"),
                                       shuffle=False)
          .repeat(args.epochs)
          .interleave(kiln.data.TFRecordDataset, cycle_length=kiln.data.AUTOTUNE,
                      block_length=1, num_parallel_calls=kiln.data.AUTOTUNE)
          .map(work, num_parallel_calls=kiln.data.AUTOTUNE, deterministic=False)
          .batch(args.batch_size, num_parallel_calls=kiln.data.AUTOTUNE)
          .prefetch(kiln.data.AUTOTUNE)
          .with_options(kiln.data.Options(cpu_budget=cores)))
    return measure(ds)


def kiln_cpp(args, cores):
    out = subprocess.run(
        [args.kiln, "data", "bench", "--experiment=images", f"--images={args.images}",
         f"--epochs={args.epochs}", f"--data_dir={args.data_dir}", f"--cpu_budget={cores}",
         f"--batch_size={args.batch_size}", "--bound_seconds=0.5", "--json"],
        check=True, capture_output=True, text=True).stdout
    for line in out.splitlines():
        if line.startswith("{") and '"images/kiln"' in line:
            r = json.loads(line)
            return {k: r[k] for k in ("images_per_second", "seconds", "images",
                                      "cpu_ms_per_image")}
    raise RuntimeError(f"no images/kiln line in:\n{out}")


MEAN32 = np.array(MEAN, np.float32)
STD32 = np.array(STD, np.float32)


def pillow_work(path):
    """What torchvision's Resize/ToTensor/Normalize do, in float32 as they do (float64
    arithmetic with list constants would cost 8x more)."""
    from PIL import Image
    with Image.open(path.decode()) as image:
        image = image.convert("RGB").resize((SIZE, SIZE), Image.BILINEAR)
        x = np.asarray(image, dtype=np.float32) * np.float32(1 / 255)
    return (x - MEAN32) / STD32


def kiln_pillow(args, cores):
    # Process-wide from here on (docs/PYTHON.md); torch/2 gets the same setting (MALLOC_ENV).
    kiln.data.tune_malloc(*MALLOC)
    files = sorted(glob.glob(os.path.join(args.data_dir, "jpeg/class_*/img_*.jpg")))
    ds = (kiln.data.Dataset.from_tensor_slices(np.array([f.encode() for f in files], object))
          .repeat(args.epochs)
          .map(pillow_work, num_parallel_calls=cores,
               deterministic=False)
          .batch(args.batch_size)
          .prefetch(kiln.data.AUTOTUNE)
          .with_options(kiln.data.Options(cpu_budget=cores)))
    return measure(ds)


# The malloc thresholds kiln.data.tune_malloc sets, given to the DataLoader peer as well so that
# the two compare the same allocator behaviour.
MALLOC = (8 << 20, 128 << 20)
MALLOC_ENV = {"MALLOC_MMAP_THRESHOLD_": str(MALLOC[0]), "MALLOC_TRIM_THRESHOLD_": str(MALLOC[1])}


def torch_loader(args, workers):
    peer = os.path.join(os.path.dirname(__file__), "..", "peers", "torch_dataloader.py")
    out = subprocess.run(
        [sys.executable, peer, f"--data_dir={os.path.join(args.data_dir, 'jpeg')}",
         f"--batch_size={args.batch_size}", f"--epochs={args.epochs}", f"--workers={workers}"],
        check=True, capture_output=True, text=True, env={**os.environ, **MALLOC_ENV}).stdout
    r = json.loads(out.strip().splitlines()[-1])
    return {k: r[k] for k in ("images_per_second", "seconds", "images", "cpu_ms_per_image")}


def machine():
    isa = sorted(set(w for line in open("/proc/cpuinfo") if line.startswith("flags")
                     for w in line.split() if w.startswith("avx512") or w == "avx2"))
    return {"load": os.getloadavg(), "cores": os.cpu_count(), "isa": " ".join(isa),
            "KILN_MAX_ISA": os.environ.get("KILN_MAX_ISA", "")}


def main():
    root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--kiln", default=os.path.join(root, "build/tools/kiln/kiln"))
    # Not the C++ experiment's default folder: a concurrent `kiln data bench` with other
    # --images would rewrite the data set under this run.
    parser.add_argument("--data_dir", default="/tmp/kiln-images-python")
    parser.add_argument("--images", type=int, default=2048)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--batch_size", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=2)
    # kiln/pillow sets the process's malloc thresholds (tune_malloc): later kiln/python rounds
    # run with them too; --only=kiln/python,kiln/c++ measures those without.
    parser.add_argument("--only", default="kiln/python,kiln/c++,torch/2,kiln/pillow")
    args = parser.parse_args()
    cores = os.cpu_count()
    # Writes the data set once (the C++ experiment owns its format), and warms the page cache.
    kiln_cpp(argparse.Namespace(**{**vars(args), "epochs": 1}), cores)
    runners = {"kiln/python": lambda: kiln_python(args, cores),
               "kiln/c++": lambda: kiln_cpp(args, cores),
               "kiln/pillow": lambda: kiln_pillow(args, cores),
               "torch/2": lambda: torch_loader(args, 2)}
    chosen = [n for n in args.only.split(",") if n]
    results = {n: [] for n in chosen}
    print(json.dumps({"machine": machine()}), flush=True)
    for r in range(args.rounds):
        for name in chosen:  # interleaved: each round runs every pipeline once
            out = runners[name]()
            out.update(name=name, round=r, load=os.getloadavg()[0])
            results[name].append(out)
            print(json.dumps(out), flush=True)
    best = {n: max(x["images_per_second"] for x in v) for n, v in results.items()}
    summary = {"best_images_per_second": best, "machine": machine()}
    if "kiln/python" in best and "kiln/c++" in best:
        summary["python_over_cpp"] = round(best["kiln/python"] / best["kiln/c++"], 3)
    if "kiln/pillow" in best and "torch/2" in best:
        summary["pillow_over_torch2"] = round(best["kiln/pillow"] / best["torch/2"], 3)
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
