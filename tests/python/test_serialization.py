"""cagrad.save / cagrad.load against torch 2.13's torch.save / torch.load: checkpoints move
both ways (values, dtypes, shapes, shared storages, Parameters, containers, module and
optimizer state_dicts), weights_only refuses unsafe globals, unsupported dtypes and devices
raise, and the archive layout is the one torch reads (64-byte aligned storages, mmap)."""

import collections
import fractions
import io
import pathlib
import pickle
import zipfile

import numpy as np
import pytest
import torch

from helpers import assert_close, ca, to_np

DTYPES = ["float32", "float64", "int64"]


def _data(name, shape=(3, 4)):
    r = np.random.default_rng(0)
    if name == "int64":
        return r.integers(-50, 50, shape).astype(np.int64)
    return r.standard_normal(shape).astype(name)


def _torch_roundtrip_bytes(obj):
    buf = io.BytesIO()
    torch.save(obj, buf)
    return buf.getvalue()


def _cagrad_bytes(obj):
    buf = io.BytesIO()
    ca.save(obj, buf)
    return buf.getvalue()


# --------------------------------------------------------------------- torch -> cagrad
@pytest.mark.parametrize("dtype", DTYPES)
def test_torch_tensor_loads_in_cagrad(dtype):
    t = torch.tensor(_data(dtype))
    c = ca.load(io.BytesIO(_torch_roundtrip_bytes(t)))
    assert type(c) is ca.Tensor
    assert c.dtype is getattr(ca, dtype)
    assert tuple(c.shape) == tuple(t.shape)
    assert_close(c, t)


def test_torch_views_share_storage_after_load():
    base = torch.arange(12.0).reshape(3, 4)
    saved = {"base": base, "t": base.t(), "col": base[:, 1], "rows": base[1:],
             "ex": torch.ones(3)[None].expand(2, 3)}
    blob = _torch_roundtrip_bytes(saved)
    c, t = ca.load(io.BytesIO(blob)), torch.load(io.BytesIO(blob))
    for key in saved:
        assert tuple(c[key].stride()) == tuple(t[key].stride()), key
        assert_close(c[key], t[key], msg=key)
    # views of one saved storage are views of one buffer again, in both libraries
    for lib_result in (c, t):
        lib_result["base"][2, 1] = 100.0
    for key in ("t", "col", "rows"):
        assert_close(c[key], t[key], msg=key)


def test_torch_checkpoint_containers_load():
    ckpt = {"epoch": 3, "lr": 0.125, "name": "run", "flags": [True, None, (1, 2.5)],
            "nested": {"shape": torch.Size([2, 3]), "dtype": torch.float64,
                       "dev": torch.device("cpu"), "raw": b"\x00\x01"},
            "ordered": collections.OrderedDict(b=1, a=2), "set": {1, 2}}
    c = ca.load(io.BytesIO(_torch_roundtrip_bytes(ckpt)))
    assert c["epoch"] == 3 and c["lr"] == 0.125 and c["name"] == "run"
    assert c["flags"] == [True, None, (1, 2.5)]
    assert type(c["nested"]["shape"]) is ca.Size and c["nested"]["shape"] == (2, 3)
    assert c["nested"]["dtype"] is ca.float64
    assert c["nested"]["dev"] == ca.device("cpu")
    assert c["nested"]["raw"] == b"\x00\x01"
    assert type(c["ordered"]) is collections.OrderedDict and list(c["ordered"]) == ["b", "a"]
    assert c["set"] == {1, 2}


@pytest.mark.parametrize("requires_grad", [True, False])
def test_torch_parameter_loads_as_cagrad_parameter(requires_grad):
    p = torch.nn.Parameter(torch.tensor(_data("float64")), requires_grad=requires_grad)
    c = ca.load(io.BytesIO(_torch_roundtrip_bytes({"p": p}))) ["p"]
    assert isinstance(c, ca.nn.Parameter)
    assert c.requires_grad is requires_grad
    assert_close(c, p)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_loaded_tensor_gradients_match_torch(dtype):
    blob = _torch_roundtrip_bytes({"w": torch.tensor(_data(dtype), requires_grad=True),
                                   "x": torch.tensor(_data(dtype, (4, 2)))})
    results = []
    for lib in (ca, torch):
        ck = lib.load(io.BytesIO(blob))
        assert ck["w"].requires_grad and ck["w"].is_leaf
        (ck["w"] @ ck["x"]).tanh().sum().backward()
        results.append(ck["w"].grad)
    assert_close(*results)


