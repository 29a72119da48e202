#!/usr/bin/env bash
# The GPU checks, as one script for a lent GPU machine (see benchmarks/README.md, "GPU"): the `gpu`-marked tests
# and the GPU benchmarks, with their output under $OUT (or ./gpu_out). Wheels missing on that machine (dask,
# distributed, optuna, cryptography, ...) may be carried in ./.whl and are installed into /tmp/site first.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-$PWD/gpu_out}"
mkdir -p "$OUT"
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    || exit 1
  export PYTHONPATH="/tmp/site:$PWD"
else
  export PYTHONPATH="$PWD"
fi
export PYTHONUNBUFFERED=1 TMPDIR="${TMPDIR:-/tmp}"
{ nvidia-smi -L; python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.cuda.is_available())"; } \
  2>&1 | tee "$OUT/device.txt"
# tests/train/test_frameworks_gpu.py (FSDP2 on 1-2 GPUs, DeepSpeed ZeRO-2/3, RayDeepSpeedStrategy, JAX) is among
# them: its DeepSpeed/Lightning/JAX tests skip where the image lacks those packages (carry their wheels in .whl).
# only the files that hold gpu tests: the others may import what the device lacks (mlflow); pytest-benchmark, if
# the device image has it, would leave .benchmarks/ in the checkout (the suite's litter check)
files=$(grep -rl "pytest.mark.gpu" tests --include="test_*.py")
timeout "${GPU_TEST_TIMEOUT:-300}" python3 -m pytest -q -m gpu -p no:cacheprovider -p no:benchmark -o addopts="" \
  --timeout=240 $files 2>&1 | tee "$OUT/gpu_tests.log"
echo "pytest exit: ${PIPESTATUS[0]}" | tee -a "$OUT/gpu_tests.log"
for bench in ${GPU_BENCHMARKS:-benchmarks/gpu_packing.py}; do
  [ -f "$bench" ] || continue
  name=$(basename "$bench" .py)
  timeout "${GPU_BENCH_TIMEOUT:-200}" python3 "$bench" > "$OUT/$name.json" 2> "$OUT/$name.err"
  echo "$bench exit: $?" | tee -a "$OUT/gpu_tests.log"
done
exit 0
