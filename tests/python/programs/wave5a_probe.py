"""A few training steps of the wave-5 (A) programs' models, for comparing libraries
(test_programs_wave5a.py). The same command line and output as more_probe.py, whose
machinery (shared weights through WEIGHTS.npz, first-step gradients, --compiled, randn and
randn_like from one numpy stream) it uses:

    python wave5a_probe.py PROGRAM LIB DTYPE WEIGHTS.npz OUT.npz [--compiled] [--steps N]

torch.randint and torch.randperm are replaced with numpy draws too, so DDPM's timesteps
and PPO's minibatches are the same in every library. Where a program samples from a
distribution (PPO's rollout actions, the flow's base samples), the probe feeds fixed numpy
draws instead. After the training steps each adapter appends a few no-grad results (EMA
weights, a sampling loop, Viterbi scores, an inverse flow) to the losses it reports.
"""

import numpy as np

import more_probe


def same_integers(torch):
    """torch.randint / torch.randperm drawing from one numpy stream in every library."""
    rng = np.random.default_rng(13)

    def randint(low, high=None, size=None, **kw):
        if high is None:
            low, high = 0, low
        return torch.from_numpy(rng.integers(low, high, tuple(size)))

    def randperm(n, **kw):
        return torch.from_numpy(rng.permutation(n))

    torch.randint, torch.randperm = randint, randperm


def ddpm(mod, torch, dtype, steps, style="lerp"):
    same_integers(torch)
    model = mod.NoiseNet()
    ema = mod.EMA(model, 0.8, style)
    diffusion = mod.Diffusion(6)
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    x0 = torch.from_numpy(mod.blobs(4 * steps, 8, 2)).to(dtype)
    run = [lambda i=i: mod.train_step(model, ema, diffusion, opt, x0[4 * i:4 * i + 4])
           for i in range(steps)]
    run.append(lambda: mod.ema_distance(ema, model))
    run.append(lambda: float(diffusion.sample(ema.model, (2, 1, 8, 8)).pow(2).sum()))
    run.append(lambda: float(diffusion.alphas_cumprod.sum() + diffusion.posterior_var.sum()))
    return {"ddpm": model, "ema": ema.model}, [opt], run


def realnvp(mod, torch, dtype, steps, base="mvn"):
    flow = mod.RealNVP(4, hidden=16, base=base)
    opt = torch.optim.Adam(flow.parameters(), lr=5e-3, weight_decay=1e-4)
    x = torch.from_numpy(mod.two_moons(32 * steps, 1)).to(dtype)
    z = torch.from_numpy(np.random.default_rng(3).standard_normal((16, 2))).to(dtype)
    norms = []

    def step(i):
        loss, norm = mod.train_step(flow, opt, x[32 * i:32 * i + 32], 1.0)  # clips at times
        norms.append(norm)
        return loss

    def inverse():  # flow.sample with fixed base draws
        with torch.no_grad():
            out = z
            for layer in reversed(flow.layers):
                out = layer.inverse(out)
            return float(out.sum() + flow.log_prob(x).mean())

    run = [lambda i=i: step(i) for i in range(steps)] + [lambda: sum(norms), inverse]
    return {"flow": flow}, [opt], run


def bilstm_crf(mod, torch, dtype, steps):
    model = mod.BiLSTMCRF(hidden=8)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, weight_decay=1e-4)
    words, tags, mask = mod.tensors(*mod.make_data(6 * steps, 6, seed=1))
    run = [lambda i=i: mod.train_step(model, opt, words[6 * i:6 * i + 6], tags[6 * i:6 * i + 6],
                                      mask[6 * i:6 * i + 6]) for i in range(steps)]

    def decode():
        model.eval()
        scores, paths = model.decode(words, mask)
        return float(scores.sum()) + sum(sum(p) for p in paths)

    return {"tagger": model}, [opt], run + [decode]


def rollout(mod, torch, dtype, agent, rng, continuous, num_steps=8, num_envs=4):
    """collect(), with actions drawn by numpy instead of dist.sample()."""
    env = (mod.Slope if continuous else mod.Corridor)(num_envs, seed=int(rng.integers(100)))
    buf = {k: [] for k in ("obs", "actions", "logprobs", "rewards", "dones", "values")}
    obs = torch.from_numpy(env.obs()).to(dtype)
    with torch.no_grad():
        for _ in range(num_steps):
            action = torch.from_numpy(rng.normal(0.3, 1.0, (num_envs, 1)) if continuous
                                      else rng.integers(0, 3, num_envs))
            action = action.to(dtype) if continuous else action
            _, logprob, _, value = agent.get_action_and_value(obs, action)
            nxt, reward, done = env.step(action.numpy())
            for k, v in (("obs", obs), ("actions", action), ("logprobs", logprob),
                         ("values", value.flatten()), ("rewards", torch.from_numpy(reward)),
                         ("dones", torch.from_numpy(done))):
                buf[k].append(v.to(dtype) if v.is_floating_point() else v)
            obs = torch.from_numpy(nxt).to(dtype)
        next_value = agent.get_value(obs).reshape(1, -1)
    return {k: torch.stack(v) for k, v in buf.items()}, next_value


def ppo(mod, torch, dtype, steps, continuous=False):
    same_integers(torch)
    agent = (mod.ContinuousAgent(2, 1, hidden=16) if continuous
             else mod.Agent(mod.Corridor.SIZE + 1, 3, hidden=16))
    # a large lr, so that later minibatches' ratios leave [0.8, 1.2] and clamp / min matter
    opt = torch.optim.Adam(agent.parameters(), lr=0.03, eps=1e-5)
    args = mod.parse(["--epochs", "2", "--minibatches", "2"])
    rng = np.random.default_rng(6)

    def update():
        ro, next_value = rollout(mod, torch, dtype, agent, rng, continuous)
        adv, ret = mod.gae(ro["rewards"], ro["values"], ro["dones"], next_value, 0.95, 0.9)
        stats = mod.ppo_update(agent, opt, mod.flatten(ro, adv, ret), args)
        return sum(s[0] for s in stats) + float(adv.sum())

    return {"agent": agent}, [opt], [update for _ in range(steps)]


ADAPTERS = {
    "ddpm_style": ddpm,
    "ddpm_mul_add": lambda m, t, d, s: ddpm(m, t, d, s, "mul_add"),
    "ddpm_foreach": lambda m, t, d, s: ddpm(m, t, d, s, "foreach"),
    "ddpm_averaged": lambda m, t, d, s: ddpm(m, t, d, s, "averaged"),
    "realnvp_style": realnvp,
    "realnvp_normal": lambda m, t, d, s: realnvp(m, t, d, s, "normal"),
    "bilstm_crf_style": bilstm_crf,
    "ppo_style": ppo,
    "ppo_continuous": lambda m, t, d, s: ppo(m, t, d, s, continuous=True),
}
MODULE = {"ddpm_mul_add": "ddpm_style", "ddpm_foreach": "ddpm_style",
          "ddpm_averaged": "ddpm_style", "realnvp_normal": "realnvp_style",
          "ppo_continuous": "ppo_style"}

if __name__ == "__main__":
    more_probe.ADAPTERS, more_probe.MODULE = ADAPTERS, MODULE
    more_probe.main()
