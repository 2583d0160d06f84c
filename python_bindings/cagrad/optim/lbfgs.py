"""optim.LBFGS: limited-memory BFGS with an optional strong-Wolfe line search, following
torch.optim.LBFGS's algorithm step for step (same update order, same stopping tests, same
state keys), so that on the same model and data the parameters agree with PyTorch's.

All parameters are handled as one flat vector (the concatenation of their flattened
gradients). Scalars that PyTorch keeps as 0-d tensors of the parameters' dtype (the
directional derivatives g.d, y.s, rho, H_diag, the alphas) are 0-d cagrad tensors here
too, so float32 runs round as PyTorch's do; they become Python numbers only where an
in-place update takes them as its alpha.
"""

from .. import _C
from .._creation import zeros
from .._functions import cat, clone
from .._grad_mode import enable_grad, no_grad
from .optimizer import Optimizer

__all__ = ["LBFGS"]


def _cubic_minimum(x1, f1, g1, x2, f2, g2, bounds=None):
    """Minimizer of the cubic through (x1, f1) and (x2, f2) with slopes g1, g2, clamped to
    bounds (default: the interval [x1, x2]); the bounds' midpoint when the cubic has no
    real minimizer."""
    low, high = bounds if bounds is not None else (min(x1, x2), max(x1, x2))
    d1 = g1 + g2 - 3 * (f1 - f2) / (x1 - x2)
    discriminant = d1 ** 2 - g1 * g2
    if not discriminant >= 0:
        return (low + high) / 2.0
    d2 = discriminant.sqrt() if isinstance(discriminant, _C.TensorBase) else discriminant ** 0.5
    # written from the right end of the interval, whichever of x1, x2 that is
    if x1 <= x2:
        at = x2 - (x2 - x1) * ((g2 + d2 - d1) / (g2 - g1 + 2 * d2))
    else:
        at = x1 - (x1 - x2) * ((g1 + d2 - d1) / (g1 - g2 + 2 * d2))
    return min(max(at, low), high)


class _Point:
    """One trial point of the line search: step t, loss f, flat gradient g, slope g.d."""

    __slots__ = ("t", "f", "g", "gtd")

    def __init__(self, t, f, g, gtd):
        self.t, self.f, self.g, self.gtd = t, f, g, gtd


def _strong_wolfe(evaluate, t, d, f, g, gtd, c1=1e-4, c2=0.9, tolerance_change=1e-9,
                  max_ls=25):
    """Step t along d meeting the strong Wolfe conditions (sufficient decrease c1,
    curvature c2): bracket a minimum by growing t, then shrink the bracket (zoom) by cubic
    interpolation. evaluate(t) -> (loss, flat gradient) at x + t d. Returns
    (loss, flat gradient, t, number of evaluations)."""
    d_norm = d.abs().max()
    start = _Point(0, f, clone(g), gtd)
    trial = _point(evaluate, t, d)
    evals, ls_iter = 1, 0
    bracket, done = None, False
    prev = start
    while ls_iter < max_ls:
        if trial.f > f + c1 * trial.t * gtd or (ls_iter > 1 and trial.f >= prev.f):
            bracket = [prev, _copy(trial)]
            break
        if abs(trial.gtd) <= -c2 * gtd:
            bracket, done = [trial], True
            break
        if trial.gtd >= 0:
            bracket = [prev, _copy(trial)]
            break
        # still descending: extrapolate, between 1.01 and 10 times the current step
        bounds = (trial.t + 0.01 * (trial.t - prev.t), trial.t * 10)
        new_t = _cubic_minimum(prev.t, prev.f, prev.gtd, trial.t, trial.f, trial.gtd, bounds)
        prev = _copy(trial)
        trial = _point(evaluate, new_t, d)
        evals += 1
        ls_iter += 1
    if ls_iter == max_ls:  # out of evaluations: keep the last trial (no zoom follows)
        bracket = [_Point(0, f, g, None), trial]
    if not done:
        trial, evals = _zoom(evaluate, bracket, d, d_norm, f, gtd, c1, c2, tolerance_change,
                             max_ls, ls_iter, evals)
    return trial.f, trial.g, trial.t, evals