@pytest.mark.parametrize("torch_dtype", [torch.float16, torch.bfloat16,
                                         torch.int32, torch.uint8])
def test_unsupported_dtype_is_named(torch_dtype):
    blob = _torch_roundtrip_bytes({"x": torch.zeros(2, dtype=torch_dtype)})
    name = str(torch_dtype).removeprefix("torch.")
    with pytest.raises(TypeError, match=name):
        ca.load(io.BytesIO(blob))


def test_float16_dtype_object_in_a_checkpoint_loads():
    c = ca.load(io.BytesIO(_torch_roundtrip_bytes({"amp_dtype": torch.float16})))
    assert c["amp_dtype"] is ca.float16


# --------------------------------------------------------------------- cagrad -> torch
@pytest.mark.parametrize("dtype", DTYPES)
def test_cagrad_tensor_loads_in_torch(dtype):
    arr = _data(dtype)
    t = torch.load(io.BytesIO(_cagrad_bytes(ca.tensor(arr))))  # weights_only=True default
    assert type(t) is torch.Tensor and t.dtype == getattr(torch, dtype)
    np.testing.assert_array_equal(t.numpy(), arr)


def test_cagrad_views_share_one_storage_in_torch():
    c_base, t_base = ca.arange(12.0).reshape(3, 4), torch.arange(12.0).reshape(3, 4)

    def views(base):
        return {"base": base, "t": base.t(), "col": base[:, 2], "tail": base[2:],
                "ex": base[0][None].expand(2, 4), "empty": base[:0], "scalar": base[1, 1]}

    from_ca = torch.load(io.BytesIO(_cagrad_bytes(views(c_base))))
    from_torch = torch.load(io.BytesIO(_torch_roundtrip_bytes(views(t_base))))
    for key, t in from_torch.items():
        assert_close(from_ca[key], t, msg=key)
        assert from_ca[key].stride() == t.stride(), key
        assert from_ca[key].storage_offset() == t.storage_offset(), key
    ptr = from_ca["base"].untyped_storage().data_ptr()
    for key in ("t", "col", "tail", "ex", "scalar"):
        assert from_ca[key].untyped_storage().data_ptr() == ptr, key


def test_cagrad_containers_and_parameters_load_in_torch():
    weight = ca.nn.Parameter(ca.tensor(_data("float32")))
    frozen = ca.nn.Parameter(ca.ones(2, dtype=ca.float64), requires_grad=False)
    obj = {"w": weight, "frozen": frozen, "grad_leaf": ca.zeros(3, requires_grad=True),
           "shape": weight.shape, "dtype": ca.float64, "dev": ca.device("cpu"),
           "meta": collections.OrderedDict(step=7, betas=(0.9, 0.999), tag="x", none=None),
           "raw": b"ab"}
    t = torch.load(io.BytesIO(_cagrad_bytes(obj)))
    assert type(t["w"]) is torch.nn.Parameter and t["w"].requires_grad
    assert type(t["frozen"]) is torch.nn.Parameter and not t["frozen"].requires_grad
    assert t["grad_leaf"].requires_grad and t["grad_leaf"].is_leaf
    assert_close(weight, t["w"])
    assert t["shape"] == torch.Size([3, 4]) and type(t["shape"]) is torch.Size
    assert t["dtype"] is torch.float64 and t["dev"] == torch.device("cpu")
    assert type(t["meta"]) is collections.OrderedDict
    assert t["meta"] == collections.OrderedDict(step=7, betas=(0.9, 0.999), tag="x", none=None)
    assert t["raw"] == b"ab"


def test_cagrad_round_trip_keeps_sharing_and_flags():
    base = ca.arange(6.0, dtype=ca.float64).reshape(2, 3)
    obj = {"base": base, "col": base[:, 1], "p": ca.nn.Parameter(ca.ones(2))}
    back = ca.load(io.BytesIO(_cagrad_bytes(obj)))
    back["base"][1, 1] = -1.0
    assert back["col"].tolist() == [1.0, -1.0]
    assert isinstance(back["p"], ca.nn.Parameter) and back["p"].requires_grad
    assert back["base"].dtype is ca.float64


