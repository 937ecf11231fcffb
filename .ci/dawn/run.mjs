// Runs deltatape kernels on Dawn: each argument is a case directory written by
// tests/dawn.rs (dawn_runs_kernels) holding case.json, the kernel's WGSL, the uniform
// parameters and every input buffer. Writes each written buffer back as <name>.out and
// prints one JSON line per case: {"case": dir, "ok": true} or {"case": dir, "error": ...}.
// then {"done": n}. Exit 2 with no adapter or device.
import { create, globals } from 'webgpu';
import fs from 'node:fs';
import path from 'node:path';

Object.assign(globalThis, globals);
const cases = process.argv.slice(2).map((dir) => ({
  dir,
  spec: JSON.parse(fs.readFileSync(path.join(dir, 'case.json'), 'utf8')),
}));
const gpu = create([]);
const adapter = await gpu.requestAdapter();
if (!adapter) {
  console.log(JSON.stringify({ fatal: 'no adapter (set VK_DRIVER_FILES to a Mesa >= 25 lavapipe)' }));
  process.exit(2);
}
const features = ['subgroups', 'shader-f16'].filter((f) => adapter.features.has(f));
const storage = Math.max(8, ...cases.map((c) => c.spec.bindings.length));
if (storage > adapter.limits.maxStorageBuffersPerShaderStage) {
  console.log(JSON.stringify({ fatal: `adapter allows ${adapter.limits.maxStorageBuffersPerShaderStage} storage buffers, ${storage} needed` }));
  process.exit(2);
}
const device = await adapter.requestDevice({
  requiredFeatures: features,
  requiredLimits: { maxStorageBuffersPerShaderStage: storage },
});
console.log(JSON.stringify({
  adapter: adapter.info.description || adapter.info.vendor,
  subgroupMinSize: adapter.info.subgroupMinSize,
  subgroupMaxSize: adapter.info.subgroupMaxSize,
  features,
}));

const bytes = (dir, file) => new Uint8Array(fs.readFileSync(path.join(dir, file)));

async function run({ dir, spec }) {
  device.pushErrorScope('validation');
  device.pushErrorScope('internal');
  const module = device.createShaderModule({ code: fs.readFileSync(path.join(dir, spec.wgsl), 'utf8'), label: spec.wgsl });
  const pipeline = device.createComputePipeline({ layout: 'auto', compute: { module, entryPoint: 'main' } });
  const make = (data, usage) => {
    const size = Math.max(4, data.byteLength);
    const buffer = device.createBuffer({ size, usage: usage | GPUBufferUsage.COPY_DST | GPUBufferUsage.COPY_SRC });
    if (data.byteLength) device.queue.writeBuffer(buffer, 0, data);
    return buffer;
  };
  const params = make(bytes(dir, spec.params), GPUBufferUsage.UNIFORM);
  const buffers = spec.bindings.map((b) =>
    make(b.input ? bytes(dir, b.input) : new Uint8Array(b.bytes), GPUBufferUsage.STORAGE));
  const bindGroup = device.createBindGroup({
    layout: pipeline.getBindGroupLayout(0),
    entries: [{ binding: 0, resource: { buffer: params } }].concat(
      buffers.map((buffer, i) => ({ binding: i + 1, resource: { buffer } }))),
  });
  const encoder = device.createCommandEncoder();
  const pass = encoder.beginComputePass();
  pass.setPipeline(pipeline);
  pass.setBindGroup(0, bindGroup);
  pass.dispatchWorkgroups(spec.grid[0], spec.grid[1], 1);
  pass.end();
  const reads = [];
  spec.bindings.forEach((b, i) => {
    if (!b.output) return;
    const rb = device.createBuffer({ size: buffers[i].size, usage: GPUBufferUsage.MAP_READ | GPUBufferUsage.COPY_DST });
    encoder.copyBufferToBuffer(buffers[i], 0, rb, 0, buffers[i].size);
    reads.push([b, rb]);
  });
  device.queue.submit([encoder.finish()]);
  const errors = [await device.popErrorScope(), await device.popErrorScope()].filter((e) => e);
  if (errors.length) throw new Error(errors.map((e) => e.message).join('\n'));
  for (const [b, rb] of reads) {
    await rb.mapAsync(GPUMapMode.READ);
    fs.writeFileSync(path.join(dir, b.output), new Uint8Array(rb.getMappedRange()).slice(0, b.bytes));
    rb.unmap();
    rb.destroy();
  }
  for (const b of buffers) b.destroy();
  params.destroy();
}

let done = 0;
for (const c of cases) {
  const t = performance.now();
  try {
    await run(c);
    console.log(JSON.stringify({ case: c.dir, ok: true, ms: Math.round(performance.now() - t) }));
  } catch (e) {
    console.log(JSON.stringify({ case: c.dir, error: String(e && e.message || e) }));
  }
  done += 1;
}
console.log(JSON.stringify({ done }));
device.destroy();
process.exit(0);
