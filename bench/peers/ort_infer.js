// Times an ONNX model (input "x", a deterministic f32 tensor) in
// onnxruntime-node: node ort_infer.js MODEL.onnx DIM,DIM,... THREADS,...
// prints "THREADS MS" lines, the median of timed runs after a warm-up.
const path = require('path');
const ort = require(path.join(__dirname, '..', 'node_modules', 'onnxruntime-node'));

async function medianMs(fn, minReps = 10, minMs = 1000, warmup = 3) {
  for (let i = 0; i < warmup; i++) await fn();
  const samples = [];
  const start = process.hrtime.bigint();
  while (samples.length < minReps || Number(process.hrtime.bigint() - start) / 1e6 < minMs) {
    const t0 = process.hrtime.bigint();
    await fn();
    samples.push(Number(process.hrtime.bigint() - t0) / 1e6);
  }
  samples.sort((a, b) => a - b);
  const n = samples.length;
  return n % 2 ? samples[(n - 1) / 2] : (samples[n / 2 - 1] + samples[n / 2]) / 2;
}

async function main() {
  const [file, dimsArg, threadsArg] = process.argv.slice(2);
  const dims = dimsArg.split(',').map(Number);
  const data = new Float32Array(dims.reduce((a, b) => a * b, 1));
  // The values do not change the time; a simple pattern in [-1, 1) will do.
  for (let i = 0; i < data.length; i++) data[i] = ((i * 7919) % 2000) / 1000 - 1;
  const feeds = { x: new ort.Tensor('float32', data, dims) };
  for (const t of threadsArg.split(',').map(Number)) {
    const session = await ort.InferenceSession.create(file, {
      intraOpNumThreads: t, interOpNumThreads: 1, executionMode: 'sequential',
      graphOptimizationLevel: 'all',
    });
    const ms = await medianMs(() => session.run(feeds));
    console.log(`${t} ${ms.toFixed(6)}`);
  }
}

main().catch((e) => { console.error(`ort_infer: ${e.message}`); process.exit(1); });