def test_tensor_attributes_round_trip_both_ways():
    def tagged(lib):
        t, p = lib.ones(2), lib.nn.Parameter(lib.zeros(1))
        t.note, p.tag = 3, "frozen"
        return {"t": t, "p": p}

    for blob in (_cagrad_bytes(tagged(ca)), _torch_roundtrip_bytes(tagged(torch))):
        for lib, parameter_class in ((ca, ca.nn.Parameter), (torch, torch.nn.Parameter)):
            back = lib.load(io.BytesIO(blob))
            assert back["t"].note == 3 and back["p"].tag == "frozen"
            assert type(back["p"]) is parameter_class


# ------------------------------------------------------------------------ files
def test_paths_pathlike_and_file_objects(tmp_path):
    arr = _data("float32")
    ca.save({"x": ca.tensor(arr)}, str(tmp_path / "a.pt"))
    ca.save({"x": ca.tensor(arr)}, tmp_path / "b.pt")
    with open(tmp_path / "c.pt", "wb") as f:
        ca.save({"x": ca.tensor(arr)}, f)
    torch.save({"x": torch.tensor(arr)}, tmp_path / "d.pt")
    for name in "abcd":
        path = tmp_path / f"{name}.pt"
        np.testing.assert_array_equal(to_np(torch.load(path)["x"]), arr)
        np.testing.assert_array_equal(to_np(ca.load(str(path))["x"]), arr)
        with open(path, "rb") as f:
            np.testing.assert_array_equal(to_np(ca.load(f)["x"]), arr)
    # torch names the top folder after the file, as cagrad does
    assert zipfile.ZipFile(tmp_path / "b.pt").namelist()[0] == "b/data.pkl"


def test_storages_are_aligned_and_mmap_loads(tmp_path):
    path = tmp_path / "m.pt"
    ca.save({"a": ca.tensor(_data("float32", (5,))), "b": ca.tensor(_data("int64", (7,)))},
            path)
    with zipfile.ZipFile(path) as archive:
        raw = path.read_bytes()
        for info in archive.infolist():
            if "/data/" in info.filename:
                name_len, extra_len = np.frombuffer(raw[info.header_offset + 26:
                                                        info.header_offset + 30], "<u2")
                assert (info.header_offset + 30 + name_len + extra_len) % 64 == 0
    loaded = torch.load(path, mmap=True)
    np.testing.assert_array_equal(loaded["b"].numpy(), _data("int64", (7,)))


@pytest.mark.parametrize("writer", ["torch", "cagrad"])
def test_mmap_load_views_the_file_copy_on_write(tmp_path, writer):
    path = tmp_path / "m.pt"
    lib = torch if writer == "torch" else ca
    base = lib.tensor(_data("float64", (4, 3)))
    lib.save({"base": base, "col": base[:, 1], "n": lib.arange(5)}, path)
    on_disk = path.read_bytes()
    c, t = ca.load(path, mmap=True), torch.load(path, mmap=True)
    for key in ("base", "col", "n"):
        assert_close(c[key], t[key], msg=key)
    c["base"][0, 1] = 7.0  # seen through the view, never written to the file
    assert c["col"].tolist()[0] == 7.0
    assert path.read_bytes() == on_disk


# ------------------------------------------------------------------ state_dicts
def _mlp(lib):
    return lib.nn.Sequential(lib.nn.Linear(4, 8), lib.nn.Tanh(), lib.nn.Linear(8, 2))


def _train(lib, model, steps=3):
    opt = lib.optim.Adam(model.parameters(), lr=0.05)
    x = lib.tensor(_data("float32", (6, 4)))
    for _ in range(steps):
        opt.zero_grad()
        (model(x) ** 2).mean().backward()
        opt.step()
    return opt, x


