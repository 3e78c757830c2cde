#!/usr/bin/python3
"""PyTorch DataLoader peer for `kiln data bench --experiment=images --peer`.

Reads the same images as JPEG files (DATA_DIR/class_<label>/img_<n>.jpg, written by the kiln
experiment), decodes them with PIL, resizes to SIZE x SIZE (bilinear), converts to a float
tensor, normalizes with the same mean/std and batches them: torchvision's standard ImageNet
input pipeline, with num_workers = cores. Prints one JSON line:
  {"name": "images/torch", "images_per_second": ..., "seconds": ..., "images": ...,
   "peak_rss_bytes": ...}
Run with Debian's /usr/bin/python3 (python3-torch, python3-torchvision, python3-pil).
"""
import argparse
import json
import os
import resource
import sys
import time

import torch
from PIL import Image
from torch.utils.data import DataLoader, Dataset
from torchvision import transforms


class JpegFolder(Dataset):
    def __init__(self, root, size):
        self.items = []
        for class_dir in sorted(os.listdir(root)):
            label = int(class_dir.split("_")[-1])
            folder = os.path.join(root, class_dir)
            for name in sorted(os.listdir(folder)):
                self.items.append((os.path.join(folder, name), label))
        self.transform = transforms.Compose([
            transforms.Resize((size, size), interpolation=transforms.InterpolationMode.BILINEAR),
            transforms.ToTensor(),
            transforms.Normalize(mean=[0.485, 0.456, 0.406], std=[0.229, 0.224, 0.225]),
        ])

    def __len__(self):
        return len(self.items)

    def __getitem__(self, index):
        path, label = self.items[index]
        with open(path, "rb") as f:
            image = Image.open(f).convert("RGB")
        return self.transform(image), label


def worker_init(_):
    # One process per core already; intra-op threads would only oversubscribe.
    torch.set_num_threads(1)


def peak_rss_bytes():
    own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    children = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    return (own + children) * 1024  # children: the largest finished worker


def cpu_seconds():
    total = 0.0
    for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN):
        usage = resource.getrusage(who)
        total += usage.ru_utime + usage.ru_stime
    return total


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--data_dir", required=True)
    parser.add_argument("--batch_size", type=int, default=64)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--workers", type=int, default=os.cpu_count())
    parser.add_argument("--size", type=int, default=224)
    args = parser.parse_args()

    torch.set_num_threads(1)
    dataset = JpegFolder(args.data_dir, args.size)
    if len(dataset) == 0:
        sys.exit(f"no images under {args.data_dir}")
    loader = DataLoader(dataset, batch_size=args.batch_size, shuffle=False,
                        num_workers=args.workers, worker_init_fn=worker_init,
                        persistent_workers=args.workers > 0)
    images = 0
    cpu_start = cpu_seconds()
    start = time.perf_counter()
    for _ in range(args.epochs):
        for batch, labels in loader:
            images += batch.shape[0]
    seconds = time.perf_counter() - start
    del loader  # ends the workers so that their CPU time and peak RSS are counted
    print(json.dumps({"name": "images/torch", "images_per_second": round(images / seconds, 1),
                      "seconds": round(seconds, 3), "images": images,
                      "cpu_ms_per_image": round((cpu_seconds() - cpu_start) * 1e3 / images, 3),
                      "peak_rss_bytes": peak_rss_bytes()}))


if __name__ == "__main__":
    main()
