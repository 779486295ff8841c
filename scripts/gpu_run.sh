#!/usr/bin/env bash
# The one GPU command (docs/benchmarks/gpu.md). On the GPU machine, from the repository root, with the
# wheelhouse of scripts/gpu_wheelhouse.py carried in .whl/:
#
#     scripts/gpu_run.sh OUT_DIR
#
# makes a venv that sees the image's packages (torch, transformers, ...), installs the carried wheels with
# --no-deps and neoembed itself, unpacks the carried WordNet package, then runs scripts/gpu_bench.py: every
# stage in its own process under a 9-minute limit, kept when it passed before (a second window goes on where
# the first stopped). Results stay in $RESULTS (runs/bench/gpu) and go packed to OUT_DIR/gpu-results.tar.gz,
# with gpu.md and gpu.json beside it. Set BUDGET_S to the seconds the command may take (default 540), STAGES
# to run only some (comma-separated names, or a named set: fast-by-default, issue 41's, about 7 minutes),
# WORDNET_BUILD to a carried `build-data` output for contrastive.
set -uo pipefail
OUT_DIR=${1:?usage: scripts/gpu_run.sh OUT_DIR}
RESULTS=${RESULTS:-runs/bench/gpu}
VENV=${VENV:-/tmp/neoembed-gpu}
WHEELS=${WHEELS:-.whl}
BUDGET_S=${BUDGET_S:-540}
mkdir -p "$OUT_DIR" "$RESULTS"

if [ ! -x "$VENV/bin/neoembed" ]; then
    python3 -m venv --system-site-packages "$VENV" || exit 1
    # The image's python3 is itself a venv, whose packages --system-site-packages does not reach: name its
    # site-packages in a .pth, after the new venv's own (so the carried wheels win).
    parent=$(python3 -c 'import site; print(site.getsitepackages()[0])')
    child=$("$VENV/bin/python" -c 'import site; print(site.getsitepackages()[0])')
    echo "$parent" > "$child/gpu-image.pth"
    "$VENV/bin/python" -m pip install -q --no-index --no-deps --no-compile "$WHEELS"/*.whl || exit 1
    "$VENV/bin/python" -m pip install -q --no-index --no-deps --no-build-isolation -e . || exit 1
fi
"$VENV/bin/python" -m pip check > "$RESULTS/pip-check.txt" 2>&1  # version conflicts with the image, recorded

deb=$(ls "$WHEELS"/wordnet-base_*.deb 2>/dev/null | head -1)
if [ -n "$deb" ]; then
    dpkg-deb -x "$deb" /tmp/wordnet-root && export NEOEMBED_WORDNET_DIR=/tmp/wordnet-root/usr/share/wordnet
fi

deb=$(ls "$WHEELS"/dict-foldoc_*.deb 2>/dev/null | head -1)
if [ -n "$deb" ]; then
    dpkg-deb -x "$deb" /tmp/foldoc-root && export NEOEMBED_FOLDOC_DIR=/tmp/foldoc-root/usr/share/dictd
fi
[ -d "$WHEELS/minilm-tokenizer" ] && export NEOEMBED_MINILM_DIR="$PWD/$WHEELS/minilm-tokenizer"

extra=()
[ -n "${WORDNET_BUILD:-}" ] && extra+=(--wordnet-build "$WORDNET_BUILD")
[ -n "${STAGES:-}" ] && extra+=(--stages "$STAGES")
[ -n "${DRY_RUN:-}" ] && extra+=(--dry-run)  # tiny sizes on the CPU: checks this script where there is no GPU
"$VENV/bin/python" scripts/gpu_bench.py run --out "$RESULTS" --budget-s "$BUDGET_S" "${extra[@]}"
status=$?

# Weights and checkpoints stay behind: the JSON, Markdown, logs and metrics are what comes back.
tar -czf "$OUT_DIR/gpu-results.tar.gz" --exclude='*.safetensors' --exclude='*.bin' --exclude='*.pt' \
    --exclude='checkpoint-*' --exclude='corpus.txt' -C "$(dirname "$RESULTS")" "$(basename "$RESULTS")"
cp "$RESULTS"/gpu.md "$RESULTS"/gpu.json "$RESULTS"/environment.json "$OUT_DIR"/ 2>/dev/null
exit $status
