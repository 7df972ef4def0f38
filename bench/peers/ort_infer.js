// Times an ONNX model (input "x", a deterministic f32 tensor) in
// onnxruntime-node: node ort_infer.js MODEL.onnx DIM,DIM,... THREADS,...
// prints "THREADS MS" lines, the median of timed runs after a warm-up.
// With "--serve" after one thread count, it prints "ready" after warm-up
// and answers each stdin line "run K" with the median ms of K runs, and
// "stats" with "FIRST_MS PEAK_BYTES": session creation + first run, and
// the growth of resident memory from just before the session to its
// high-water mark (/proc/self/clear_refs, VmHWM) after warm-up.
const fs = require('fs');
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

// A line of /proc/self/status ("VmRSS:", "VmHWM:") in bytes.
function statusBytes(key) {
  const line = fs.readFileSync('/proc/self/status', 'utf8').split('\n').find((l) => l.startsWith(key));
  return line ? Number(line.slice(key.length).trim().split(/\s+/)[0]) * 1024 : NaN;
}

async function serve(session, feeds, firstMs, baseBytes) {
  for (let i = 0; i < 10; i++) await session.run(feeds);
  const peak = statusBytes('VmHWM:') - baseBytes;
  console.log('ready');
  const lines = require('readline').createInterface({ input: process.stdin });
  for await (const line of lines) {
    const words = line.trim().split(/\s+/);
    if (words[0] === 'stats') {
      console.log(`${firstMs.toFixed(6)} ${peak}`);
      continue;
    }
    if (words.length !== 2 || words[0] !== 'run') {
      console.log('error');
      continue;
    }
    const samples = [];
    for (let i = 0; i < Math.max(1, Number(words[1])); i++) {
      const t0 = process.hrtime.bigint();
      await session.run(feeds);
      samples.push(Number(process.hrtime.bigint() - t0) / 1e6);
    }
    samples.sort((a, b) => a - b);
    const n = samples.length;
    const med = n % 2 ? samples[(n - 1) / 2] : (samples[n / 2 - 1] + samples[n / 2]) / 2;
    console.log(med.toFixed(6));
  }
}

async function main() {
  const [file, dimsArg, threadsArg, mode] = process.argv.slice(2);
  const dims = dimsArg.split(',').map(Number);
  const data = new Float32Array(dims.reduce((a, b) => a * b, 1));
  // The values do not change the time; a simple pattern in [-1, 1) will do.
  for (let i = 0; i < data.length; i++) data[i] = ((i * 7919) % 2000) / 1000 - 1;
  const feeds = { x: new ort.Tensor('float32', data, dims) };
  for (const t of threadsArg.split(',').map(Number)) {
    fs.writeFileSync('/proc/self/clear_refs', '5');
    const base = statusBytes('VmRSS:');
    const t0 = process.hrtime.bigint();
    const session = await ort.InferenceSession.create(file, {
      intraOpNumThreads: t, interOpNumThreads: 1, executionMode: 'sequential',
      graphOptimizationLevel: 'all',
    });
    if (mode === '--serve') {
      await session.run(feeds);
      await serve(session, feeds, Number(process.hrtime.bigint() - t0) / 1e6, base);
      return;
    }
    const ms = await medianMs(() => session.run(feeds));
    console.log(`${t} ${ms.toFixed(6)}`);
  }
}

main().catch((e) => { console.error(`ort_infer: ${e.message}`); process.exit(1); });
