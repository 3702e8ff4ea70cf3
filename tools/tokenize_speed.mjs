// tokenize_speed.mjs: MB/s of Hugging Face's Rust tokenizers (the `tokenizers` npm package,
// HF's official Node bindings of the Rust library, prebuilt binaries) on a corpus, the reference
// bench/tokenize_vs_hf.sh holds braid prepare-data against.
//
//   npm install --prefix /tmp/hf tokenizers
//   node tools/tokenize_speed.mjs /tmp/hf data/tokenizers/gpt2/tokenizer.json data/sotu [ROUNDS=3]
//
// Every *.txt file under CORPUS_DIR (sorted) is one document, read as UTF-8 before the clock
// starts; what is timed is encoding alone (HF's defaults: special tokens matched, the
// post-processor's tokens added), so reading, writing and the document order are braid's
// costs only. Two runs, best of ROUNDS each:
//   single  tokenizer.encode(doc) per document, one after the other: one core
//   batch   tokenizer.encodeBatch(all documents): Rust's rayon pool over every core
//           (RAYON_NUM_THREADS caps it)
// Prints one line per run:
//   hf <run> MB/s <x> cpu_MB/s <c> tokens/s <y> tokens <n> bytes <b> threads <t>
// MB/s is over the best round's wall time; cpu_MB/s over that round's CPU time (user + system,
// every thread of the process), which a machine shared with other work changes less.
import { createRequire } from "node:module";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";

const [prefix, tokenizerJson, corpusDir, roundsArg] = process.argv.slice(2);
if (!prefix || !tokenizerJson || !corpusDir) {
  console.error(
    "usage: node tools/tokenize_speed.mjs NPM_PREFIX TOKENIZER_JSON CORPUS_DIR [ROUNDS]",
  );
  process.exit(2);
}
const rounds = Number(roundsArg ?? 3);
const require = createRequire(path.resolve(prefix) + "/");
const { Tokenizer } = require("tokenizers");
const version = JSON.parse(
  fs.readFileSync(path.join(prefix, "node_modules/tokenizers/package.json"), "utf8"),
).version;

function textFiles(dir) {
  const out = [];
  for (const e of fs.readdirSync(dir, { withFileTypes: true })) {
    const p = path.join(dir, e.name);
    if (e.isDirectory()) out.push(...textFiles(p));
    else if (e.isFile() && e.name.endsWith(".txt")) out.push(p);
  }
  return out.sort();
}

const docs = textFiles(corpusDir).map((f) => fs.readFileSync(f, "utf8"));
if (docs.length === 0) {
  console.error(`tokenize_speed: no .txt files under '${corpusDir}'`);
  process.exit(1);
}
const bytes = docs.reduce((n, d) => n + Buffer.byteLength(d, "utf8"), 0);
const tokenizer = Tokenizer.fromFile(tokenizerJson);
const threads = Number(process.env.RAYON_NUM_THREADS || os.availableParallelism());

async function single() {
  let tokens = 0;
  for (const d of docs) tokens += (await tokenizer.encode(d)).getIds().length;
  return tokens;
}
async function batch() {
  const encodings = await tokenizer.encodeBatch(docs);
  return encodings.reduce((n, e) => n + e.getIds().length, 0);
}

console.log(
  `hf tokenizers ${version} (Rust, node ${process.version}): ${docs.length} documents, ` +
    `${(bytes / 1e6).toFixed(2)} MB`,
);
for (const [name, run, t] of [
  ["single", single, 1],
  ["batch", batch, threads],
]) {
  let best = Infinity;
  let bestCpu = Infinity;
  let tokens = 0;
  for (let r = 0; r < rounds; ++r) {
    const t0 = process.hrtime.bigint();
    const c0 = process.cpuUsage();
    tokens = await run();
    const secs = Number(process.hrtime.bigint() - t0) / 1e9;
    const cpu = process.cpuUsage(c0);
    if (secs < best) {
      best = secs;
      bestCpu = (cpu.user + cpu.system) / 1e6;
    }
  }
  console.log(
    `hf ${name} MB/s ${(bytes / 1e6 / best).toFixed(2)} cpu_MB/s ` +
      `${(bytes / 1e6 / bestCpu).toFixed(2)} tokens/s ${Math.round(tokens / best)} ` +
      `tokens ${tokens} bytes ${bytes} threads ${t}`,
  );
}
