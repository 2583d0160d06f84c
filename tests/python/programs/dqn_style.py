"""A deep Q-network trained the way PyTorch's reinforcement learning (DQN) tutorial trains:
a replay memory of Transition namedtuples in a deque sampled with random.sample, an
epsilon-greedy policy (policy_net(state).max(1).indices.view(1, 1) under no_grad), a batch
built with torch.cat and a bool non_final_mask, Q(s, a) by gather, the next states' values
written through the mask (next_state_values[non_final_mask] = target_net(..).max(1).values),
SmoothL1Loss, AdamW(amsgrad=True), clip_grad_value_, and a soft update of the target network
through its state_dict (target = tau * policy + (1 - tau) * target, then load_state_dict).

The environment is a cart-pole written here with numpy (no gym), so every library sees the
same episodes for the same actions. It is a plain PyTorch program. The tests run it with
real torch and, unchanged, with `python -m cagrad.as_torch`
(tests/python/test_programs_more.py).

    python dqn_style.py [--episodes N] [--seed N]
"""

import argparse
import json
import math
import random
from collections import deque, namedtuple

import numpy as np
import torch
import torch.nn as nn
import torch.optim as optim

Transition = namedtuple("Transition", ("state", "action", "next_state", "reward"))


class CartPole:
    """The classic cart-pole balance task: push left or right; reward 1 per step upright."""

    def __init__(self, seed):
        self.rng = np.random.default_rng(seed)
        self.state = None

    def reset(self):
        self.state = self.rng.uniform(-0.05, 0.05, size=4)
        return self.state.astype(np.float32), {}

    def step(self, action):
        x, x_dot, theta, theta_dot = self.state
        force = 10.0 if action == 1 else -10.0
        total_mass, pole_mass_length, half_length = 1.1, 0.05, 0.5
        cos, sin = math.cos(theta), math.sin(theta)
        temp = (force + pole_mass_length * theta_dot ** 2 * sin) / total_mass
        theta_acc = (9.8 * sin - cos * temp) / (
            half_length * (4.0 / 3.0 - 0.1 * cos ** 2 / total_mass))
        x_acc = temp - pole_mass_length * theta_acc * cos / total_mass
        tau = 0.02
        self.state = np.array([x + tau * x_dot, x_dot + tau * x_acc,
                               theta + tau * theta_dot, theta_dot + tau * theta_acc])
        terminated = abs(self.state[0]) > 2.4 or abs(self.state[2]) > 12 * math.pi / 180
        return self.state.astype(np.float32), 1.0, bool(terminated), False, {}


class ReplayMemory:
    def __init__(self, capacity):
        self.memory = deque([], maxlen=capacity)

    def push(self, *args):
        """Save a transition."""
        self.memory.append(Transition(*args))

    def sample(self, batch_size):
        return random.sample(self.memory, batch_size)

    def __len__(self):
        return len(self.memory)


class DQN(nn.Module):
    def __init__(self, n_observations, n_actions, hidden=32):
        super().__init__()
        self.layer1 = nn.Linear(n_observations, hidden)
        self.layer2 = nn.Linear(hidden, hidden)
        self.layer3 = nn.Linear(hidden, n_actions)

    def forward(self, x):
        x = torch.relu(self.layer1(x))
        x = torch.relu(self.layer2(x))
        return self.layer3(x)


def optimize_model(policy_net, target_net, optimizer, memory, batch_size, gamma=0.99):
    if len(memory) < batch_size:
        return None
    transitions = memory.sample(batch_size)
    batch = Transition(*zip(*transitions))  # a batch of transitions -> a transition of batches
    non_final_mask = torch.tensor(tuple(map(lambda s: s is not None, batch.next_state)),
                                  dtype=torch.bool)
    non_final_next_states = torch.cat([s for s in batch.next_state if s is not None])
    state_batch = torch.cat(batch.state)
    action_batch = torch.cat(batch.action)
    reward_batch = torch.cat(batch.reward)
    state_action_values = policy_net(state_batch).gather(1, action_batch)
    next_state_values = torch.zeros(batch_size, dtype=state_batch.dtype)
    with torch.no_grad():
        next_state_values[non_final_mask] = target_net(non_final_next_states).max(1).values
    expected_state_action_values = (next_state_values * gamma) + reward_batch
    criterion = nn.SmoothL1Loss()
    loss = criterion(state_action_values, expected_state_action_values.unsqueeze(1))
    optimizer.zero_grad()
    loss.backward()
    torch.nn.utils.clip_grad_value_(policy_net.parameters(), 100)
    optimizer.step()
    return loss.item()


def soft_update(policy_net, target_net, tau):
    target_net_state_dict = target_net.state_dict()
    policy_net_state_dict = policy_net.state_dict()
    for key in policy_net_state_dict:
        target_net_state_dict[key] = (policy_net_state_dict[key] * tau
                                      + target_net_state_dict[key] * (1 - tau))
    target_net.load_state_dict(target_net_state_dict)


def main(argv=None):
    parser = argparse.ArgumentParser()
    parser.add_argument("--episodes", type=int, default=12)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    random.seed(args.seed)
    torch.manual_seed(args.seed)
    env = CartPole(args.seed)
    eps_start, eps_end, eps_decay, tau, lr = 0.9, 0.05, 200, 0.005, 1e-3
    policy_net, target_net = DQN(4, 2), DQN(4, 2)
    target_net.load_state_dict(policy_net.state_dict())
    optimizer = optim.AdamW(policy_net.parameters(), lr=lr, amsgrad=True)
    memory = ReplayMemory(2000)
    steps_done, durations, losses = 0, [], []
    for _ in range(args.episodes):
        state, _ = env.reset()
        state = torch.tensor(state, dtype=torch.float32).unsqueeze(0)
        for t in range(200):
            eps_threshold = eps_end + (eps_start - eps_end) * math.exp(-steps_done / eps_decay)
            steps_done += 1
            if random.random() > eps_threshold:
                with torch.no_grad():
                    action = policy_net(state).max(1).indices.view(1, 1)
            else:
                action = torch.tensor([[random.randrange(2)]], dtype=torch.long)
            observation, reward, terminated, truncated, _ = env.step(action.item())
            reward = torch.tensor([reward])
            next_state = None if terminated else \
                torch.tensor(observation, dtype=torch.float32).unsqueeze(0)
            memory.push(state, action, next_state, reward)
            state = next_state
            loss = optimize_model(policy_net, target_net, optimizer, memory, args.batch_size)
            if loss is not None:
                losses.append(loss)
            soft_update(policy_net, target_net, tau)
            if terminated or truncated:
                durations.append(t + 1)
                break
    q = policy_net(torch.zeros(1, 4)).detach()
    print(json.dumps({"durations": durations, "losses": losses, "steps": steps_done,
                      "q_shape": list(q.shape), "memory": len(memory)}))


if __name__ == "__main__":
    main()
