"""Is a proposed training config possible on these GPUs? Memory arithmetic and proposal checks.

``estimate_memory`` adds up what one training process holds, from the model's shape and the config's
values by role (``roles.py``: micro_batch, precision, token caps, ...; a role the researcher's config
lacks is given a stated assumption), for a template that trains the usual way: plain ``torch.optim.AdamW`` on the policy,
``accelerate`` data parallel without ZeRO, an optional frozen reference model, gradient
checkpointing as configured. ``check_proposal`` catches proposals that change field names or types,
or that the config's own validation rejects, before anything runs.

The arithmetic, with P parameters and b bytes per value (2 in bf16/fp16, 4 in fp32; runs without a
GPU are taken to be fp32 whatever the precision field says):

* weights = P x b
* reference = P x b when the KL coefficient is > 0 (a frozen copy), else 0 (none is loaded)
* optimizer = P x 2 x b: torch's AdamW allocates ``exp_avg`` and ``exp_avg_sq`` with
  ``zeros_like(param)``, so in the parameters' dtype (bf16 here), not 2 x fp32 = 8 bytes/param as
  mixed-precision trainers with fp32 master weights do
* gradients = P x b
* activations = micro_batch x seq_len x hidden x layers x b x k: with gradient checkpointing only
  each layer's input survives the forward (k = 2 leaves room for the one layer being recomputed);
  without it attention, MLP and norm intermediates of every layer stay alive (k = 16)
* logits = micro_batch x seq_len x vocab x 4 bytes x 2: the fp32 logits and the fp32 log-softmax
* kv_cache = 2 (K and V) x layers x kv_heads x head_dim x b x (group size x agents) x seq_len:
  one rollout stage generates for every (episode, agent) pair of the group in one batch

seq_len defaults to a 1024-token prompt budget + the thinking cap + the action cap (the action stage's
prompt holds the thinking; one shared cap counts twice).

Rollouts and updates alternate, and the template frees gradients after each optimiser step
(``zero_grad(set_to_none=True)``), so the peak is::

    total = weights + reference + optimizer + max(gradients + activations + logits, kv_cache)

Data parallel copies everything to every GPU (no ZeRO sharding), so per GPU = total, and the config
fits when that is at most 90% of the smallest GPU (the rest is CUDA context, allocator fragmentation
and the transient reference forward). Without a GPU it is compared with 90% of system RAM.

Calibration: Qwen3-4B with a reference, AdamW, gradient checkpointing, micro-batch 8 x 728 tokens
measured a 49 GB peak on one H100; this arithmetic gives 46.05 GiB (49.5 GB) for that case.

A run that goes through SLURM trains on the cluster's nodes, not here: without a GPU its process is
compared with the smallest node's memory (``training_ram``), and a job whose request (``#SBATCH`` lines
and sbatch's options: nodes, tasks and CPUs, memory, GPUs, partition) no set of the cluster's nodes
can meet is refused before it is submitted, with every node's size (``unmet``), and so is one that asks more than
its partition allows (``over_limits``: MaxTime, MaxNodes, MaxMemPerNode, MaxCPUsPerNode), with both numbers.
"""

from __future__ import annotations

import math
import re
import shlex
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from orchestrator.sources.config_file import Opaque, value_kind

from orchestrator.training.machine import GPU, ProbeResult, SlurmCluster, _memory_total_gib
from orchestrator.training.slurm_site import clock, slurm_seconds

GIB = 2**30
PROMPT_BUDGET_TOKENS = 1024
# what the arithmetic assumes for a role the researcher's config has no field for
ASSUMED: dict[str, Any] = {"precision": True, "thinking_cap": 512, "action_cap": 512, "micro_batch": 8,
                           "checkpointing": False, "group_generations": 8, "agent_count": 2, "kl_coef": 0.0}
USABLE_FRACTION = 0.9
ACTIVATION_FACTOR_CHECKPOINTED = 2
ACTIVATION_FACTOR_FULL = 16


@dataclass(frozen=True)
class ModelShape:
    num_params: int
    hidden_size: int
    num_layers: int
    vocab_size: int
    num_kv_heads: int
    head_dim: int


_QWEN3_4B = ModelShape(num_params=4_022_468_096, hidden_size=2560, num_layers=36, vocab_size=151936,
                       num_kv_heads=8, head_dim=128)
