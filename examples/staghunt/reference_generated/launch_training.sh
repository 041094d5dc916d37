#!/usr/bin/env bash
# GRPO training on the Stag Hunt game, always through `accelerate launch`.
#   sbatch launch_training.sh [--field value ...]   on a SLURM cluster (one node)
#   bash launch_training.sh [--field value ...]     directly; every argument goes to train.py
# GPUs found with `nvidia-smi -L`: one process per GPU. No GPU: one CPU process (--cpu).
# Environment: PYTHON (interpreter, default python), MAIN_PORT (default 29500).
#SBATCH --job-name=grpo-staghunt
#SBATCH --nodes=1
#SBATCH --ntasks-per-node=1
#SBATCH --gres=gpu:1
#SBATCH --cpus-per-task=8
#SBATCH --mem=64G
#SBATCH --time=24:00:00
#SBATCH --output=slurm-%j.out
set -euo pipefail

# under sbatch the script runs from a spool copy: SLURM_SUBMIT_DIR is the folder it was submitted from
HERE="${SLURM_SUBMIT_DIR:-$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)}"
cd "${HERE}"
PYTHON="${PYTHON:-python}"

GPU_LIST="$(nvidia-smi -L 2>/dev/null || true)"
NUM_GPUS="$(printf '%s\n' "${GPU_LIST}" | grep -c '^GPU' || true)"

if [ "${NUM_GPUS}" -gt 0 ]; then
    DEVICE_ARGS=(--num_processes "${NUM_GPUS}" --main_process_port "${MAIN_PORT:-29500}")
    if [ "${NUM_GPUS}" -gt 1 ]; then
        DEVICE_ARGS+=(--multi_gpu)
    fi
else
    DEVICE_ARGS=(--cpu --num_processes 1)
fi

echo "launch_training.sh: ${NUM_GPUS} GPU(s); accelerate ${DEVICE_ARGS[*]}" >&2
exec "${PYTHON}" -m accelerate.commands.launch \
    "${DEVICE_ARGS[@]}" --num_machines 1 --mixed_precision no --dynamo_backend no \
    train.py "$@"
