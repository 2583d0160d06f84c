"""Proximal Policy Optimization trained the way CleanRL's ppo.py trains an agent, on a tiny
environment written here with numpy (no gym): an actor-critic MLP (orthogonal init, Tanh)
with a torch.distributions.Categorical(logits=...) policy whose log_prob and entropy enter
the loss; rollouts of vectorised environments collected under torch.no_grad() with
dist.sample(); generalized advantage estimates computed by a reversed loop over time;
several epochs over minibatches drawn by torch.randperm; per-minibatch advantage
normalisation; the ratio exp(new_logp - old_logp) clipped by torch.clamp and combined by
torch.min; a value loss by F.smooth_l1_loss; an entropy bonus; approximate KL and the
clip fraction logged under torch.no_grad(); Adam (eps=1e-5) with
nn.utils.clip_grad_norm_ and a learning rate annealed by hand in param_groups. With
--continuous the environment is a 1-D slope and the policy a Normal whose log-std is an
nn.Parameter expanded with expand_as, log_prob and entropy summed over action dimensions.

It is a plain PyTorch program; the tests run it with real torch and, unchanged, with
`python -m cagrad.as_torch` (tests/python/test_programs_wave5a.py).

    python ppo_style.py [--updates N] [--num-envs E] [--num-steps T] [--epochs K] [--continuous]
"""

import argparse
import json

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.distributions import Categorical, Normal


