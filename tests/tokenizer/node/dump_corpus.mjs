// Writes the reference test's corpus (corpus.mjs) as raw bytes, one string per line, for
// `dilaserve bench-tokenizer --input`:   node dump_corpus.mjs COUNT SEED > corpus.txt
import { makeCorpus } from "./corpus.mjs";

const [, , countArg, seedArg] = process.argv;
if (!countArg || !seedArg) {
  console.error("usage: node dump_corpus.mjs COUNT SEED");
  process.exit(2);
}
// No special tokens: the "special" fragments are the plain text <special>, so all of it goes through BPE.
const parts = [];
for (const bytes of makeCorpus(Number(countArg), Number(seedArg), ["<special>"])) parts.push(bytes, Uint8Array.of(10));
process.stdout.write(Buffer.concat(parts));
