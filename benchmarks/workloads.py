"""The benchmark workloads (six from issue 5, a custom-Function MLP from issue 13, two
convolutional training steps from issue 15, a WGAN-GP critic step and a physics-informed
step from issue 16), written once against PyTorch's API.

Each factory receives the library module ``L`` (``cagrad`` or ``torch``) and builds the
same model with it, so `import cagrad as torch` code is what is measured. Weights and data
come from NumPy with a fixed seed and are loaded into both libraries, so both run on
bit-identical float32 inputs.

A workload is a ``Spec``: ``build(L, threads)`` returns a ``Bound`` with the model's
parameters, a ``loss()`` closure (the forward) and the leaves whose gradients are checked;
and, for the double-backward workloads, a ``backward(loss)`` closure that the harness calls
instead of ``loss.backward()``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

SEED = 20250105


@dataclass
class Bound:
    """One workload instantiated in one library."""

    params: list  # leaves that require grad (the optimizer's parameters)
    names: list  # their names, for messages
    loss: Callable  # runs the forward, returns the scalar loss
    model: object = None
    # The gradient work of a step, run on the forward's result instead of loss.backward()
    # (and timed as the backward): it returns the step's total loss. Workloads whose loss
    # needs gradients themselves (a gradient penalty, a PDE residual) make those with
    # create_graph=True here, so that the timed region is the whole gradient work.
    backward: Callable = None


@dataclass
class Spec:
    key: str  # short id: w1..w6
    title: str
    build: Callable  # (L) -> Bound
    detail: str  # what exactly runs, for the report
    # backward GEMMs (M, N, K, transA, transB[, batch]): the plain-sgemm limit and the
    # GEMM flops of docs/benchmarks.md
    gemms: list = field(default_factory=list)
    # True when no backward can do fewer flops than these GEMMs (Linears, attention), so
    # their plain-sgemm time is a floor for any library. False for convolutions: Winograd
    # and direct kernels need fewer flops than the im2col GEMMs listed.
    gemm_floor: bool = True


# ---------------------------------------------------------------------------------------
# Initialisation: NumPy draws, copied into either library
# ---------------------------------------------------------------------------------------
def _init_params(L, model, seed, dtype):
    """Give every parameter of model a deterministic value drawn with NumPy.

    Linear weights and biases follow PyTorch's default bound U(-1/sqrt(fan_in), ...);
    LayerNorm weights are 1 + 0.1 N(0,1) and biases 0.1 N(0,1), so that their gradients
    are not trivially symmetric. The draws depend only on the names and shapes, so both
    libraries get the same values.
    """
    if dtype == np.float64:
        model.double()
    rng = np.random.default_rng(seed)
    named = list(model.named_parameters())
    with L.no_grad():
        for name, p in named:
            shape = tuple(p.shape)
            norm = name.split(".")[-2][:2] in ("ln", "bn") if "." in name else False
            if norm and name.endswith(".weight"):
                v = 1.0 + 0.1 * rng.standard_normal(shape)
            elif norm and name.endswith(".bias"):
                v = 0.1 * rng.standard_normal(shape)
            else:  # Linear (out, in), conv (out, in / groups, kh, kw), bias (out,)
                fan_in = int(np.prod(shape[1:])) if len(shape) >= 2 else shape[0]
                bound = 1.0 / math.sqrt(fan_in)
                v = rng.uniform(-bound, bound, shape)
            p.copy_(L.tensor(np.ascontiguousarray(v, dtype=dtype)))
    return [n for n, _ in named], [p for _, p in named]


def _tensor(L, a, dtype=None):
    if dtype is not None and a.dtype.kind == "f":
        a = a.astype(dtype)
    return L.tensor(np.ascontiguousarray(a))


# ---------------------------------------------------------------------------------------
# 1, 2, 6: MLPs
# ---------------------------------------------------------------------------------------
def _mlp(L, widths, batch, loss_kind, seed, dtype=np.float32):
    nn, F = L.nn, L.nn.functional
    layers = []
    for i in range(len(widths) - 1):
        layers.append(nn.Linear(widths[i], widths[i + 1]))
        if i < len(widths) - 2:
            layers.append(nn.ReLU())
    model = nn.Sequential(*layers)
    names, params = _init_params(L, model, seed, dtype)
    rng = np.random.default_rng(seed + 1)
    x = _tensor(L, rng.standard_normal((batch, widths[0])).astype(np.float32), dtype)
    if loss_kind == "ce":
        y = _tensor(L, rng.integers(0, widths[-1], (batch,)).astype(np.int64))

        def loss():
            return F.cross_entropy(model(x), y)
    else:
        t = _tensor(L, rng.standard_normal((batch, widths[-1])).astype(np.float32), dtype)

        def loss():
            return F.mse_loss(model(x), t)
    return Bound(params=params, names=names, loss=loss, model=model)


def _linear_gemms(fin, fout, rows, input_grad=True):
    """A Linear's backward GEMMs, row-major: dW = dY^T X (M=out, N=in, K=rows, A
    transposed) and, when its input needs a gradient, dX = dY W (M=rows, N=in, K=out)."""
    g = [(fout, fin, rows, True, False)]
    if input_grad:
        g.append((rows, fin, fout, False, False))
    return g


def _mlp_gemms(widths, batch):
    """Backward GEMMs of a Linear stack whose input needs no grad: no dX for the first."""
    g = []
    for i in range(len(widths) - 1):
        g += _linear_gemms(widths[i], widths[i + 1], batch, input_grad=i > 0)
    return g


def _gpt_gemms(D=128, H=4, T=64, B=8):
    """w3's backward GEMMs: four Linears over B*T tokens (every input needs a gradient, as
    the LayerNorms before them have weights), and per (batch, head) the two attention
    products: s = q k^T gives dq = ds k and dk = ds^T q; y = a v gives da = dy v^T and
    dv = a^T dy."""
    n, dh = B * T, D // H
    g = (_linear_gemms(D, 3 * D, n) + _linear_gemms(D, D, n) + _linear_gemms(D, 4 * D, n)
         + _linear_gemms(4 * D, D, n))
    bh = B * H
    g += [(T, dh, T, False, False, bh), (T, dh, T, True, False, bh),
          (T, T, dh, False, True, bh), (T, dh, T, True, False, bh)]
    return g


# ---------------------------------------------------------------------------------------
# 3: GPT-style transformer block
# ---------------------------------------------------------------------------------------
def _gpt_block(L, seed, dtype=np.float32, D=128, H=4, T=64, B=8):
    nn, F = L.nn, L.nn.functional

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln1 = nn.LayerNorm(D)
            self.qkv = nn.Linear(D, 3 * D)
            self.proj = nn.Linear(D, D)
            self.ln2 = nn.LayerNorm(D)
            self.fc1 = nn.Linear(D, 4 * D)
            self.act = nn.GELU()
            self.fc2 = nn.Linear(4 * D, D)
            # True (1) above the diagonal: the future a position must not see
            self.future = L.tensor(np.triu(np.ones((T, T), dtype=np.float32), 1)) > 0.5

        def attn(self, x):
            b, t, _ = x.shape
            dh = D // H
            q, k, v = self.qkv(x).split(D, dim=2)
            q = q.reshape(b, t, H, dh).transpose(1, 2)
            k = k.reshape(b, t, H, dh).transpose(1, 2)
            v = v.reshape(b, t, H, dh).transpose(1, 2)
            s = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(dh))
            s = s.masked_fill(self.future, float("-inf"))
            a = F.softmax(s, dim=-1)
            y = (a @ v).transpose(1, 2).reshape(b, t, D)
            return self.proj(y)

        def forward(self, x):
            x = x + self.attn(self.ln1(x))
            return x + self.fc2(self.act(self.fc1(self.ln2(x))))

    model = Block()
    names, params = _init_params(L, model, seed, dtype)
    rng = np.random.default_rng(seed + 1)
    x = _tensor(L, rng.standard_normal((B, T, D)).astype(np.float32), dtype)
    tgt = _tensor(L, rng.standard_normal((B, T, D)).astype(np.float32), dtype)

    def loss():
        return F.mse_loss(model(x), tgt)

    return Bound(params=params, names=names, loss=loss, model=model)


# ---------------------------------------------------------------------------------------
# 4: LayerNorm + GELU MLP block
# ---------------------------------------------------------------------------------------
def _ln_gelu(L, seed, dtype=np.float32, N=256, D=128):
    nn, F = L.nn, L.nn.functional

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln = nn.LayerNorm(D)
            self.fc1 = nn.Linear(D, 4 * D)
            self.act = nn.GELU()
            self.fc2 = nn.Linear(4 * D, D)

        def forward(self, x):
            return x + self.fc2(self.act(self.fc1(self.ln(x))))

    model = Block()
    names, params = _init_params(L, model, seed, dtype)
    rng = np.random.default_rng(seed + 1)
    x = _tensor(L, (rng.standard_normal((N, D)) * 2.0 + 0.3).astype(np.float32), dtype)
    tgt = _tensor(L, rng.standard_normal((N, D)).astype(np.float32), dtype)

    def loss():
        return F.mse_loss(model(x), tgt)

    return Bound(params=params, names=names, loss=loss, model=model)


# ---------------------------------------------------------------------------------------
# 5: pointwise chain
# ---------------------------------------------------------------------------------------
CHAIN_OPS = 200
CHAIN_CYCLE = ("mul(w)", "tanh", "add 0.1", "sigmoid", "mul 1.5", "sin", "add(v)", "neg")


def _chain(L, seed, dtype=np.float32, n=4096, ops=CHAIN_OPS):
    """200 pointwise ops cycling through CHAIN_CYCLE, then sum(). Every value stays bounded:
    tanh and sigmoid come right after the ops that can grow it (|w|, |v| < ~4.5)."""
    rng = np.random.default_rng(seed)
    x = _tensor(L, rng.standard_normal(n).astype(np.float32), dtype).requires_grad_()
    w = _tensor(L, rng.standard_normal(n).astype(np.float32), dtype).requires_grad_()
    v = _tensor(L, rng.standard_normal(n).astype(np.float32), dtype).requires_grad_()

    def loss():
        h = x
        for i in range(ops):
            k = i % 8
            if k == 0:
                h = h * w
            elif k == 1:
                h = L.tanh(h)
            elif k == 2:
                h = h + 0.1
            elif k == 3:
                h = L.sigmoid(h)
            elif k == 4:
                h = h * 1.5
            elif k == 5:
                h = L.sin(h)
            elif k == 6:
                h = h + v
            else:
                h = -h
        return h.sum()

    return Bound(params=[x, w, v], names=["x", "w", "v"], loss=loss)


# ---------------------------------------------------------------------------------------
# 7: an MLP built from custom autograd Functions
# ---------------------------------------------------------------------------------------
def _function_classes(L):
    """A tanh-GELU and a fused linear written as custom autograd Functions, as users write
    their own fused ops: forward under no_grad, backward by hand from saved tensors."""
    c = math.sqrt(2.0 / math.pi)

    class Gelu(L.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            t = L.tanh(c * (x + 0.044715 * x * x * x))
            ctx.save_for_backward(x, t)
            return 0.5 * x * (1 + t)

        @staticmethod
        def backward(ctx, g):
            x, t = ctx.saved_tensors
            dt = (1 - t * t) * c * (1 + 3 * 0.044715 * x * x)
            return g * (0.5 * (1 + t) + 0.5 * x * dt)

    class FusedLinear(L.autograd.Function):
        @staticmethod
        def forward(ctx, x, w, b):
            ctx.save_for_backward(x, w)
            return x.matmul(w.t()) + b

        @staticmethod
        def backward(ctx, g):
            x, w = ctx.saved_tensors
            gx = g.matmul(w) if ctx.needs_input_grad[0] else None
            return gx, g.t().matmul(x), g.sum(0)

    return Gelu, FusedLinear


def _function_mlp(L, widths, batch, seed, dtype=np.float32):
    Gelu, FusedLinear = _function_classes(L)
    nn, F = L.nn, L.nn.functional
    model = nn.Sequential(*[nn.Linear(widths[i], widths[i + 1]) for i in range(len(widths) - 1)])
    names, params = _init_params(L, model, seed, dtype)
    rng = np.random.default_rng(seed + 1)
    x = _tensor(L, rng.standard_normal((batch, widths[0])).astype(np.float32), dtype)
    y = _tensor(L, rng.integers(0, widths[-1], (batch,)).astype(np.int64))

    def loss():
        h = x
        for i, layer in enumerate(model):
            h = FusedLinear.apply(h, layer.weight, layer.bias)
            if i < len(model) - 1:
                h = Gelu.apply(h)
        return F.cross_entropy(h, y)

    return Bound(params=params, names=names, loss=loss, model=model)


# ---------------------------------------------------------------------------------------
# ---------------------------------------------------------------------------------------
# 8, 9: convolutional training steps (issue 15)
# ---------------------------------------------------------------------------------------
def _lenet(L, seed, dtype=np.float32, B=32):
    nn, F = L.nn, L.nn.functional

    class LeNet(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv1 = nn.Conv2d(1, 6, 5, padding=2)
            self.conv2 = nn.Conv2d(6, 16, 5)
            self.fc1 = nn.Linear(16 * 5 * 5, 120)
            self.fc2 = nn.Linear(120, 84)
            self.fc3 = nn.Linear(84, 10)

        def forward(self, x):
            x = F.max_pool2d(F.relu(self.conv1(x)), 2)
            x = F.max_pool2d(F.relu(self.conv2(x)), 2)
            x = L.flatten(x, 1)
            return self.fc3(F.relu(self.fc2(F.relu(self.fc1(x)))))

    model = LeNet()
    names, params = _init_params(L, model, seed, dtype)
    rng = np.random.default_rng(seed + 1)
    x = _tensor(L, rng.standard_normal((B, 1, 28, 28)).astype(np.float32), dtype)
    y = _tensor(L, rng.integers(0, 10, (B,)).astype(np.int64))

    def loss():
        return F.cross_entropy(model(x), y)

    return Bound(params=params, names=names, loss=loss, model=model)


def _resnet_block(L, seed, dtype=np.float32, B=16, C=64, S=16):
    nn, F = L.nn, L.nn.functional

    class BasicBlock(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv1 = nn.Conv2d(C, C, 3, padding=1, bias=False)
            self.bn1 = nn.BatchNorm2d(C)
            self.conv2 = nn.Conv2d(C, C, 3, padding=1, bias=False)
            self.bn2 = nn.BatchNorm2d(C)
            self.fc = nn.Linear(C, 10)

        def forward(self, x):
            out = F.relu(self.bn1(self.conv1(x)))
            out = F.relu(self.bn2(self.conv2(out)) + x)
            return self.fc(L.flatten(F.adaptive_avg_pool2d(out, 1), 1))

    model = BasicBlock()
    names, params = _init_params(L, model, seed, dtype)
    rng = np.random.default_rng(seed + 1)
    x = _tensor(L, rng.standard_normal((B, C, S, S)).astype(np.float32), dtype)
    y = _tensor(L, rng.integers(0, 10, (B,)).astype(np.int64))

    def loss():
        return F.cross_entropy(model(x), y)

    return Bound(params=params, names=names, loss=loss, model=model)


def _conv_gemms(cin, cout, k, out_hw, batch, input_grad=True):
    """The backward GEMMs of a convolution computed as im2col + GEMM: dW = dY^T cols and
    dcols = dY W, each batched over the images."""
    rows, inner = out_hw * out_hw, cin * k * k
    g = [(cout, inner, rows, False, True, batch)]
    if input_grad:
        g.append((inner, rows, cout, True, False, batch))
    return g


# ---------------------------------------------------------------------------------------
# 10, 11: double backward (issue 16): a gradient penalty and a physics-informed loss
# ---------------------------------------------------------------------------------------
def _gp_critic(L, seed, dtype=np.float32, B=64, D=128, H=256, lam=10.0):
    """A WGAN-GP critic step: critic(fake).mean() - critic(real).mean() plus
    lam * ((|d critic(x_hat) / d x_hat|_2 - 1)^2).mean() at points x_hat between real and
    fake samples. The forward runs the critic on the three batches; the backward makes the
    input gradient with create_graph=True, adds the penalty and backpropagates the total to
    the critic's parameters."""
    nn = L.nn
    model = nn.Sequential(nn.Linear(D, H), nn.LeakyReLU(0.2), nn.Linear(H, H),
                          nn.LeakyReLU(0.2), nn.Linear(H, H), nn.LeakyReLU(0.2),
                          nn.Linear(H, 1))
    names, params = _init_params(L, model, seed, dtype)
    rng = np.random.default_rng(seed + 1)
    real = _tensor(L, (rng.standard_normal((B, D)) + 0.5).astype(np.float32), dtype)
    fake = _tensor(L, rng.standard_normal((B, D)).astype(np.float32), dtype)
    alpha = _tensor(L, rng.uniform(0, 1, (B, 1)).astype(np.float32), dtype)
    state = {}

    def loss():
        x_hat = (alpha * real + (1 - alpha) * fake).requires_grad_(True)
        state["x_hat"], state["d_hat"] = x_hat, model(x_hat)
        return model(fake).mean() - model(real).mean()

    def backward(wasserstein):
        x_hat, d_hat = state.pop("x_hat"), state.pop("d_hat")
        g, = L.autograd.grad(d_hat.sum(), x_hat, create_graph=True)
        total = wasserstein + ((g.norm(2, dim=1) - 1) ** 2).mean() * lam
        total.backward()
        return total

    return Bound(params=params, names=names, loss=loss, model=model, backward=backward)