def test_module_state_dict_cagrad_to_torch_and_back(tmp_path):
    cmodel = _mlp(ca)
    _, x = _train(ca, cmodel)
    ca.save(cmodel.state_dict(), tmp_path / "c.pt")
    tmodel = _mlp(torch)
    tmodel.load_state_dict(torch.load(tmp_path / "c.pt"))
    tx = torch.tensor(to_np(x))
    assert_close(cmodel(x), tmodel(tx), rtol=1e-6, atol=1e-6)
    # ... and back: torch trains further, cagrad loads torch's file
    _train(torch, tmodel)
    torch.save(tmodel.state_dict(), tmp_path / "t.pt")
    cmodel.load_state_dict(ca.load(tmp_path / "t.pt"))
    assert_close(cmodel(x), tmodel(tx), rtol=1e-6, atol=1e-6)


def test_optimizer_state_dict_round_trips_with_torch(tmp_path):
    cmodel = _mlp(ca)
    copt, x = _train(ca, cmodel)
    ca.save({"model": cmodel.state_dict(), "optim": copt.state_dict()}, tmp_path / "c.pt")
    tmodel = _mlp(torch)
    topt = torch.optim.Adam(tmodel.parameters(), lr=0.05)
    ck = torch.load(tmp_path / "c.pt")
    tmodel.load_state_dict(ck["model"])
    topt.load_state_dict(ck["optim"])
    # both continue from the checkpoint and stay together
    tx = torch.tensor(to_np(x))
    for lib, model, opt, data in ((ca, cmodel, copt, x), (torch, tmodel, topt, tx)):
        for _ in range(2):
            opt.zero_grad()
            (model(data) ** 2).mean().backward()
            opt.step()
    for cp, tp in zip(cmodel.parameters(), tmodel.parameters()):
        assert_close(cp, tp, rtol=1e-5, atol=1e-6)
    # and torch's optimizer state loads back into cagrad
    torch.save(topt.state_dict(), tmp_path / "t.pt")
    copt.load_state_dict(ca.load(tmp_path / "t.pt"))
    assert copt.state_dict()["param_groups"][0]["lr"] == 0.05
    for key, t_state in topt.state_dict()["state"].items():
        for name in ("exp_avg", "exp_avg_sq"):
            assert_close(copt.state_dict()["state"][key][name], t_state[name])


# ----------------------------------------------------------------- weights_only
def test_unsafe_global_is_refused_like_torch():
    blob = _torch_roundtrip_bytes({"x": torch.ones(1), "frac": fractions.Fraction(1, 3)})
    with pytest.raises(pickle.UnpicklingError):
        torch.load(io.BytesIO(blob))
    with pytest.raises(pickle.UnpicklingError, match="fractions.Fraction"):
        ca.load(io.BytesIO(blob))
    assert ca.load(io.BytesIO(blob), weights_only=False)["frac"] == fractions.Fraction(1, 3)


def test_cagrad_file_with_unsafe_global_is_refused_by_both():
    blob = _cagrad_bytes({"frac": fractions.Fraction(2, 5)})
    with pytest.raises(pickle.UnpicklingError):
        torch.load(io.BytesIO(blob))
    with pytest.raises(pickle.UnpicklingError):
        ca.load(io.BytesIO(blob))
    assert torch.load(io.BytesIO(blob), weights_only=False)["frac"] == fractions.Fraction(2, 5)


def test_safe_globals_allow_a_class():
    blob = _cagrad_bytes({"frac": fractions.Fraction(2, 5)})
    with ca.serialization.safe_globals([fractions.Fraction]):
        assert ca.load(io.BytesIO(blob))["frac"] == fractions.Fraction(2, 5)
    with pytest.raises(pickle.UnpicklingError):
        ca.load(io.BytesIO(blob))


def test_weights_only_with_a_pickle_module_is_refused_like_torch():
    blob = _cagrad_bytes({"x": ca.ones(1)})
    for lib in (torch, ca):
        with pytest.raises(RuntimeError, match="explicit pickle_module"):
            lib.load(io.BytesIO(blob), pickle_module=pickle, weights_only=True)


# ------------------------------------------------------------- errors, locations
@pytest.mark.parametrize("map_location", [None, "cpu", "cpu:0", "device", {"cuda:0": "cpu"}])
def test_cpu_map_locations_are_accepted(map_location):
    if map_location == "device":
        map_location = ca.device("cpu")
    c = ca.load(io.BytesIO(_torch_roundtrip_bytes(torch.ones(2))), map_location=map_location)
    assert c.tolist() == [1.0, 1.0]