KNOWN_SHAPES: dict[str, ModelShape] = {
    "Qwen/Qwen3-4B-Instruct-2507": _QWEN3_4B,
    "Qwen/Qwen3-4B-Thinking-2507": _QWEN3_4B,
    "Qwen/Qwen3-4B": _QWEN3_4B,
}


@dataclass(frozen=True)
class MemoryEstimate:
    weights_gib: float
    reference_gib: float
    optimizer_gib: float
    gradients_gib: float
    activations_gib: float
    logits_gib: float
    kv_cache_gib: float
    total_gib: float
    per_gpu_gib: float
    available_gib: float
    fits: bool
    explanation: str  # the arithmetic, one line per term, for a human to check


# ---------------------------------------------------------------- model shape


def shape_of(model_name_or_path: str) -> ModelShape | None:
    """The shape of a local model folder or cached hub id, else of a known hub id; None when unknown."""
    from transformers import AutoConfig

    try:
        config = AutoConfig.from_pretrained(model_name_or_path, local_files_only=True)
    except (OSError, ValueError):
        return KNOWN_SHAPES.get(model_name_or_path)
    return shape_from_config(config)


def shape_from_config(config: Any) -> ModelShape | None:
    """The shape of a transformers config; parameters are counted on a model built on the meta device."""
    import torch
    from transformers import AutoModelForCausalLM

    text = config.get_text_config()
    try:
        # parameters on the meta device cost no memory and count tied embeddings once
        with torch.device("meta"):
            model = AutoModelForCausalLM.from_config(config)
    except (ValueError, KeyError):  # not a causal LM transformers can build
        return None
    heads = text.num_attention_heads
    return ModelShape(
        num_params=sum(p.numel() for p in model.parameters()),
        hidden_size=text.hidden_size,
        num_layers=text.num_hidden_layers,
        vocab_size=text.vocab_size,
        num_kv_heads=getattr(text, "num_key_value_heads", None) or heads,
        head_dim=getattr(text, "head_dim", None) or text.hidden_size // heads,
    )


# ---------------------------------------------------------------- memory


def training_ram(machine: ProbeResult, use_slurm: bool) -> tuple[float, str]:
    """The memory (GiB) a CPU training process gets, and where it is: the smallest SLURM node when the run
    goes through SLURM and the probe saw the nodes, else this machine."""
    sized = [node for node in machine.slurm_nodes if node.memory_mb > 0]
    if use_slurm and sized:
        smallest = min(sized, key=lambda node: node.memory_mb)
        return smallest.memory_mb / 1024, f"the smallest SLURM node, {smallest.name}"
    return machine.memory_total_gib, "system RAM"


