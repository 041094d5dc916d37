#!/usr/bin/env bash
# GRPO training of LLM agents in Spread (mpe2's simple_spread), always through `accelerate launch`.
#   sbatch launch_training.sh [--field value ...]   on a SLURM cluster (one node)
#   bash launch_training.sh [--field value ...]     directly; every argument goes to train.py, last
# Probe at generation time: `nvidia-smi -L` found no GPU and SLURM was not installed, so the header asks for one
# GPU node, as the formal run wants one. At run time the GPUs are counted again: one process per GPU (a
# CUDA_VISIBLE_DEVICES set by the user or the scheduler narrows them down). No GPU: one CPU process (--cpu), or
# CPU_PROCESSES gloo processes on the CPU (e.g. CPU_PROCESSES=2 for a distributed check).
# Environment: PYTHON (interpreter, default python), MAIN_PORT (default 29500), CPU_PROCESSES (default 1).
#SBATCH --job-name=grpo-spread
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

# count GPUs without `cmd | head` (SIGPIPE under pipefail): nvidia-smi -L prints one "GPU i: ..." line each
GPU_LIST="$(nvidia-smi -L 2>/dev/null || true)"
NUM_GPUS="$(printf '%s\n' "${GPU_LIST}" | grep -c '^GPU' || true)"
if [ -n "${CUDA_VISIBLE_DEVICES:-}" ] && [ "${NUM_GPUS}" -gt 0 ]; then
    IFS=',' read -r -a VISIBLE <<< "${CUDA_VISIBLE_DEVICES}"
    if [ "${#VISIBLE[@]}" -lt "${NUM_GPUS}" ]; then
        NUM_GPUS="${#VISIBLE[@]}"
    fi
fi

if [ "${NUM_GPUS}" -gt 0 ]; then
    DEVICE_ARGS=(--num_processes "${NUM_GPUS}" --main_process_port "${MAIN_PORT:-29500}")
    if [ "${NUM_GPUS}" -gt 1 ]; then
        DEVICE_ARGS+=(--multi_gpu)
    fi
elif [ "${CPU_PROCESSES:-1}" -gt 1 ]; then
    # --cpu starts one process; --multi_gpu with ACCELERATE_USE_CPU makes a gloo group on the CPU
    export ACCELERATE_USE_CPU=true
    DEVICE_ARGS=(--multi_gpu --num_processes "${CPU_PROCESSES}" --main_process_port "${MAIN_PORT:-29500}")
else
    DEVICE_ARGS=(--cpu --num_processes 1)
fi

echo "launch_training.sh: ${NUM_GPUS} GPU(s); accelerate ${DEVICE_ARGS[*]}" >&2
# precision is train.py's --use_bf16 (bf16 weights on a GPU), so accelerate's own setting stays "no"
exec "${PYTHON}" -m accelerate.commands.launch \
    "${DEVICE_ARGS[@]}" --num_machines 1 --mixed_precision no --dynamo_backend no \
    train.py "$@"