def test_cuda_map_location_raises_like_torch():
    blob = _torch_roundtrip_bytes(torch.ones(2))
    for lib in (torch, ca):
        with pytest.raises(RuntimeError):
            lib.load(io.BytesIO(blob), map_location="cuda")


def test_not_a_zip_checkpoint_raises():
    legacy = io.BytesIO()
    torch.save(torch.ones(2), legacy, _use_new_zipfile_serialization=False)
    with pytest.raises(RuntimeError, match="legacy"):
        ca.load(io.BytesIO(legacy.getvalue()))
    with pytest.raises(RuntimeError):
        ca.load(io.BytesIO(b"not a checkpoint"))


def test_missing_file_raises_like_torch(tmp_path):
    for lib in (torch, ca):
        with pytest.raises(FileNotFoundError):
            lib.load(tmp_path / "missing.pt")


def test_unsupported_options_raise():
    blob = _cagrad_bytes(ca.ones(1))
    for lib in (torch, ca):
        with pytest.raises(ValueError, match="file path .* mmap"):
            lib.load(io.BytesIO(blob), mmap=True)
    with pytest.raises(NotImplementedError, match="callable"):
        ca.load(io.BytesIO(blob), map_location=lambda storage, loc: storage)
    with pytest.raises(NotImplementedError, match="legacy"):
        ca.save(ca.ones(1), io.BytesIO(), _use_new_zipfile_serialization=False)


def test_save_to_pathlib_missing_dir_raises_like_torch(tmp_path):
    target = pathlib.Path(tmp_path / "no_dir" / "x.pt")
    for lib in (torch, ca):
        with pytest.raises(RuntimeError, match="Parent directory .* does not exist"):
            lib.save(lib.ones(1), target)


def test_save_into_a_stream_at_an_offset_and_a_write_only_stream():
    arr = _data("float64", (2, 2))
    framed = io.BytesIO(b"header")
    framed.seek(0, io.SEEK_END)
    ca.save({"x": ca.tensor(arr)}, framed)

    class WriteOnly:  # a pipe-like sink: write() only, no seek/tell
        def __init__(self):
            self.parts = []

        def write(self, data):
            self.parts.append(bytes(data))
            return len(data)

    sink = WriteOnly()
    ca.save({"x": ca.tensor(arr)}, sink)
    for blob in (framed.getvalue()[len(b"header"):], b"".join(sink.parts)):
        np.testing.assert_array_equal(torch.load(io.BytesIO(blob))["x"].numpy(), arr)
        np.testing.assert_array_equal(to_np(ca.load(io.BytesIO(blob))["x"]), arr)


class _FreshTensorEachPickle:
    """An object whose __reduce__ makes a new tensor every time it is pickled."""

    def __reduce__(self):
        return (dict, ([("w", ca.arange(4.0).reshape(2, 2).t())],))


def test_tensor_made_while_pickling_is_saved():
    blob = _cagrad_bytes({"obj": _FreshTensorEachPickle(), "x": ca.ones(2)})
    back = torch.load(io.BytesIO(blob), weights_only=False)  # it names builtins.dict
    np.testing.assert_array_equal(back["obj"]["w"].numpy(), [[0.0, 2.0], [1.0, 3.0]])
    np.testing.assert_array_equal(back["x"].numpy(), [1.0, 1.0])


def test_big_endian_checkpoint_is_byteswapped_like_torch():
    arr = _data("float64", (3,))
    with zipfile.ZipFile(io.BytesIO(_torch_roundtrip_bytes(torch.tensor(arr)))) as src:
        big = io.BytesIO()
        with zipfile.ZipFile(big, "w") as dst:  # the records a big-endian torch would write
            for info in src.infolist():
                data = src.read(info)
                if info.filename.endswith("/byteorder"):
                    data = b"big"
                elif "/data/" in info.filename:
                    data = np.frombuffer(data, "<f8").astype(">f8").tobytes()
                dst.writestr(info.filename, data)
    for lib in (ca, torch):
        np.testing.assert_array_equal(to_np(lib.load(io.BytesIO(big.getvalue()))), arr)
