"""cagrad.explain(fn)(*args): graph count, graph break count, op count, break reasons with
the user's file and line, ops per graph; explicit and implicit (bool, item, tolist, numpy)
breaks. Expected lines are computed with inspect from marker comments in this file."""

import inspect
import os

import numpy as np
import pytest

from helpers import ca, needs_cagrad, to_np

pytestmark = needs_cagrad


def line_of(fn, marker):
    """The absolute line number of the line of fn's source that contains `marker`."""
    lines, start = inspect.getsourcelines(fn)
    hits = [start + i for i, text in enumerate(lines) if marker in text]
    assert len(hits) == 1, f"marker {marker!r} found {len(hits)} times"
    return hits[0]


def assert_site(reason, fn, marker):
    frame = reason.user_stack[-1]
    assert os.path.samefile(frame.filename, __file__), frame
    assert frame.lineno == line_of(fn, marker), (frame, marker)


def x_in():
    return ca.tensor(np.array([[1.0, -2.0, 3.0], [0.5, 0.25, -1.0]]))


def test_no_breaks():
    def fn(x):
        y = x * 2.0
        z = y.exp()
        return z.sum()

    out = ca.explain(fn)(x_in())
    assert out.graph_count == 1
    assert out.graph_break_count == 0
    assert out.op_count == 3
    assert [len(g) for g in out.ops_per_graph] == [3]
    assert out.break_reasons == [] or len(out.break_reasons) == 0


def test_explicit_breaks_file_and_line():
    def fn(x):
        a = x * 2.0
        ca.graph_break()  # BREAK-1
        b = a.exp() + 1.0
        ca.graph_break()  # BREAK-2
        return b.sum()

    out = ca.explain(fn)(x_in())
    assert out.graph_count == 3
    assert out.graph_break_count == 2
    assert out.op_count == 4
    assert [len(g) for g in out.ops_per_graph] == [1, 2, 1]
    assert len(out.break_reasons) == 2
    assert_site(out.break_reasons[0], fn, "# BREAK-1")
    assert_site(out.break_reasons[1], fn, "# BREAK-2")
    assert isinstance(out.break_reasons[0].reason, str) and out.break_reasons[0].reason


def _break_in_helper(t):
    ca.graph_break()  # HELPER-BREAK
    return t * 3.0


def test_break_in_nested_function_has_full_user_stack():
    def fn(x):
        y = x + 1.0
        y = _break_in_helper(y)  # CALL-SITE
        return y.sum()

    out = ca.explain(fn)(x_in())
    assert out.graph_break_count == 1 and out.graph_count == 2
    stack = out.break_reasons[0].user_stack
    assert_site(out.break_reasons[0], _break_in_helper, "# HELPER-BREAK")
    assert any(f.lineno == line_of(fn, "# CALL-SITE") and os.path.samefile(f.filename, __file__)
               for f in stack[:-1]), stack
    assert not any(os.sep + "cagrad" + os.sep in f.filename for f in stack), (
        "frames inside the cagrad package must be left out of the user stack")


IMPLICIT = ["item", "tolist", "numpy", "bool"]


def _implicit_fn(kind):
    def fn(x):
        y = x * 2.0
        s = y.sum()
        if kind == "item":
            v = s.item()  # IMPLICIT-item
        elif kind == "tolist":
            v = y.tolist()  # IMPLICIT-tolist
        elif kind == "numpy":
            v = y.numpy()  # IMPLICIT-numpy
        else:
            v = 1.0 if s > 0 else -1.0  # IMPLICIT-bool
        return (y * 3.0).exp(), v

    return fn


@pytest.mark.parametrize("kind", IMPLICIT)
def test_implicit_break(kind):
    fn = _implicit_fn(kind)
    out = ca.explain(fn)(x_in())
    expected_ops_first = 2 if kind != "bool" else 3  # mul, sum (, gt for bool)
    assert out.graph_break_count == 1, out.break_reasons
    assert out.graph_count == 2
    assert [len(g) for g in out.ops_per_graph] == [expected_ops_first, 2]
    assert out.op_count == expected_ops_first + 2
    r = out.break_reasons[0]
    assert_site(r, fn, f"# IMPLICIT-{kind}")
    word = {"item": "item", "tolist": "tolist", "numpy": "numpy", "bool": "bool"}[kind]
    assert word in r.reason, r.reason


def test_all_implicit_breaks_counted():
    def fn(x):
        y = x * 2.0
        a = y.sum().item()  # ALL-item
        b = y.tolist()  # ALL-tolist
        c = y.numpy()  # ALL-numpy
        if (y.max() > 0):  # ALL-bool
            y = y + 1.0
        return y, a, b, c

    out = ca.explain(fn)(x_in())
    assert out.graph_break_count == 4
    assert len(out.break_reasons) == 4
    for r, m in zip(out.break_reasons, ["item", "tolist", "numpy", "bool"]):
        assert_site(r, fn, f"# ALL-{m}")
    # graphs with at least one op: [mul, sum] | [] | [] | [max, gt] | [add]
    assert out.op_count == 5
    assert out.op_count == sum(len(g) for g in out.ops_per_graph)
    assert out.graph_count == len(out.ops_per_graph) == 3


def test_breaks_in_loop():
    def fn(x):
        for _ in range(3):
            x = x * 2.0
            x.sum().item()  # LOOP
        return x

    out = ca.explain(fn)(x_in())
    assert out.graph_break_count == 3
    assert out.graph_count == 3  # the graph after the last break has no ops
    assert all(r.user_stack[-1].lineno == line_of(fn, "# LOOP") for r in out.break_reasons)
    assert out.op_count == 6


def test_explain_runs_fn_once_and_values_are_right():
    calls = []

    def fn(x):
        calls.append(1)
        return (x * 2.0).sum()

    out = ca.explain(fn)(x_in())
    assert calls == [1]
    assert out.graph_count == 1


def test_explain_does_not_change_results_or_grads():
    x = ca.tensor(np.array([1.0, 2.0, 3.0]), requires_grad=True)

    def fn(x):
        y = (x * x).sum()
        y.item()
        return y

    ca.explain(fn)(x)
    y = fn(x)
    y.backward()
    np.testing.assert_allclose(to_np(x.grad), [2.0, 4.0, 6.0])


def test_explain_str_mentions_counts():
    def fn(x):
        x = x + 1.0
        ca.graph_break()
        return x * 2.0

    text = str(ca.explain(fn)(x_in()))
    assert "Graph Count: 2" in text and "Graph Break Count: 1" in text


def test_graph_break_outside_explain_advances_forward_graph():
    g0 = ca._C.forward_graph_id()
    ca.graph_break()
    assert ca._C.forward_graph_id() == g0 + 1
    t = ca.ones(2, requires_grad=True) * 2.0
    assert t._forward_graph == g0 + 1
    t.sum().item()
    assert ca._C.forward_graph_id() == g0 + 2
