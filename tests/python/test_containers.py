"""ModuleDict, ParameterList and ParameterDict against torch.nn: registration names,
state_dict round trips, the list/mapping protocol, reprs and errors."""

from collections import OrderedDict

import numpy as np
import pytest
import torch

from helpers import TOL_SUM, assert_close, ca, to_np


def build(L):
    nn = L.nn

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.blocks = nn.ModuleDict({"enc": nn.Linear(3, 4), "dec": nn.Linear(4, 2)})
            self.scales = nn.ParameterList([nn.Parameter(L.ones(2)), L.zeros(3, 2)])
            self.extra = nn.ParameterDict({"zeta": L.ones(1), "alpha": L.zeros(2, 2)})

    return Net()


def lib_repr(module):
    return repr(module).replace("cagrad.", "torch.")


def test_names_and_state_dict_keys_match_torch():
    c, t = build(ca), build(torch)
    assert [n for n, _ in c.named_parameters()] == [n for n, _ in t.named_parameters()]
    assert list(c.state_dict()) == list(t.state_dict())
    assert [tuple(p.shape) for p in c.parameters()] == [tuple(p.shape) for p in t.parameters()]


def test_load_state_dict_from_torch_values():
    c, t = build(ca), build(torch)
    with torch.no_grad():
        for i, p in enumerate(t.parameters()):
            p.copy_(torch.arange(p.numel(), dtype=p.dtype).reshape(p.shape) * (i + 1))
    result = c.load_state_dict({k: ca.tensor(v.numpy()) for k, v in t.state_dict().items()})
    assert not result.missing_keys and not result.unexpected_keys
    for (name, cp), tp in zip(c.named_parameters(), t.parameters()):
        np.testing.assert_array_equal(to_np(cp), to_np(tp), err_msg=name)


def test_repr_matches_torch():
    c, t = build(ca), build(torch)
    c.scales.append("not a tensor")
    t.scales.append("not a tensor")
    assert lib_repr(c) == repr(t)
    assert lib_repr(ca.nn.ParameterList()) == repr(torch.nn.ParameterList())
    assert lib_repr(ca.nn.ModuleDict()) == repr(torch.nn.ModuleDict())


def module_dict_ops(L):
    nn = L.nn
    d = nn.ModuleDict([("a", nn.ReLU()), ("b", nn.Tanh())])
    d["c"] = nn.Linear(1, 1)
    d.update(OrderedDict(z=nn.Identity(), a=nn.Sigmoid()))
    log = [list(d.keys()), type(d["a"]).__name__, "b" in d, "q" in d, len(d)]
    popped = d.pop("b")
    del d["z"]
    log += [type(popped).__name__, list(d), [type(m).__name__ for m in d.values()],
            [k for k, _ in d.items()], [n for n, _ in d.named_parameters()]]
    d.clear()
    return log + [len(d)]


def test_module_dict_protocol_matches_torch():
    assert module_dict_ops(ca) == module_dict_ops(torch)


def parameter_list_ops(L):
    nn = L.nn
    pl = nn.ParameterList([L.ones(1), L.ones(2)])
    pl.append(L.ones(3)).extend([L.ones(4), L.ones(5)])
    pl += [L.ones(6)]
    pl[0] = L.zeros(7)
    log = [len(pl), [p.numel() for p in pl], pl[-1].numel(), [p.numel() for p in pl[1:5:2]],
           type(pl[2:]).__name__, all(isinstance(p, nn.Parameter) for p in pl),
           [n for n, _ in pl.named_parameters()], "0" in dir(pl)]
    return log


def test_parameter_list_protocol_matches_torch():
    assert parameter_list_ops(ca) == parameter_list_ops(torch)


def parameter_dict_ops(L):
    nn = L.nn
    pd = nn.ParameterDict({"b": L.ones(1), "a": L.ones(2)})  # plain dict: sorted keys
    log = [list(pd)]
    pd.update([("c", L.ones(3))])
    pd["d"] = nn.Parameter(L.ones(4))
    log += [list(pd.keys()), [p.numel() for p in pd.values()], [k for k, _ in pd.items()]]
    log += [pd.get("zz") is None, pd.setdefault("e", L.ones(5)).numel(), "e" in pd]
    key, value = pd.popitem()
    log += [key, value.numel(), pd.pop("a").numel(), list(reversed(pd)), list(pd.copy())]
    merged = pd | nn.ParameterDict({"x": L.ones(1)})
    log += [list(merged), list(pd.fromkeys(["p", "q"]))]
    del pd["b"]
    log += [list(pd), [n for n, _ in pd.named_parameters()]]
    pd.clear()
    return log + [len(pd)]


def test_parameter_dict_protocol_matches_torch():
    assert parameter_dict_ops(ca) == parameter_dict_ops(torch)


def error_of(fn):
    try:
        fn()
    except Exception as e:  # noqa: BLE001 (the type and message are what is compared)
        return type(e), str(e).replace("cagrad", "torch")
    raise AssertionError("no error raised")


ERRORS = {
    "list_index": lambda L: L.nn.ParameterList([L.ones(1)])[3],
    "list_extend_tensor": lambda L: L.nn.ParameterList().extend(L.ones(2)),
    "list_call": lambda L: L.nn.ParameterList()(1),
    "dict_key_type": lambda L: L.nn.ParameterDict()[3],
    "dict_call": lambda L: L.nn.ParameterDict()(1),
    "dict_bad_update": lambda L: L.nn.ParameterDict().update(5),
    "dict_bad_pair": lambda L: L.nn.ParameterDict([("a", L.ones(1), 3)]),
    "dict_missing": lambda L: L.nn.ParameterDict()["nope"],
    "moduledict_bad_update": lambda L: L.nn.ModuleDict().update(5),
    "moduledict_bad_pair": lambda L: L.nn.ModuleDict([("a",)]),
    "moduledict_not_module": lambda L: L.nn.ModuleDict({"a": 3}),
    "moduledict_dot": lambda L: L.nn.ModuleDict({"a.b": L.nn.ReLU()}),
    "moduledict_missing": lambda L: L.nn.ModuleDict()["x"],
}


@pytest.mark.parametrize("case", list(ERRORS))
def test_errors_match_torch(case):
    c_type, c_msg = error_of(lambda: ERRORS[case](ca))
    t_type, t_msg = error_of(lambda: ERRORS[case](torch))
    assert c_type is t_type
    assert c_msg == t_msg


def test_gradients_flow_through_containers():
    for dtype in ("float32", "float64"):
        c, t = build(ca).to(getattr(ca, dtype)), build(torch).to(getattr(torch, dtype))
        c.load_state_dict({k: ca.tensor(v.numpy()) for k, v in t.state_dict().items()})

        def loss(L, m):
            x = L.ones(5, 3, dtype=getattr(L, dtype))
            h = m.blocks["dec"](m.blocks["enc"](x)) * m.scales[0]
            return (h.sum() * m.scales[1].sum() + (m.extra["alpha"] * 2).sum()) ** 2

        loss(ca, c).backward()
        loss(torch, t).backward()
        for (name, cp), tp in zip(c.named_parameters(), t.parameters()):
            assert_close(cp.grad, tp.grad, **TOL_SUM[dtype], msg=name)  # None for unused "zeta"
