"""Policy-gradient training the way pytorch/examples' reinforcement_learning trains it, in
its two variants:

- reinforce: a policy net (Linear, Dropout, ReLU, Linear, softmax) whose actions are drawn
  from torch.distributions.Categorical(probs); each step's m.log_prob(action) is saved; at
  the episode's end the discounted returns (a deque filled with appendleft) are normalised
  by (returns - returns.mean()) / (returns.std() + eps), with eps from
  np.finfo(np.float32).eps, and the loss is torch.cat([-log_prob * R, ...]).sum();
- actor_critic: one trunk with an action head and a value head, SavedAction namedtuples,
  the advantage R - value.item(), policy losses stacked with torch.stack, value losses by
  F.smooth_l1_loss(value, torch.tensor([R])), and an optional entropy bonus
  (m.entropy()).

Both use Adam, del policy.rewards[:] between episodes, and a running reward. The
environment is a cart-pole written here with numpy (no gym). It is a plain PyTorch program.
The tests run it with real torch and, unchanged, with `python -m cagrad.as_torch`
(tests/python/test_programs_wave3.py).

    python reinforce_style.py [--algo reinforce|actor_critic] [--episodes N]
"""

import argparse
import json
import math
from collections import deque, namedtuple

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim
from torch.distributions import Categorical

SavedAction = namedtuple("SavedAction", ["log_prob", "value"])
eps = np.finfo(np.float32).eps.item()


class CartPole:
    """Keep a pole upright by pushing its cart left (0) or right (1); reward 1 a step."""

    def __init__(self, seed):
        self.rng = np.random.default_rng(seed)
        self.s = None

    def reset(self):
        self.s = self.rng.uniform(-0.05, 0.05, size=4)
        return self.s.copy(), {}

    def step(self, action):
        x, v, th, om = self.s
        f = 10.0 if action == 1 else -10.0
        c, s = math.cos(th), math.sin(th)
        tmp = (f + 0.05 * om * om * s) / 1.1
        om_acc = (9.8 * s - c * tmp) / (0.5 * (4.0 / 3.0 - 0.1 * c * c / 1.1))
        v_acc = tmp - 0.05 * om_acc * c / 1.1
        self.s = np.array([x + 0.02 * v, v + 0.02 * v_acc, th + 0.02 * om, om + 0.02 * om_acc])
        done = abs(self.s[0]) > 2.4 or abs(self.s[2]) > 12 * math.pi / 180
        return self.s.copy(), 1.0, bool(done), False, {}


class Policy(nn.Module):
    def __init__(self, hidden=32, dropout=0.6):
        super().__init__()
        self.affine1 = nn.Linear(4, hidden)
        self.dropout = nn.Dropout(p=dropout)
        self.affine2 = nn.Linear(hidden, 2)
        self.saved_log_probs = []
        self.rewards = []

    def forward(self, x):
        x = self.affine1(x)
        x = self.dropout(x)
        x = F.relu(x)
        action_scores = self.affine2(x)
        return F.softmax(action_scores, dim=1)


class ActorCritic(nn.Module):
    def __init__(self, hidden=32):
        super().__init__()
        self.affine1 = nn.Linear(4, hidden)
        self.action_head = nn.Linear(hidden, 2)
        self.value_head = nn.Linear(hidden, 1)
        self.saved_actions = []
        self.rewards = []
        self.entropies = []

    def forward(self, x):
        x = F.relu(self.affine1(x))
        action_prob = F.softmax(self.action_head(x), dim=-1)
        state_values = self.value_head(x)
        return action_prob, state_values


def distribution(model, state):
    """The policy's Categorical at a numpy state (and the critic's value, if any)."""
    if isinstance(model, ActorCritic):
        probs, state_value = model(torch.from_numpy(state).float())
        return Categorical(probs), state_value
    probs = model(torch.from_numpy(state).float().unsqueeze(0))
    return Categorical(probs), None


def record(model, m, value, action):
    if isinstance(model, ActorCritic):
        model.saved_actions.append(SavedAction(m.log_prob(action), value))
        model.entropies.append(m.entropy())
    else:
        model.saved_log_probs.append(m.log_prob(action))


def select_action(model, state):
    m, value = distribution(model, state)
    action = m.sample()
    record(model, m, value, action)
    return action.item()


def discounted_returns(rewards, gamma):
    R, returns = 0, deque()
    for r in rewards[::-1]:
        R = r + gamma * R
        returns.appendleft(R)
    returns = torch.tensor(returns)
    return (returns - returns.mean()) / (returns.std() + eps)


def finish_episode(model, optimizer, gamma, entropy_coef=0.0):
    returns = discounted_returns(model.rewards, gamma)
    optimizer.zero_grad()
    if isinstance(model, ActorCritic):
        policy_losses, value_losses = [], []
        for (log_prob, value), R in zip(model.saved_actions, returns):
            advantage = R - value.item()
            policy_losses.append(-log_prob * advantage)
            value_losses.append(F.smooth_l1_loss(value, torch.tensor([R])))
        loss = torch.stack(policy_losses).sum() + torch.stack(value_losses).sum()
        if entropy_coef:
            loss = loss - entropy_coef * torch.stack(model.entropies).sum()
        del model.saved_actions[:]
        del model.entropies[:]
    else:
        policy_loss = [-log_prob * R for log_prob, R in zip(model.saved_log_probs, returns)]
        loss = torch.cat(policy_loss).sum()
        del model.saved_log_probs[:]
    loss.backward()
    optimizer.step()
    del model.rewards[:]
    return loss.item()


def main(argv=None):
    parser = argparse.ArgumentParser(description="PyTorch REINFORCE / actor-critic example")
    parser.add_argument("--algo", default="reinforce", choices=["reinforce", "actor_critic"])
    parser.add_argument("--gamma", type=float, default=0.99)
    parser.add_argument("--seed", type=int, default=543)
    parser.add_argument("--episodes", type=int, default=15)
    parser.add_argument("--entropy-coef", type=float, default=0.0)
    parser.add_argument("--lr", type=float, default=1e-2)
    args = parser.parse_args(argv)
    torch.manual_seed(args.seed)
    env = CartPole(args.seed)
    model = Policy() if args.algo == "reinforce" else ActorCritic()
    optimizer = optim.Adam(model.parameters(), lr=args.lr)
    running_reward, lengths, losses, runs, probs = 10, [], [], [], []
    for _ in range(args.episodes):
        state, _ = env.reset()
        ep_reward = 0
        for t in range(1, 200):
            action = select_action(model, state)
            state, reward, done, _, _ = env.step(action)
            model.rewards.append(reward)
            ep_reward += reward
            if done:
                break
        running_reward = 0.05 * ep_reward + (1 - 0.05) * running_reward
        lengths.append(t)
        losses.append(finish_episode(model, optimizer, args.gamma, args.entropy_coef))
        runs.append(running_reward)
    model.eval()
    with torch.no_grad():
        m, _ = distribution(model, np.zeros(4))
        probs = m.probs.reshape(-1).tolist()
    print(json.dumps({"losses": losses, "lengths": lengths, "running_rewards": runs,
                      "probs": probs, "left": len(getattr(model, "saved_log_probs", []))
                      + len(model.rewards)}))


if __name__ == "__main__":
    main()