class Corridor:
    """E copies of a corridor of 7 cells: start in the middle, move left, stay or right;
    reaching the right end pays 1 and ends the episode, every step costs 0.01, and an
    episode is cut after 20 steps. Observations: one-hot position and the time left."""

    SIZE, LIMIT = 7, 20

    def __init__(self, num_envs, seed):
        self.rng = np.random.default_rng(seed)
        self.n = num_envs
        self.pos = np.full(num_envs, self.SIZE // 2)
        self.t = np.zeros(num_envs, dtype=np.int64)

    def obs(self):
        o = np.zeros((self.n, self.SIZE + 1), dtype=np.float32)
        o[np.arange(self.n), self.pos] = 1.0
        o[:, -1] = 1.0 - self.t / self.LIMIT
        return o

    def step(self, actions):
        # a slippery floor: one move in ten goes the other way
        slip = self.rng.random(self.n) < 0.1
        move = np.where(slip, 1 - actions, actions - 1)
        self.pos = np.clip(self.pos + move, 0, self.SIZE - 1)
        self.t += 1
        won = self.pos == self.SIZE - 1
        done = won | (self.t >= self.LIMIT)
        reward = won.astype(np.float32) - 0.01
        self.pos[done], self.t[done] = self.SIZE // 2, 0  # auto-reset, as vector envs do
        return self.obs(), reward, done.astype(np.float32)


class Slope:
    """The continuous version (CleanRL's ppo_continuous_action): a point at x in [-1, 1]
    moves by 0.2 * clip(action, -1, 1) (ClipAction); reaching x >= 0.9 pays 1 and ends the
    episode, every step costs 0.01, and an episode is cut after 20 steps. Observations:
    x and the time left."""

    LIMIT = 20

    def __init__(self, num_envs, seed):
        self.rng = np.random.default_rng(seed)
        self.n = num_envs
        self.x = np.zeros(num_envs)
        self.t = np.zeros(num_envs, dtype=np.int64)

    def obs(self):
        return np.stack([self.x, 1.0 - self.t / self.LIMIT], 1).astype(np.float32)

    def step(self, actions):
        noise = 0.02 * self.rng.standard_normal(self.n)
        self.x = np.clip(self.x + 0.2 * np.clip(actions[:, 0], -1, 1) + noise, -1, 1)
        self.t += 1
        won = self.x >= 0.9
        done = won | (self.t >= self.LIMIT)
        reward = won.astype(np.float32) - 0.01
        self.x[done], self.t[done] = 0.0, 0
        return self.obs(), reward, done.astype(np.float32)


def layer_init(layer, std=np.sqrt(2), bias=0.0):
    nn.init.orthogonal_(layer.weight, std)
    nn.init.constant_(layer.bias, bias)
    return layer


class Agent(nn.Module):
    def __init__(self, obs_dim, n_actions, hidden=32):
        super().__init__()
        self.critic = nn.Sequential(layer_init(nn.Linear(obs_dim, hidden)), nn.Tanh(),
                                    layer_init(nn.Linear(hidden, 1), std=1.0))
        self.actor = nn.Sequential(layer_init(nn.Linear(obs_dim, hidden)), nn.Tanh(),
                                   layer_init(nn.Linear(hidden, n_actions), std=0.01))

    def get_value(self, x):
        return self.critic(x)

    def get_action_and_value(self, x, action=None):
        dist = Categorical(logits=self.actor(x))
        if action is None:
            action = dist.sample()
        return action, dist.log_prob(action), dist.entropy(), self.critic(x)


class ContinuousAgent(nn.Module):
    """A Gaussian policy: a mean net and a state-independent log-std parameter; the log
    probability and the entropy of an action sum over its dimensions."""

    def __init__(self, obs_dim, act_dim, hidden=32):
        super().__init__()
        self.critic = nn.Sequential(layer_init(nn.Linear(obs_dim, hidden)), nn.Tanh(),
                                    layer_init(nn.Linear(hidden, 1), std=1.0))
        self.actor_mean = nn.Sequential(layer_init(nn.Linear(obs_dim, hidden)), nn.Tanh(),
                                        layer_init(nn.Linear(hidden, act_dim), std=0.01))
        self.actor_logstd = nn.Parameter(torch.zeros(1, act_dim))

    def get_value(self, x):
        return self.critic(x)

    def get_action_and_value(self, x, action=None):
        mean = self.actor_mean(x)
        std = torch.exp(self.actor_logstd.expand_as(mean))
        dist = Normal(mean, std)
        if action is None:
            action = dist.sample()
        return action, dist.log_prob(action).sum(1), dist.entropy().sum(1), self.critic(x)


def collect(agent, env, obs, num_steps):
    """One rollout: tensors of shape (num_steps, num_envs, ...) and the last observation."""
    buf = {k: [] for k in ("obs", "actions", "logprobs", "rewards", "dones", "values")}
    with torch.no_grad():
        for _ in range(num_steps):
            action, logprob, _, value = agent.get_action_and_value(obs)
            nxt, reward, done = env.step(action.numpy())
            for k, v in (("obs", obs), ("actions", action), ("logprobs", logprob),
                         ("values", value.flatten()), ("rewards", torch.from_numpy(reward)),
                         ("dones", torch.from_numpy(done))):
                buf[k].append(v)
            obs = torch.from_numpy(nxt)
    return {k: torch.stack(v) for k, v in buf.items()}, obs


def gae(rewards, values, dones, next_value, gamma, lam):
    """Advantages by the reversed recursion A_t = d_t + gamma * lam * (1 - done_t) A_{t+1}."""
    with torch.no_grad():
        advantages = torch.zeros_like(rewards)
        last = 0
        for t in reversed(range(rewards.shape[0])):
            nxt = next_value if t == rewards.shape[0] - 1 else values[t + 1]
            nonterminal = 1.0 - dones[t]
            delta = rewards[t] + gamma * nxt * nonterminal - values[t]
            advantages[t] = last = delta + gamma * lam * nonterminal * last
        return advantages, advantages + values


def ppo_update(agent, optimizer, b, args):
    """args.epochs passes over the flattened batch b in shuffled minibatches."""
    n = b["obs"].shape[0]
    mb_size = n // args.minibatches
    stats = []
    for _ in range(args.epochs):
        perm = torch.randperm(n)
        for start in range(0, n, mb_size):
            mb = perm[start:start + mb_size]
            _, newlogp, entropy, newvalue = agent.get_action_and_value(b["obs"][mb],
                                                                       b["actions"][mb])
            logratio = newlogp - b["logprobs"][mb]
            ratio = logratio.exp()
            with torch.no_grad():
                approx_kl = ((ratio - 1) - logratio).mean()
                clipfrac = ((ratio - 1.0).abs() > args.clip).float().mean().item()
            adv = b["advantages"][mb]
            adv = (adv - adv.mean()) / (adv.std() + 1e-8)
            pg_loss = -torch.min(adv * ratio,
                                 adv * torch.clamp(ratio, 1 - args.clip, 1 + args.clip)).mean()
            v_loss = F.smooth_l1_loss(newvalue.view(-1), b["returns"][mb])
            loss = pg_loss - args.ent_coef * entropy.mean() + args.vf_coef * v_loss
            optimizer.zero_grad()
            loss.backward()
            nn.utils.clip_grad_norm_(agent.parameters(), args.max_grad_norm)
            optimizer.step()
            stats.append([loss.item(), approx_kl.item(), clipfrac])
    return stats


def flatten(rollout, advantages, returns):
    b = {k: v.reshape((-1,) + v.shape[2:]) for k, v in rollout.items()}
    b["advantages"], b["returns"] = advantages.reshape(-1), returns.reshape(-1)
    return b


def parse(argv=None):
    parser = argparse.ArgumentParser(description="PPO on a corridor")
    parser.add_argument("--updates", type=int, default=12)
    parser.add_argument("--num-envs", type=int, default=4)
    parser.add_argument("--num-steps", type=int, default=32)
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--minibatches", type=int, default=4)
    parser.add_argument("--lr", type=float, default=2.5e-3)
    parser.add_argument("--gamma", type=float, default=0.95)
    parser.add_argument("--lam", type=float, default=0.9)
    parser.add_argument("--clip", type=float, default=0.2)
    parser.add_argument("--ent-coef", type=float, default=0.01)
    parser.add_argument("--vf-coef", type=float, default=0.5)
    parser.add_argument("--max-grad-norm", type=float, default=0.5)
    parser.add_argument("--continuous", action="store_true", help="Slope, a Gaussian policy")
    parser.add_argument("--seed", type=int, default=0)
    return parser.parse_args(argv)


def main(argv=None):
    args = parse(argv)
    torch.manual_seed(args.seed)
    if args.continuous:
        env, agent = Slope(args.num_envs, seed=1), ContinuousAgent(2, 1)
    else:
        env, agent = Corridor(args.num_envs, seed=1), Agent(Corridor.SIZE + 1, 3)
    optimizer = torch.optim.Adam(agent.parameters(), lr=args.lr, eps=1e-5)
    obs = torch.from_numpy(env.obs())
    returns_seen, stats, lrs = [], [], []
    for update in range(args.updates):
        frac = 1.0 - update / args.updates
        optimizer.param_groups[0]["lr"] = frac * args.lr
        lrs.append(optimizer.param_groups[0]["lr"])
        rollout, obs = collect(agent, env, obs, args.num_steps)
        with torch.no_grad():
            next_value = agent.get_value(obs).reshape(1, -1)
        adv, ret = gae(rollout["rewards"], rollout["values"], rollout["dones"], next_value,
                       args.gamma, args.lam)
        returns_seen.append(float(rollout["rewards"].sum() / args.num_envs))
        stats += ppo_update(agent, optimizer, flatten(rollout, adv, ret), args)
    print(json.dumps({
        "rewards": returns_seen, "losses": [s[0] for s in stats],
        "kls": [s[1] for s in stats], "clipfracs": [s[2] for s in stats], "lrs": lrs,
        **policy_summary(agent, env),
        "n_params": sum(p.numel() for p in agent.parameters()),
    }))


@torch.no_grad()
def policy_summary(agent, env):
    obs = torch.from_numpy(env.obs())
    if isinstance(agent, ContinuousAgent):  # the mean action, and the policy's spread
        return {"right_prob": float((agent.actor_mean(obs) > 0).float().mean()),
                "std": agent.actor_logstd.exp().flatten().tolist()}
    probs = Categorical(logits=agent.actor(obs)).probs
    return {"right_prob": float(probs[:, 2].mean()), "probs_sum": probs.sum(1).tolist()}


if __name__ == "__main__":
    main()