def estimate_memory(shape: ModelShape, values: dict, gpus: list[GPU], *, seq_len: int | None = None,
                    system_ram_gib: float | None = None, ram_source: str = "system RAM") -> MemoryEstimate:
    """Peak memory of one training process (see the module docstring for every term).

    ``values`` holds the config's values by role; ``seq_len`` overrides the prompt budget + generation
    caps. Without GPUs the run is on CPU in fp32 and is compared with ``system_ram_gib`` (this
    machine's RAM when not given; ``ram_source`` says whose it is).
    """
    assumed = {role: value for role, value in ASSUMED.items() if values.get(role) is None}
    v = {**ASSUMED, **{role: value for role, value in values.items() if value is not None}}
    on_gpu = bool(gpus)
    b = 2 if on_gpu and half_precision(v["precision"]) else 4
    seq = seq_len or PROMPT_BUDGET_TOKENS + v["thinking_cap"] + v["action_cap"]
    p, mb = shape.num_params, v["micro_batch"]
    checkpointing = v["checkpointing"]
    k = ACTIVATION_FACTOR_CHECKPOINTED if checkpointing else ACTIVATION_FACTOR_FULL
    rollout_rows = v["group_generations"] * v["agent_count"]

    weights = p * b / GIB
    reference = weights if v["kl_coef"] > 0 else 0.0
    optimizer = 2 * weights
    gradients = weights
    activations = mb * seq * shape.hidden_size * shape.num_layers * b * k / GIB
    logits = mb * seq * shape.vocab_size * 4 * 2 / GIB
    kv_cache = 2 * shape.num_layers * shape.num_kv_heads * shape.head_dim * b * rollout_rows * seq / GIB
    update_phase = gradients + activations + logits
    total = weights + reference + optimizer + max(update_phase, kv_cache)

    if on_gpu:
        smallest = min(gpus, key=lambda g: g.memory_total_mib)
        device_gib = smallest.memory_total_mib / 1024
        device = f"smallest GPU: {smallest.name}, {device_gib:.1f} GiB"
    else:
        device_gib = system_ram_gib if system_ram_gib is not None else _memory_total_gib()
        device = f"no GPU: {ram_source} {device_gib:.1f} GiB"
    available = USABLE_FRACTION * device_gib
    fits = total <= available

    dtype = "bf16" if b == 2 else "fp32"
    lines = [
        f"model: {p:.3g} params, hidden {shape.hidden_size}, {shape.num_layers} layers, vocab {shape.vocab_size}, "
        f"{shape.num_kv_heads} KV heads x head_dim {shape.head_dim}; {dtype} -> {b} bytes per value",
        f"weights      {p:.3g} x {b} B = {weights:.2f} GiB",
        f"reference    KL coefficient {v['kl_coef']:g}: " + (f"frozen copy, {p:.3g} x {b} B = {reference:.2f} GiB"
                                                     if reference else "no reference model = 0 GiB"),
        f"optimizer    AdamW exp_avg + exp_avg_sq in the param dtype, {p:.3g} x 2 x {b} B = {optimizer:.2f} GiB",
        f"gradients    {p:.3g} x {b} B = {gradients:.2f} GiB",
        f"activations  micro_batch {mb} x seq {seq} x hidden {shape.hidden_size} x {shape.num_layers} layers x {b} B"
        f" x {k} ({'with' if checkpointing else 'without'} gradient checkpointing) = {activations:.2f} GiB",
        f"logits       micro_batch {mb} x seq {seq} x vocab {shape.vocab_size} x 4 B x 2 (fp32 logits + log-probs)"
        f" = {logits:.2f} GiB",
        f"kv cache     2 x {shape.num_layers} layers x {shape.num_kv_heads} heads x {shape.head_dim} x {b} B x "
        f"{rollout_rows} sequences (group {v['group_generations']} x {v['agent_count']} agents) x seq {seq}"
        f" = {kv_cache:.2f} GiB",
        f"total        weights + reference + optimizer + max(update: gradients + activations + logits "
        f"{update_phase:.2f}, rollout: kv cache {kv_cache:.2f}) = {total:.2f} GiB ({total * GIB / 1e9:.1f} GB)",
        (f"per GPU      data parallel over {len(gpus)} GPU(s) without ZeRO: every GPU holds a full copy "
         f"-> {total:.2f} GiB" if on_gpu else f"per process  {total:.2f} GiB on CPU"),
        f"available    {USABLE_FRACTION:g} x {device_gib:.1f} GiB ({device}) = {available:.2f} GiB "
        f"-> {'fits' if fits else 'does NOT fit'}",
    ]
    if assumed:
        lines.append("assumed      the config has no field for " + ", ".join(f"{r} (taken as {a!r})"
                                                                          for r, a in assumed.items()))
    return MemoryEstimate(
        weights_gib=weights, reference_gib=reference, optimizer_gib=optimizer, gradients_gib=gradients,
        activations_gib=activations, logits_gib=logits, kv_cache_gib=kv_cache, total_gib=total, per_gpu_gib=total,
        available_gib=available, fits=fits, explanation="\n".join(lines),
    )


def half_precision(precision: Any) -> bool:
    """A precision field's value means 16-bit weights: True for a bf16 switch, or a 16-bit dtype name."""
    if value_kind(precision) == "bool":
        return bool(precision)
    return any(name in str(precision).lower() for name in ("bf16", "bfloat16", "fp16", "float16", "half"))


# ---------------------------------------------------------------- proposals


