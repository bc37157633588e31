#!/usr/bin/env bash
# The performance regression check of a GPU CI runner: runs zero_bench (or offload_bench) on the chosen
# configurations with --repeat, compares them with a baseline results file kept in the repository, writes a
# Markdown summary (configuration, baseline, now, change, noise, verdict) and exits 1 on a regression, 0
# without one, 2 when the check cannot be made (bad flags, a baseline that shares no configuration).
# A throughput drop counts only when it exceeds both --max-regression (default 5%) and the noise of the two
# runs; GPU peak memory is compared with --max-regression alone.
#
# Usage: scripts/regression_check.sh BASELINE.json [PROGRAM FLAGS...]
#   RANKS (default: one per visible GPU, 1 without a GPU), PROGRAM (zero_bench or offload_bench; default
#   zero_bench), REPEAT (default 2), OUT (default: a new folder under results/regression), BIN (build/bin),
#   MPIEXEC (mpirun) and MPIRUN_ARGS (more mpirun flags, e.g. --oversubscribe).
#   The summary goes to $GITHUB_STEP_SUMMARY when set (GitHub Actions shows it on the run's page) and to
#   OUT/summary.md. Example:
#     scripts/regression_check.sh ci/baselines/gpt2_2xH100.json --model gpt2 --batch-size 8 --seq-length 1024 --stages 1 2
# To make or renew a baseline, run the same command without one and commit the results JSON it wrote.
set -uo pipefail
cd "$(dirname "$0")/.."
usage="usage: scripts/regression_check.sh BASELINE.json [PROGRAM FLAGS...]"
baseline=${1:?$usage}
shift
[[ -r $baseline ]] || { echo "regression_check: the baseline $baseline cannot be read" >&2; exit 2; }
program=${PROGRAM:-zero_bench} bin=${BIN:-build/bin}
[[ $program == zero_bench || $program == offload_bench ]] || {
  echo "regression_check: PROGRAM must be zero_bench or offload_bench, got '$program'" >&2; exit 2; }
if [[ -z ${RANKS:-} ]]; then
  RANKS=$(nvidia-smi -L 2>/dev/null | wc -l)
  ((RANKS > 0)) || RANKS=1
fi
out=${OUT:-results/regression/$(date -u +%Y%m%d_%H%M%S)_$$}
mkdir -p "$out"

# shellcheck disable=SC2086
"${MPIEXEC:-mpirun}" -np "$RANKS" --bind-to none ${MPIRUN_ARGS:-} "$bin/$program" --repeat "${REPEAT:-2}" "$@" --baseline "$baseline" \
  --output-dir "$out" 2>&1 | tee "$out/console.log"
status=${PIPESTATUS[0]}

summary=$(ls -t "$out"/*_regression.md 2>/dev/null | head -1)
if [[ -n $summary ]]; then
  cp "$summary" "$out/summary.md"
  [[ -n ${GITHUB_STEP_SUMMARY:-} ]] && cat "$summary" >> "$GITHUB_STEP_SUMMARY"
  echo "regression_check: summary in $out/summary.md"
fi
exit "$status"
