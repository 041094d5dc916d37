#!/usr/bin/env bash
# GRPO training on the Crossing game.
#   sbatch launch_training.sh [--field value ...]   on a SLURM cluster (raise --nodes for several nodes)
#   bash launch_training.sh [--field value ...]     directly; arguments are passed to train.py
# Probe at generation time: no GPU, 2 CPUs, 24 GiB, SLURM on one CPU node. So the header asks for no GPU and
# what the node has; on a GPU node add `#SBATCH --gres=gpu:N` and raise --cpus-per-task and --mem.
# Always `accelerate launch`: one process per GPU; without a GPU one CPU process, or CPU_PROCESSES gloo
# processes per node (e.g. CPU_PROCESSES=2 for a distributed check); on several nodes one group spans them all.
# USE_DEEPSPEED=1 shards parameters, gradients and optimizer states with ZeRO-3 (models too big for one GPU).
#SBATCH --job-name=grpo-crossing
#SBATCH --nodes=1
#SBATCH --ntasks-per-node=1
#SBATCH --cpus-per-task=2
#SBATCH --mem=8G
#SBATCH --time=24:00:00
#SBATCH --output=slurm-%j.out
set -euo pipefail

HERE="${SLURM_SUBMIT_DIR:-$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)}"
cd "${HERE}"
PYTHON="${PYTHON:-python}"
NUM_NODES="${SLURM_NNODES:-1}"

# several nodes: one launcher per node, each with its own machine rank
if [ "${NUM_NODES}" -gt 1 ] && [ -z "${GRPO_PER_NODE:-}" ]; then
    export GRPO_PER_NODE=1
    exec srun --nodes="${NUM_NODES}" --ntasks-per-node=1 --kill-on-bad-exit=1 bash "${HERE}/launch_training.sh" "$@"
fi

NUM_GPUS=$( (nvidia-smi -L 2>/dev/null || true) | grep -c '^GPU' || true)
if [ "${NUM_GPUS}" -gt 0 ]; then
    PER_NODE="${NUM_GPUS}"
    DEVICE_ARGS=()
else
    PER_NODE="${CPU_PROCESSES:-1}"
    if [ "$((PER_NODE * NUM_NODES))" -eq 1 ]; then
        exec "${PYTHON}" -m accelerate.commands.launch --cpu --num_processes 1 --num_machines 1 \
            --mixed_precision no --dynamo_backend no train.py "$@"
    fi
    # accelerate's --cpu starts one process; --multi_gpu with ACCELERATE_USE_CPU makes a gloo group on CPU,
    # across the nodes too
    export ACCELERATE_USE_CPU=true
    DEVICE_ARGS=(--multi_gpu)
fi

MAIN_ADDR="127.0.0.1"
if [ -n "${SLURM_JOB_NODELIST:-}" ]; then
    # awk reads every line: `head -n 1` would close the pipe early and kill scontrol with SIGPIPE
    MAIN_ADDR=$(scontrol show hostnames "${SLURM_JOB_NODELIST}" | awk 'NR == 1')
fi
DEEPSPEED_ARGS=()
if [ "${USE_DEEPSPEED:-0}" = "1" ]; then
    DEEPSPEED_ARGS=(--use_deepspeed --zero_stage 3 --zero3_init_flag true --zero3_save_16bit_model true
                    --gradient_accumulation_steps 1 --gradient_clipping 1.0)
fi
exec "${PYTHON}" -m accelerate.commands.launch "${DEVICE_ARGS[@]}" \
    --num_processes $((PER_NODE * NUM_NODES)) --num_machines "${NUM_NODES}" \
    --machine_rank "${SLURM_NODEID:-0}" --main_process_ip "${MAIN_ADDR}" --main_process_port "${MAIN_PORT:-29500}" \
    --mixed_precision no --dynamo_backend no "${DEEPSPEED_ARGS[@]}" \
    train.py "$@"