def _pinn_burgers(L, seed, dtype=np.float32, N=256, NB=64, H=64, nu=0.01 / math.pi):
    """A physics-informed step for Burgers' equation u_t + u u_x - nu u_xx = 0 with a tanh
    MLP u(x, t): the mean squared residual at N collocation points plus the squared error
    against u(x, 0) = -sin(pi x) at NB boundary points. The forward evaluates u; the backward
    makes u_x, u_t (one create_graph grad) and u_xx (a second one), forms the loss and
    backpropagates it to the parameters."""
    nn = L.nn
    model = nn.Sequential(nn.Linear(2, H), nn.Tanh(), nn.Linear(H, H), nn.Tanh(),
                          nn.Linear(H, H), nn.Tanh(), nn.Linear(H, 1))
    names, params = _init_params(L, model, seed, dtype)
    rng = np.random.default_rng(seed + 1)
    pts = np.stack([rng.uniform(-1, 1, N), rng.uniform(0, 1, N)], 1).astype(np.float32)
    xb = rng.uniform(-1, 1, NB)
    bnd = _tensor(L, np.stack([xb, np.zeros(NB)], 1).astype(np.float32), dtype)
    u0 = _tensor(L, (-np.sin(np.pi * xb)).reshape(NB, 1).astype(np.float32), dtype)
    state = {}

    def loss():
        xt = _tensor(L, pts, dtype).requires_grad_(True)
        state["xt"], state["u"] = xt, model(xt)
        return ((model(bnd) - u0) ** 2).mean()

    def backward(boundary):
        xt, u = state.pop("xt"), state.pop("u")
        du, = L.autograd.grad(u.sum(), xt, create_graph=True)
        u_x, u_t = du[:, 0:1], du[:, 1:2]
        u_xx = L.autograd.grad(u_x.sum(), xt, create_graph=True)[0][:, 0:1]
        residual = u_t + u * u_x - nu * u_xx
        total = (residual ** 2).mean() + boundary
        total.backward()
        return total

    return Bound(params=params, names=names, loss=loss, model=model, backward=backward)


