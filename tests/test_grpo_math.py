"""GRPO math of the template's GENERIC part, on hand-computed numbers and on a learnable toy."""

import math

import pytest
import torch

EPS = 1e-4


def test_advantages_are_normalised_per_agent_role(reference_train):
    returns = torch.tensor([[1.0, 5.0], [3.0, 5.0], [2.0, 5.0]])  # (G=3, A=2)
    adv = reference_train.group_advantages(returns)
    # role 0: mean 2, unbiased std 1 -> (-1, 1, 0) / (1 + eps); role 1: all equal -> 0
    assert torch.allclose(adv[:, 0], torch.tensor([-1.0, 1.0, 0.0]) / (1 + EPS))
    assert torch.equal(adv[:, 1], torch.zeros(3))


def test_fraction_of_zero_std_groups(reference_train):
    returns = torch.tensor([[1.0, 5.0, 0.0], [3.0, 5.0, 0.0]])
    assert reference_train.frac_zero_std(returns) == pytest.approx(2 / 3)


def test_clipped_loss_positive_advantage_is_capped(reference_train):
    logps, old = torch.log(torch.tensor([[0.5]])), torch.log(torch.tensor([[0.4]]))  # ratio 1.25
    loss, kl, clipped = reference_train.grpo_token_loss(logps, old, None, torch.tensor([1.0]), 0.2, 0.2, 0.0)
    assert loss.item() == pytest.approx(-1.2)
    assert clipped.item() == 1.0 and kl.item() == 0.0


def test_clipped_loss_negative_advantage_keeps_the_pessimistic_term(reference_train):
    logps, old = torch.log(torch.tensor([[0.5]])), torch.log(torch.tensor([[0.4]]))
    loss, _, clipped = reference_train.grpo_token_loss(logps, old, None, torch.tensor([-1.0]), 0.2, 0.2, 0.0)
    assert loss.item() == pytest.approx(1.25)
    assert clipped.item() == 0.0


def test_asymmetric_clip_uses_epsilon_high_above_one(reference_train):
    logps, old = torch.log(torch.tensor([[0.65]])), torch.log(torch.tensor([[0.5]]))  # ratio 1.3
    loss, _, _ = reference_train.grpo_token_loss(logps, old, None, torch.tensor([2.0]), 0.2, 0.28, 0.0)
    assert loss.item() == pytest.approx(-1.28 * 2.0)


def test_k3_kl_term(reference_train):
    logps, ref = torch.log(torch.tensor([[0.5]])), torch.log(torch.tensor([[0.25]]))
    loss, kl, _ = reference_train.grpo_token_loss(logps, logps.clone(), ref, torch.tensor([0.0]), 0.2, 0.2, 0.1)
    expected = 0.5 - math.log(0.5) - 1  # exp(d) - d - 1 with d = log(0.25 / 0.5)
    assert kl.item() == pytest.approx(expected)
    assert loss.item() == pytest.approx(0.1 * expected)


def test_collate_masks_exactly_the_generated_tokens(reference_train):
    sample = reference_train.Sample(prompt_ids=[5, 6, 7], completion_ids=[8, 9], episode=0, agent_id=0)
    short = reference_train.Sample(prompt_ids=[5], completion_ids=[4], episode=1, agent_id=0)
    batch = reference_train.collate([sample, short], pad_id=0, device=torch.device("cpu"))
    assert batch.input_ids.tolist() == [[5, 6, 7, 8, 9], [5, 4, 0, 0, 0]]
    # position t predicts token t+1: the mask picks the targets 8, 9 and 4, nothing else
    targets = batch.input_ids[:, 1:][batch.completion_mask.bool()].tolist()
    assert targets == [8, 9, 4]


def _bandit_trainer(reference_train, model_dir, **overrides):
    from accelerate import Accelerator
    from grpo_config import GRPOConfig
    from transformers import get_scheduler

    config = GRPOConfig(model_name=str(model_dir), group_size=16, num_agents=1, max_env_steps=1,
                        learning_rate=3e-2, lr_scheduler_type="constant", warmup_steps=0, beta=0.0,
                        micro_batch_size=16, bf16=False, gradient_checkpointing=False, **overrides)
    accelerator = Accelerator(cpu=True)
    tokenizer, model, ref_model = reference_train.load_models(config, accelerator, config.model_name)
    optimizer = torch.optim.AdamW(model.parameters(), lr=config.learning_rate)
    scheduler = get_scheduler("constant", optimizer)
    model, optimizer = accelerator.prepare(model, optimizer)
    return reference_train.Trainer(config, accelerator, model, ref_model, tokenizer, optimizer, scheduler)