def check_proposal(proposal: dict, base_config: dict, known_fields: set[str], *,
                   config_cls: Callable[..., Any] | None = None) -> list[str]:
    """Problems with a proposed config change, one line each; [] when it can be applied.

    A proposal may change values only: every key must be a known field, every value of its base
    value's type (an int is accepted for a float), and when ``config_cls`` (GRPOConfig) is given, the
    merged config must pass its validation.
    """
    problems: list[str] = []
    accepted: dict[str, Any] = {}
    for name, value in proposal.items():
        if name not in known_fields:
            problems.append(f"{name}: not a config field; a proposal changes values only, never adds new fields")
        elif (expected := _type_problem(value, base_config.get(name))) is not None:
            problems.append(f"{name}: expected {expected}, got {type(value).__name__} {value!r}")
        else:
            accepted[name] = value
    if config_cls is not None:
        try:
            config_cls(**{**base_config, **accepted})
        except (ValueError, TypeError) as exc:
            problems.append(f"invalid value: {exc}")
    return problems


def _type_problem(value: Any, base: Any) -> str | None:
    """The expected type name when ``value`` cannot replace ``base``, else None."""
    if base is None:
        return None
    if isinstance(base, Opaque):  # a default no literal spells (a Path): a proposal cannot give one
        return base.type_name
    expected = type(base)
    # bool is a subclass of int: True must not pass as a batch size, nor 1 as a flag
    if isinstance(value, bool) != isinstance(base, bool):
        return expected.__name__
    if expected is float and isinstance(value, int):
        return None
    return None if isinstance(value, expected) else expected.__name__



# ---------------------------------------------------------------- SLURM node sets

_SHORT_OPTIONS = {"-N": "nodes", "-n": "ntasks", "-c": "cpus-per-task", "-p": "partition", "-G": "gpus", "-t": "time"}
_MEMORY_UNITS = {"K": 1 / 1024, "M": 1, "G": 1024, "T": 1024**2}


@dataclass(frozen=True)
class NodeRequest:
    """What a SLURM job asks of each of its nodes."""

    nodes: int = 1
    cpus_per_node: int = 1
    memory_mb: int | None = None  # None: sbatch's default, or --mem=0 (all of a node)
    gpus_per_node: int = 0
    partitions: tuple[str, ...] = ()  # () = the default partition
    time_s: int | None = None  # --time in seconds; None: not asked (the partition's DefaultTime or MaxTime)

    def describe(self) -> str:
        memory = f"{self.memory_mb} MB" if self.memory_mb is not None else "any memory"
        where = f" in partition {','.join(self.partitions)}" if self.partitions else ""
        return (f"{self.nodes} node(s){where} with {self.cpus_per_node} CPUs, {memory} and "
                f"{self.gpus_per_node} GPU(s) each")


def sbatch_options(script_text: str) -> list[str]:
    """The script's ``#SBATCH`` options, read as sbatch reads them: up to the first command."""
    options: list[str] = []
    for line in script_text.splitlines()[1:]:
        stripped = line.strip()
        if stripped and not stripped.startswith("#"):
            break
        if stripped.startswith("#SBATCH"):
            try:
                options += shlex.split(stripped[len("#SBATCH"):], comments=True)
            except ValueError:
                continue
    return options


def _option_values(options: Sequence[str]) -> dict[str, str]:
    """Long option name -> value, the last one winning; short options under their long names."""
    found: dict[str, str] = {}
    items = list(options)
    i = 0
    while i < len(items):
        item = items[i]
        i += 1
        if item.startswith("--"):
            name, equals, value = item[2:].partition("=")
            if not equals and i < len(items) and not items[i].startswith("-"):
                value, i = items[i], i + 1
            found[name] = value
        elif item[:2] in _SHORT_OPTIONS:
            value = item[2:].lstrip("=")
            if not value and i < len(items):
                value, i = items[i], i + 1
            found[_SHORT_OPTIONS[item[:2]]] = value
    return found


def _count(text: str | None, default: int) -> int:
    """"4", "2-3" (the minimum) or "a100:2" (a typed GPU count) as a number; `default` when absent."""
    match = re.search(r"(\d+)(?:-\d+)?$", text or "")
    return int(match.group(1)) if match else default


def _megabytes(text: str) -> int | None:
    match = re.fullmatch(r"(\d+)([KMGT]?)B?", text.strip().upper())
    if not match:
        return None
    return math.ceil(int(match.group(1)) * _MEMORY_UNITS[match.group(2) or "M"])


