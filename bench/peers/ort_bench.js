#!/usr/bin/env node
// Times a model on ONNX Runtime (onnxruntime-node, CPU) the way `kiln run --bench` times it:
// latency p50/p90/p99 and items/s per batch size, one JSON object per batch size.
//
// usage: node bench/peers/ort_bench.js MODEL.onnx [--batch 1,32] [--threads 2] [--seconds 2]
//
// Install the peer first: cd bench/peers && npm install --ignore-scripts onnxruntime-node@1.30.0
// (the package ships bin/napi-v6/linux/x64/{onnxruntime_binding.node,libonnxruntime.so.1};
// its install script only fetches optional CUDA/TensorRT providers, so it is not needed).
'use strict';
const ort = require('onnxruntime-node');

function parseArgs(argv) {
  const a = {model: null, batches: [1], threads: 2, seconds: 2, seed: 0};
  for (let i = 0; i < argv.length; ++i) {
    const arg = argv[i];
    const value = () => {
      if (i + 1 >= argv.length) throw new Error(`${arg} needs a value`);
      return argv[++i];
    };
    if (arg === '--batch') a.batches = value().split(',').map(Number);
    else if (arg === '--threads') a.threads = Number(value());
    else if (arg === '--seconds') a.seconds = Number(value());
    else if (arg.startsWith('--')) throw new Error(`unknown flag ${arg}`);
    else a.model = arg;
  }
  if (!a.model) throw new Error('usage: ort_bench.js MODEL.onnx [--batch 1,32] [--threads N]');
  return a;
}

// Deterministic inputs like kiln's: floats in [-1, 1), integers in [0, 10).
function makeInput(meta, batch, rng) {
  const dims = meta.shape.map((d, i) => (typeof d === 'number' && d > 0 ? d : (i === 0 ? batch : 1)));
  const n = dims.reduce((x, y) => x * y, 1);
  switch (meta.type) {
    case 'float32': {
      const data = new Float32Array(n);
      for (let i = 0; i < n; ++i) data[i] = rng() * 2 - 1;
      return new ort.Tensor('float32', data, dims);
    }
    case 'int64': {
      const data = new BigInt64Array(n);
      for (let i = 0; i < n; ++i) data[i] = BigInt(Math.floor(rng() * 10));
      return new ort.Tensor('int64', data, dims);
    }
    case 'int32': {
      const data = new Int32Array(n);
      for (let i = 0; i < n; ++i) data[i] = Math.floor(rng() * 10);
      return new ort.Tensor('int32', data, dims);
    }
    default:
      throw new Error(`input ${meta.name}: unsupported type ${meta.type}`);
  }
}

function mulberry32(seed) {
  return () => {
    seed |= 0; seed = (seed + 0x6D2B79F5) | 0;
    let t = Math.imul(seed ^ (seed >>> 15), 1 | seed);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

function percentile(sorted, p) {
  const rank = (p / 100) * (sorted.length - 1);
  const lo = Math.floor(rank), hi = Math.min(lo + 1, sorted.length - 1);
  return sorted[lo] + (sorted[hi] - sorted[lo]) * (rank - lo);
}

async function main() {
  const args = parseArgs(process.argv.slice(2));
  const session = await ort.InferenceSession.create(args.model, {
    executionProviders: ['cpu'],
    intraOpNumThreads: args.threads,
    interOpNumThreads: 1,
    executionMode: 'sequential',
    graphOptimizationLevel: 'all',
  });
  const metas = session.inputMetadata;
  for (const batch of args.batches) {
    const rng = mulberry32(args.seed);
    const feeds = {};
    for (const meta of metas) feeds[meta.name] = makeInput(meta, batch, rng);
    for (let i = 0; i < 3; ++i) await session.run(feeds);
    const ms = [];
    const start = process.hrtime.bigint();
    const end = start + BigInt(Math.round(args.seconds * 1e9));
    for (;;) {
      const t0 = process.hrtime.bigint();
      if (ms.length >= 10 && t0 >= end) break;
      await session.run(feeds);
      ms.push(Number(process.hrtime.bigint() - t0) / 1e6);
    }
    const total = Number(process.hrtime.bigint() - start) / 1e9;
    const sorted = [...ms].sort((x, y) => x - y);
    console.log(JSON.stringify({
      batch, p50_ms: +percentile(sorted, 50).toFixed(4), p90_ms: +percentile(sorted, 90).toFixed(4),
      p99_ms: +percentile(sorted, 99).toFixed(4), items_per_s: +((batch * ms.length) / total).toFixed(2),
      runs: ms.length,
    }));
  }
}

main().catch((e) => {
  console.error(`ort_bench: ${e.message}`);
  process.exit(1);
});