def test_grpo_learns_a_bandit(reference_train, tiny_model_dir):
    """Reward 1 for a first token from the lower half of the vocabulary: its probability must rise."""
    torch.manual_seed(0)
    trainer = _bandit_trainer(reference_train, tiny_model_dir)
    tokenizer, model = trainer.tokenizer, trainer.model
    prompt = reference_train.chat_ids(tokenizer, [{"role": "user", "content": "pick a token"}])
    good = torch.arange(len(tokenizer)) < len(tokenizer) // 2
    engine = reference_train.make_engine(model, tokenizer, trainer.config)

    def p_good() -> float:
        with torch.no_grad():
            logits = model(input_ids=torch.tensor([prompt])).logits[0, -1]
        return torch.softmax(logits.float(), -1)[good].sum().item()

    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    start, rewards = p_good(), []
    for _ in range(12):
        completions = engine.generate([prompt] * 16, max_new_tokens=1)
        returns = [[float(good[c.ids[0]])] for c in completions]
        rollout = reference_train.Rollout(
            samples=[reference_train.Sample(prompt, c.ids, e, 0) for e, c in enumerate(completions)], returns=returns)
        reference_train.assign_advantages(rollout)
        trainer.train_on_rollout(rollout.samples)
        rewards.append(sum(r[0] for r in returns) / 16)
    end = p_good()
    assert end > start + 0.2, f"P(good) {start:.3f} -> {end:.3f}"
    assert sum(rewards[-3:]) > sum(rewards[:3])
    for name, param in model.named_parameters():
        assert not torch.equal(param, before[name]), f"Parameter {name} has not changed."


def test_several_optimiser_steps_use_old_logps_and_can_clip(reference_train, tiny_model_dir):
    torch.manual_seed(0)
    trainer = _bandit_trainer(reference_train, tiny_model_dir, num_iterations=3)
    prompt = reference_train.chat_ids(trainer.tokenizer, [{"role": "user", "content": "x"}])
    samples = [reference_train.Sample(prompt, [i + 10, trainer.tokenizer.eos_token_id], i, 0,
                                      advantage=1.0 if i % 2 else -1.0) for i in range(16)]
    trainer.optimizer.param_groups[0]["lr"] = 5e-2
    stats = trainer.train_on_rollout(samples)
    assert stats["optimizer_steps"] == 3
    assert stats["clip_ratio"] > 0  # later passes move the policy away from pi_old


def test_an_extreme_log_ratio_stays_finite(reference_train):
    logps, old = torch.tensor([[0.0]]), torch.tensor([[-150.0]])  # exp(150) overflows float32
    loss, _, clipped = reference_train.grpo_token_loss(logps, old, None, torch.tensor([-1.0]), 0.2, 0.2, 0.0)
    assert loss.item() == pytest.approx(math.exp(reference_train.LOG_RATIO_CLAMP), rel=1e-5)
    assert torch.isfinite(loss).all() and clipped.item() == 0.0


def test_k3_is_bounded(reference_train):
    logps, ref = torch.tensor([[-30.0]]), torch.tensor([[0.0]])  # exp(30) - 30 - 1 ~ 1e13 unbounded
    _, kl, _ = reference_train.grpo_token_loss(logps, logps.clone(), ref, torch.tensor([0.0]), 0.2, 0.2, 0.1)
    assert kl.item() == reference_train.KL_CLAMP


def test_nan_in_a_masked_out_position_stays_out(reference_train):
    values = torch.tensor([[1.0, float("nan")], [2.0, float("inf")]])
    mask = torch.tensor([[1.0, 0.0], [1.0, 0.0]])
    assert reference_train.masked_sum(values, mask).item() == 3.0


class FixedLogits(torch.nn.Module):
    """A 'model' whose next-token logits are the same (1, T, V) tensor whatever the input."""

    def __init__(self, logits: torch.Tensor) -> None:
        super().__init__()
        self.fixed = logits

    def forward(self, input_ids, attention_mask, use_cache):
        return type("Out", (), {"logits": self.fixed})()


@pytest.mark.parametrize("temperature", [1.0, 0.5, 2.0])
def test_log_probs_are_those_of_the_temperature_scaled_distribution(reference_train, temperature):
    logits = torch.tensor([[[2.0, 0.0, -1.0], [0.5, 1.5, 0.0], [0.0, 0.0, 0.0]]])  # (1, T=3, V=3)
    ids = torch.tensor([[0, 1, 2]])
    got = reference_train.per_token_logps(FixedLogits(logits), ids, torch.ones_like(ids), temperature)
    expected = torch.log_softmax(logits[:, :-1] / temperature, dim=-1).gather(-1, ids[:, 1:, None]).squeeze(-1)
    assert torch.allclose(got, expected)
    probability = 1 / (math.exp(0.5 / temperature) + math.exp(1.5 / temperature) + 1)  # logit 0 of token 2
    assert got[0, 1].item() == pytest.approx(math.log(probability))  # token 2 after position 1, by hand
