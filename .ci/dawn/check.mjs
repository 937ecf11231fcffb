// Tint front-end check: compile each WGSL file given on the command line with Dawn
// (npm `webgpu`) and print one JSON line per file:
//   {"file": ..., "errors": n, "warnings": n, "messages": [...]}
// then a final {"done": n}. Exit 0 when every module was checked (whatever it found),
// 2 with no adapter or device, 3 when getCompilationInfo did not resolve in time.
// Features requested: subgroups and shader-f16 (the sources carry `enable` lines).
import { create, globals } from 'webgpu';

Object.assign(globalThis, globals);
const files = process.argv.slice(2);
const fs = await import('node:fs');
const gpu = create([]);
const adapter = await gpu.requestAdapter();
if (!adapter) {
  console.log(JSON.stringify({ fatal: 'no adapter (set VK_DRIVER_FILES to a Mesa >= 25 lavapipe)' }));
  process.exit(2);
}
const want = ['subgroups', 'shader-f16'];
const missing = want.filter((f) => !adapter.features.has(f));
if (missing.length) {
  console.log(JSON.stringify({ fatal: `adapter lacks ${missing.join(', ')}` }));
  process.exit(2);
}
const device = await adapter.requestDevice({ requiredFeatures: want });
device.addEventListener('uncapturederror', () => {});

const timeout = (ms) => new Promise((resolve) => setTimeout(() => resolve(null), ms));
let done = 0;
for (const file of files) {
  const code = fs.readFileSync(file, 'utf8');
  const module = device.createShaderModule({ code, label: file });
  const info = await Promise.race([module.getCompilationInfo(), timeout(30000)]);
  if (info === null) {
    console.log(JSON.stringify({ fatal: `getCompilationInfo did not resolve for ${file}` }));
    process.exit(3);
  }
  const messages = info.messages.map((m) => ({
    type: m.type,
    line: m.lineNum,
    col: m.linePos,
    message: m.message,
  }));
  console.log(JSON.stringify({
    file,
    errors: messages.filter((m) => m.type === 'error').length,
    warnings: messages.filter((m) => m.type === 'warning').length,
    messages,
  }));
  done += 1;
}
console.log(JSON.stringify({ done }));
device.destroy();
process.exit(0);