def _zoom(evaluate, bracket, d, d_norm, f, gtd, c1, c2, tolerance_change, max_ls, ls_iter,
          evals):
    """Shrinks bracket [a, b] (the lower-loss end is `low`) until a point meets the strong
    Wolfe conditions, the bracket is too small, or the evaluations run out; returns (the
    best point, evals)."""
    low, high = (0, 1) if bracket[0].f <= bracket[-1].f else (1, 0)
    insufficient_progress = False
    done = False
    while not done and ls_iter < max_ls:
        if abs(bracket[1].t - bracket[0].t) * d_norm < tolerance_change:
            break
        a, b = bracket
        t = _cubic_minimum(a.t, a.f, a.gtd, b.t, b.f, b.gtd)
        t, insufficient_progress = _keep_inside(t, a.t, b.t, insufficient_progress)
        trial = _point(evaluate, t, d)
        evals += 1
        ls_iter += 1
        if trial.f > f + c1 * t * gtd or trial.f >= bracket[low].f:
            bracket[high] = _copy(trial)
            low, high = (0, 1) if bracket[0].f <= bracket[1].f else (1, 0)
            continue
        if abs(trial.gtd) <= -c2 * gtd:
            done = True
        elif trial.gtd * (bracket[high].t - bracket[low].t) >= 0:
            bracket[high] = bracket[low]  # the minimum lies between low and the trial
        bracket[low] = _copy(trial)
    return bracket[low], evals


def _keep_inside(t, a, b, insufficient_progress):
    """Moves t away from a bracket end it is within 10% of: at once if it is at or past
    an end or the previous try was also too close, else only on the next try.
    Returns (t, insufficient_progress)."""
    top, bottom = max(a, b), min(a, b)
    eps = 0.1 * (top - bottom)
    if not min(top - t, t - bottom) < eps:
        return t, False
    if insufficient_progress or t >= top or t <= bottom:
        t = top - eps if abs(t - top) < abs(t - bottom) else bottom + eps
        return t, False
    return t, True


def _point(evaluate, t, d):
    f, g = evaluate(t)
    return _Point(t, f, g, g @ d)


def _copy(point):
    return _Point(point.t, point.f, clone(point.g), point.gtd)


