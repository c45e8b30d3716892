# Sourced by the device scripts (h200.sh, controls_h200.sh): the environment of a lent GPU machine.
# Installs the carried wheels (.whl/: optuna and its dependencies, absent there) into /tmp/site,
# puts the checkout on PYTHONPATH, rebuilds .carry/data from packed bars (.carry/packed/, made by
# `tsflash data pack`; the store files would not fit the 64 MiB carry) when only those came,
# unpacks previous runs' state (.carry/state*.tar, once per checkout even when two scripts run in
# one call) and records the GPU in $OUT/gpu.txt ($OUT: the
# device tool's return folder).
set -uo pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/tsflash-out}
mkdir -p "$OUT"
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
  export PYTHONPATH=/tmp/site:$PWD
else
  export PYTHONPATH=$PWD
fi
if [ -d .carry/packed ] && [ ! -e .carry/data ]; then
  python3 -m tsflash.cli data unpack .carry/packed --root .carry/data || exit 1
fi
for state in .carry/state*.tar; do
  [ -f "$state" ] && [ ! -e "$state.unpacked" ] && tar xf "$state" && touch "$state.unpacked"
done
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
# Whether a job's exit status fails the call: 124 is a job stopped at the call's limit (resumable, its
# state comes back), not a failure; anything else but 0 is.
job_failed() { [ "$1" -ne 0 ] && [ "$1" -ne 124 ]; }
