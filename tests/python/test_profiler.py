"""cagrad.profiler (record_function, profile, key_averages().table, schedule, chrome traces),
cagrad.autograd.profiler, and cagrad.multiprocessing (re-exports, spawn and its errors)."""

import json

import pytest
import torch

from helpers import ca

P = ca.profiler


def _work(x):
    return (x @ x).relu().sum()


def _profiled():
    x = ca.randn(16, 16, requires_grad=True)
    with P.profile(activities=[P.ProfilerActivity.CPU], record_shapes=True) as prof:
        with P.record_function("outer"):
            with P.record_function("forward"):
                y = _work(x)
            y.backward()
    return prof


def test_key_averages_count_ranges_and_library_ops():
    rows = {r.key: r for r in _profiled().key_averages()}
    for name in ("outer", "forward", "cagrad::matmul", "cagrad::relu", "cagrad::sum",
                 "cagrad::backward"):
        assert rows[name].count == 1, name
    for r in rows.values():
        assert 0 <= r.self_cpu_time_total <= r.cpu_time_total + 1e-9
    # self time: the range minus the ranges directly inside it
    outer, forward = rows["outer"], rows["forward"]
    inside = forward.cpu_time_total + rows["cagrad::backward"].cpu_time_total
    assert abs(outer.self_cpu_time_total - (outer.cpu_time_total - inside)) < 1e-6


def test_table_sorts_and_limits_rows():
    prof = _profiled()
    text = prof.key_averages().table(sort_by="cpu_time_total", row_limit=3)
    lines = [ln for ln in text.splitlines() if ln and not ln.startswith("-")]
    assert lines[0].startswith("Name") and "Self CPU time total" in lines[-1]
    body = lines[1:-1]
    assert len(body) == 3 and body[0].startswith("outer")
    with pytest.raises(AttributeError):
        prof.key_averages().table(sort_by="no_such_column")


def test_chrome_trace_is_valid_json(tmp_path):
    path = tmp_path / "trace.json"
    _profiled().export_chrome_trace(str(path))
    events = json.loads(path.read_text())["traceEvents"]
    names = {e["name"] for e in events}
    assert {"outer", "forward", "cagrad::matmul"} <= names
    assert all(e["ph"] == "X" and e["dur"] >= 0 for e in events)


def test_record_function_outside_a_profile_and_as_decorator():
    with P.record_function("nothing recorded"):
        _work(ca.ones(2, 2))

    @P.record_function("decorated")
    def step(x):
        return _work(x)

    with P.profile() as prof:
        step(ca.ones(2, 2))
        step(ca.ones(2, 2))
    rows = {r.key: r.count for r in prof.key_averages()}
    assert rows["decorated"] == 2 and "nothing recorded" not in rows


@pytest.mark.parametrize("kwargs", [
    dict(wait=1, warmup=1, active=2), dict(wait=0, warmup=1, active=1, repeat=2),
    dict(wait=2, warmup=1, active=3, repeat=1, skip_first=3),
    dict(wait=2, warmup=1, active=1, skip_first_wait=1),
])
def test_schedule_matches_torch(kwargs):
    ours, theirs = P.schedule(**kwargs), torch.profiler.schedule(**kwargs)
    assert [ours(s).name for s in range(20)] == [theirs(s).name for s in range(20)]


def test_schedule_records_active_steps_and_calls_on_trace_ready():
    traces = []
    sched = P.schedule(wait=1, warmup=1, active=2, repeat=2)
    with P.profile(schedule=sched, on_trace_ready=lambda p: traces.append(
            sorted(r.key for r in p.key_averages() if not r.key.startswith("cagrad::")))) as prof:
        for i in range(10):
            with P.record_function(f"step{i}"):
                _work(ca.ones(2, 2))
            prof.step()
    assert traces == [["step2", "step3"], ["step6", "step7"]]


def test_autograd_profiler_aliases():
    with ca.autograd.profiler.profile() as prof:
        with ca.autograd.profiler.record_function("block"):
            _work(ca.ones(3, 3))
    assert "block" in {e.name for e in prof.function_events}
    assert "block" in prof.table()
    with ca.autograd.profiler.profile(enabled=False) as off:
        _work(ca.ones(3, 3))
    assert len(off.events()) == 0


def test_cuda_activity_warns_that_only_the_cpu_is_recorded():
    with pytest.warns(UserWarning, match="CPU activity only"):
        P.profile(activities=[P.ProfilerActivity.CPU, P.ProfilerActivity.CUDA])
    assert P.supported_activities() == {P.ProfilerActivity.CPU}


# ------------------------------------------------------------------------------ multiprocessing
def _child(rank, queue, scale):
    queue.put((rank, ca.ones(3) * (rank + scale)))


def _failing_child(rank):
    if rank == 1:
        raise ValueError("child one failed")


def test_multiprocessing_reexports_python_multiprocessing():
    mp = ca.multiprocessing
    for name in ("Process", "Queue", "Pool", "get_context", "set_start_method",
                 "get_start_method", "cpu_count", "spawn", "start_processes"):
        assert hasattr(mp, name), name
    assert mp.get_sharing_strategy() in mp.get_all_sharing_strategies()


def test_spawn_runs_fn_with_the_rank_and_tensors_cross_processes():
    mp = ca.multiprocessing
    queue = mp.get_context("spawn").SimpleQueue()
    assert mp.spawn(_child, args=(queue, 10), nprocs=2) is None
    got = dict(queue.get() for _ in range(2))
    assert sorted(got) == [0, 1]
    assert got[1].tolist() == [11.0, 11.0, 11.0]


def test_spawn_raises_the_child_error():
    mp = ca.multiprocessing
    with pytest.raises(mp.ProcessRaisedException, match="child one failed") as info:
        mp.spawn(_failing_child, nprocs=2)
    assert info.value.error_index == 1


def test_start_processes_without_join_returns_a_context():
    mp = ca.multiprocessing
    ctx = mp.start_processes(_failing_child, nprocs=1, join=False, start_method="spawn")
    while not ctx.join():
        pass
    assert len(ctx.pids()) == 1