class LBFGS(Optimizer):
    """L-BFGS (Nocedal & Wright, Algorithm 7.4/7.5) over all parameters as one vector.
    step(closure) needs a closure that zeroes the gradients, computes the loss, calls
    backward and returns the loss; it may call it up to max_eval times. One parameter
    group only, as in PyTorch."""

    def __init__(self, params, lr=1, max_iter=20, max_eval=None, tolerance_grad=1e-7,
                 tolerance_change=1e-9, history_size=100, line_search_fn=None):
        if isinstance(lr, _C.TensorBase):
            raise NotImplementedError("cagrad's optimizers take lr as a Python number, not a "
                                      "Tensor (see docs/python-api.md)")
        if not 0.0 <= lr:
            raise ValueError(f"Invalid learning rate: {lr}")
        if max_eval is None:
            max_eval = max_iter * 5 // 4
        defaults = dict(lr=lr, max_iter=max_iter, max_eval=max_eval,
                        tolerance_grad=tolerance_grad, tolerance_change=tolerance_change,
                        history_size=history_size, line_search_fn=line_search_fn)
        super().__init__(params, defaults)
        if len(self.param_groups) != 1:
            raise ValueError("LBFGS doesn't support per-parameter options (parameter groups)")
        self._params = self.param_groups[0]["params"]

    # --- the parameters as one flat vector ----------------------------------------------

    def _flat_grad(self):
        """Every parameter's gradient, flattened and concatenated (zeros for a parameter
        without .grad)."""
        return cat([zeros(p.numel(), dtype=p.dtype) if p.grad is None else p.grad.reshape(-1)
                    for p in self._params], 0)

    def _add_step(self, step, direction):
        """param += step * (param's slice of the flat direction), in place."""
        offset = 0
        for p in self._params:
            numel = p.numel()
            p.add_(direction[offset:offset + numel].view_as(p), alpha=float(step))
            offset += numel

    def _evaluate_at(self, closure, x, step, direction):
        """(loss, flat gradient) at x + step * direction; the parameters go back to x."""
        self._add_step(step, direction)
        loss = float(closure())
        flat_grad = self._flat_grad()
        for p, saved in zip(self._params, x):
            p.copy_(saved)
        return loss, flat_grad

    # --- step ---------------------------------------------------------------------------

    def step(self, closure):
        """Up to max_iter L-BFGS iterations; returns the loss of the first closure call."""
        with no_grad():
            return self._step(closure)

    def _step(self, closure):
        group = self.param_groups[0]
        state = self.state[self._params[0]]
        state.setdefault("func_evals", 0)
        state.setdefault("n_iter", 0)

        def evaluate():
            with enable_grad():
                return closure()

        orig_loss = evaluate()
        loss = float(orig_loss)
        evals = 1
        state["func_evals"] += 1
        flat_grad = self._flat_grad()
        if flat_grad.abs().max() <= group["tolerance_grad"]:
            return orig_loss  # already optimal

        for n_iter in range(1, group["max_iter"] + 1):
            state["n_iter"] += 1
            d = self._direction(state, flat_grad, group["history_size"])
            if state.get("prev_flat_grad") is None:
                state["prev_flat_grad"] = clone(flat_grad)
            else:
                state["prev_flat_grad"].copy_(flat_grad)
            prev_loss = state["prev_loss"] = loss
            # the first step is scaled by the gradient's size, later ones are lr
            if state["n_iter"] == 1:
                t = min(1.0, 1.0 / flat_grad.abs().sum()) * group["lr"]
            else:
                t = group["lr"]
            state["d"], state["t"] = d, t
            gtd = flat_grad @ d
            if gtd > -group["tolerance_change"]:
                break  # not a descent direction any more
            loss, flat_grad, t, spent, optimal = self._move(
                evaluate, group, d, t, loss, flat_grad, gtd, evals, n_iter)
            state["t"] = t
            evals += spent
            state["func_evals"] += spent
            if (n_iter == group["max_iter"] or evals >= group["max_eval"] or optimal
                    or d.mul(t).abs().max() <= group["tolerance_change"]
                    or abs(loss - prev_loss) < group["tolerance_change"]):
                break
        return orig_loss

    def _move(self, evaluate, group, d, t, loss, flat_grad, gtd, evals, n_iter):
        """Takes the step along d (after a line search when asked); returns (loss, flat
        gradient, step, evaluations spent, whether the gradient is below tolerance)."""
        search = group["line_search_fn"]
        if search is not None:
            if search != "strong_wolfe":
                raise RuntimeError("only 'strong_wolfe' is supported")
            x = [clone(p) for p in self._params]
            loss, flat_grad, t, spent = _strong_wolfe(
                lambda step: self._evaluate_at(evaluate, x, step, d), t, d, loss, flat_grad,
                gtd, max_ls=group["max_eval"] - evals)
            self._add_step(t, d)
            return loss, flat_grad, t, spent, bool(flat_grad.abs().max()
                                                   <= group["tolerance_grad"])
        self._add_step(t, d)
        if n_iter == group["max_iter"]:
            return loss, flat_grad, t, 0, False  # the last iteration skips re-evaluating
        loss = float(evaluate())
        flat_grad = self._flat_grad()
        return loss, flat_grad, t, 1, bool(flat_grad.abs().max() <= group["tolerance_grad"])

    def _direction(self, state, flat_grad, history_size):
        """The search direction -H g: the gradient at the first iteration, then the
        two-loop recursion over the stored curvature pairs (s, y), updated first with the
        last step's pair when it has positive curvature y.s > 1e-10."""
        if state["n_iter"] == 1:
            state.update(old_dirs=[], old_stps=[], ro=[], H_diag=1)
            return flat_grad.neg()
        old_dirs, old_stps, ro = state["old_dirs"], state["old_stps"], state["ro"]
        y = flat_grad.sub(state["prev_flat_grad"])
        s = state["d"].mul(state["t"])
        ys = y @ s
        if ys > 1e-10:
            if len(old_dirs) == history_size:  # forget the oldest pair
                old_dirs.pop(0)
                old_stps.pop(0)
                ro.pop(0)
            old_dirs.append(y)
            old_stps.append(s)
            ro.append(1.0 / ys)
            state["H_diag"] = ys / (y @ y)
        alphas = state.setdefault("al", [None] * history_size)
        q = flat_grad.neg()
        for i in range(len(old_dirs) - 1, -1, -1):
            alphas[i] = (old_stps[i] @ q) * ro[i]
            q.add_(old_dirs[i], alpha=-float(alphas[i]))
        r = q * state["H_diag"]
        for i in range(len(old_dirs)):
            beta = (old_dirs[i] @ r) * ro[i]
            r.add_(old_stps[i], alpha=float(alphas[i] - beta))
        return r