W1 = (784, 256, 256, 10)
W2 = (128, 128, 128, 128, 128)
W6 = (1024, 4096, 4096, 1024)

SPECS = [
    Spec("w1", "MLP 784-256-256-10, batch 64",
         lambda L, dtype=np.float32: _mlp(L, W1, 64, "ce", SEED + 1, dtype),
         "Linear-ReLU-Linear-ReLU-Linear, cross_entropy over 10 classes, batch 64",
         gemms=_mlp_gemms(W1, 64)),
    Spec("w2", "Tiny MLP 4x128, batch 16",
         lambda L, dtype=np.float32: _mlp(L, W2, 16, "mse", SEED + 2, dtype),
         "input 128, four Linear(128, 128) layers with ReLU between them, mse_loss, batch 16",
         gemms=_mlp_gemms(W2, 16)),
    Spec("w3", "GPT block d=128, 4 heads, seq 64, batch 8",
         lambda L, dtype=np.float32: _gpt_block(L, SEED + 3, dtype),
         "pre-LN block: x + proj(causal softmax attention(qkv(ln1 x))), then "
         "x + fc2(GELU(fc1(ln2 x))) with fc1 128->512; masked_fill(-inf) causal mask; mse_loss",
         gemms=_gpt_gemms()),
    Spec("w4", "LayerNorm+GELU MLP, 256 tokens, d=128",
         lambda L, dtype=np.float32: _ln_gelu(L, SEED + 4, dtype),
         "x + fc2(GELU(fc1(layer_norm(x)))), x [256, 128], fc1 128->512, mse_loss",
         gemms=_linear_gemms(128, 512, 256) + _linear_gemms(512, 128, 256)),
    Spec("w5", "Pointwise chain, 200 ops x 4096",
         lambda L, dtype=np.float32: _chain(L, SEED + 5, dtype),
         "200 ops on 4096-element leaves x, w, v cycling through "
         + ", ".join(CHAIN_CYCLE) + "; then sum()"),
    Spec("w6", "Large MLP 1024-4096-4096-1024, batch 256",
         lambda L, dtype=np.float32: _mlp(L, W6, 256, "ce", SEED + 6, dtype),
         "Linear-ReLU-Linear-ReLU-Linear, cross_entropy over 1024 classes, batch 256",
         gemms=_mlp_gemms(W6, 256)),
    Spec("w7", "Custom-Function MLP 784-256-256-10, batch 64",
         lambda L, dtype=np.float32: _function_mlp(L, W1, 64, SEED + 7, dtype),
         "w1's MLP with each Linear a custom autograd.Function (a fused linear) and a tanh-GELU "
         "Function between them; cross_entropy over 10 classes, batch 64",
         gemms=_mlp_gemms(W1, 64)),
    Spec("w8", "LeNet-5 training step, batch 32",
         lambda L, dtype=np.float32: _lenet(L, SEED + 8, dtype),
         "conv 1->6 5x5 pad 2, ReLU, max_pool2d 2, conv 6->16 5x5, ReLU, max_pool2d 2, "
         "Linear 400-120-84-10 with ReLU, cross_entropy; 28x28 images, batch 32",
         gemms=_conv_gemms(1, 6, 5, 28, 32, input_grad=False) + _conv_gemms(6, 16, 5, 10, 32)
         + _mlp_gemms((400, 120, 84, 10), 32), gemm_floor=False),
    Spec("w9", "ResNet basic block with BatchNorm, 64 channels 16x16, batch 16",
         lambda L, dtype=np.float32: _resnet_block(L, SEED + 9, dtype),
         "relu(bn2(conv2(relu(bn1(conv1 x)))) + x), 3x3 convs without bias, BatchNorm2d in "
         "training mode, adaptive_avg_pool2d(1), Linear 64-10, cross_entropy",
         gemms=_conv_gemms(64, 64, 3, 16, 16, input_grad=False) + _conv_gemms(64, 64, 3, 16, 16)
         + _linear_gemms(64, 10, 16), gemm_floor=False),
    Spec("w10", "WGAN-GP critic step, MLP 128-256-256-256-1, batch 64",
         lambda L, dtype=np.float32: _gp_critic(L, SEED + 10, dtype),
         "critic: Linear stack with LeakyReLU(0.2) on real, fake and interpolated batches of "
         "64; penalty 10 ((|grad_x critic(x_hat)|_2 - 1)^2).mean() with autograd.grad("
         "create_graph=True); timed: the penalty's grad and the total's backward"),
    Spec("w11", "PINN step (Burgers), tanh MLP 2-64-64-64-1, 256 points",
         lambda L, dtype=np.float32: _pinn_burgers(L, SEED + 11, dtype),
         "u(x, t) tanh MLP; residual u_t + u u_x - nu u_xx at 256 collocation points by two "
         "create_graph grads, mean squared, plus 64 boundary points against -sin(pi x); "
         "timed: both grads and the total's backward"),
]

BY_KEY = {s.key: s for s in SPECS}


def gemm_flops(gemms):
    return sum(2.0 * g[0] * g[1] * g[2] * (g[5] if len(g) > 5 else 1) for g in gemms)