def node_request(script_text: str, options: Sequence[str] = ()) -> NodeRequest:
    """The request of ``sbatch OPTIONS SCRIPT``: the script's ``#SBATCH`` lines, then ``options``, which win."""
    found = _option_values([*sbatch_options(script_text), *options])
    nodes = max(_count(found.get("nodes"), 1), 1)
    ntasks = found.get("ntasks")
    tasks = _count(found.get("ntasks-per-node"), math.ceil(_count(ntasks, 1) / nodes) if ntasks else 1)
    cpus = tasks * _count(found.get("cpus-per-task"), 1)
    memory = None
    if "mem" in found:
        memory = _megabytes(found["mem"]) or None  # --mem=0: all of a node's memory
    elif "mem-per-cpu" in found and (per_cpu := _megabytes(found["mem-per-cpu"])):
        memory = per_cpu * cpus
    gpus = _count(found.get("gpus-per-node"), 0)
    for gres in found.get("gres", "").split(","):
        if gres.split(":")[0] == "gpu":
            gpus = _count(gres, 1)
    if "gpus" in found:
        gpus = math.ceil(_count(found["gpus"], 0) / nodes)
    partitions = tuple(p for p in found.get("partition", "").split(",") if p)
    try:
        time_s = slurm_seconds(found["time"]) if found.get("time") else None
    except ValueError:  # sbatch says what is wrong with it
        time_s = None
    return NodeRequest(nodes, cpus, memory, gpus, partitions, time_s)


def unmet(request: NodeRequest, cluster: SlurmCluster) -> str | None:
    """Why no set of the cluster's nodes can run ``request``, with every node's size; None when one can."""
    wanted = request.partitions or ((cluster.default_partition,) if cluster.default_partition else ())
    candidates = [n for n in cluster.nodes if not wanted or set(wanted) & set(n.partitions)]
    fitting = [n for n in candidates
               if n.cpus >= request.cpus_per_node and n.gpus >= request.gpus_per_node
               and (request.memory_mb is None or n.memory_mb >= request.memory_mb)]
    if len(fitting) >= request.nodes:
        return None
    where = f"partition {','.join(wanted)}" if wanted else "the cluster"
    sizes = "; ".join(node.describe() for node in candidates) or "none"
    return (f"the job asks for {request.describe()}, and {len(fitting)} of the {len(candidates)} node(s) of "
            f"{where} can take that: {sizes}. Lower #SBATCH --nodes, --ntasks-per-node, --cpus-per-task, --mem or "
            f"--gres to what the nodes offer")


def over_limits(request: NodeRequest, cluster: SlurmCluster) -> str | None:
    """What the request asks beyond its partition's limits (MaxTime, MaxNodes, MaxMemPerNode, MaxCPUsPerNode), with
    both numbers; None within them, or where the partition's limits are unknown."""
    limits = cluster.limits(request.partitions[0] if request.partitions else None)
    if limits is None:
        return None
    problems = []
    if request.time_s is not None and limits.max_time_s is not None and request.time_s > limits.max_time_s:
        problems.append(f"--time {clock(request.time_s)} ({request.time_s} s) where its MaxTime is "
                        f"{clock(limits.max_time_s)} ({limits.max_time_s} s)")
    if limits.max_nodes is not None and request.nodes > limits.max_nodes:
        problems.append(f"{request.nodes} nodes where its MaxNodes is {limits.max_nodes}")
    if (limits.max_mem_per_node_mb is not None and request.memory_mb is not None
            and request.memory_mb > limits.max_mem_per_node_mb):
        problems.append(f"{request.memory_mb} MB per node where its MaxMemPerNode is {limits.max_mem_per_node_mb} MB")
    if limits.max_cpus_per_node is not None and request.cpus_per_node > limits.max_cpus_per_node:
        problems.append(f"{request.cpus_per_node} CPUs per node where its MaxCPUsPerNode is {limits.max_cpus_per_node}")
    if not problems:
        return None
    return (f"the job asks partition {limits.name} for {'; '.join(problems)}: SLURM would keep it pending for ever. "
            f"Ask for less (--sbatch-option time=..., the script's #SBATCH lines) or choose another partition "
            f"(--sbatch-option partition=...)")
