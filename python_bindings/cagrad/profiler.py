"""cagrad.profiler: torch.profiler's API over a small, honest CPU profiler.

What it records, with wall-clock times in microseconds:
- every `record_function(name)` range (as "user_annotation" events), and
- every call from Python into the C library's ops (cagrad._C functions, as "cagrad::<name>"
  events, e.g. cagrad::matmul, cagrad::backward) made on the thread that entered the
  profile, found with sys.setprofile while a profile is recording.

What it does not record: the individual backward nodes (one cagrad::backward event covers
the whole backward pass, which runs in C), work on other threads (DataLoader workers, the
library's own threads), input shapes (record_shapes is accepted; events have empty
input_shapes), memory (profile_memory), stacks
(with_stack), FLOPs (with_flops) and any device other than the CPU. Times include the
profiler's own overhead per call.
"""

import enum
import json
import os
import sys
import threading
import time
import warnings
from collections import defaultdict


__all__ = ["ProfilerActivity", "ProfilerAction", "profile", "record_function", "schedule",
           "supported_activities", "tensorboard_trace_handler", "EventList", "FunctionEvent",
           "FunctionEventAvg"]

# library calls that are bookkeeping, not ops
_SKIP = frozenset({"set_grad_enabled", "is_grad_enabled", "compiled_autograd_depth",
                   "is_inference_mode_enabled"})


class ProfilerActivity(enum.Enum):
    CPU = 0
    XPU = 1
    MTIA = 2
    CUDA = 3
    HPU = 4
    PrivateUse1 = 5


class ProfilerAction(enum.Enum):
    NONE = 0
    WARMUP = 1
    RECORD = 2
    RECORD_AND_SAVE = 3


def supported_activities():
    return {ProfilerActivity.CPU}


def _now_us():
    return time.perf_counter_ns() / 1000.0


# ------------------------------------------------------------------------------ events
class FunctionEvent:
    """One recorded range: name, start and end (us), thread, input shapes, kind."""

    def __init__(self, name, start_us, end_us, thread, input_shapes=(), kind="cpu_op"):
        self.name = self.key = name
        self.time_range_start, self.time_range_end = start_us, end_us
        self.thread = thread
        self.input_shapes = list(input_shapes)
        self.kind = kind
        self.self_cpu_time_total = self.cpu_time_total = end_us - start_us
        self.device_type = ProfilerActivity.CPU
        self.count = 1

    @property
    def cpu_time(self):
        return self.cpu_time_total

    def __repr__(self):
        return (f"<FunctionEvent name={self.name!r} cpu_time_total="
                f"{self.cpu_time_total:.3f}us thread={self.thread}>")


class FunctionEventAvg:
    """The events of one key (name, and input shapes when grouped by them) summed."""

    def __init__(self, key, input_shapes=None):
        self.key, self.input_shapes = key, input_shapes
        self.count = 0
        self.cpu_time_total = self.self_cpu_time_total = 0.0
        self.cuda_time_total = self.self_cuda_time_total = 0.0  # cagrad runs on the CPU only
        self.device_time_total = self.self_device_time_total = 0.0

    def add(self, event):
        self.count += 1
        self.cpu_time_total += event.cpu_time_total
        self.self_cpu_time_total += event.self_cpu_time_total
        return self

    @property
    def cpu_time(self):
        return self.cpu_time_total / self.count if self.count else 0.0

    def __repr__(self):
        return (f"<FunctionEventAvg key={self.key!r} count={self.count} cpu_time_total="
                f"{self.cpu_time_total:.3f}us self_cpu_time_total="
                f"{self.self_cpu_time_total:.3f}us>")


_SORT_KEYS = {"cpu_time_total", "self_cpu_time_total", "cpu_time", "count", "cuda_time_total",
              "self_cuda_time_total", "device_time_total", "self_device_time_total"}


class EventList(list):
    """A list of events (or of averages) with key_averages() and table()."""

    def key_averages(self, group_by_input_shape=False, group_by_stack_n=0):
        groups = {}
        for e in self:
            shapes = str(e.input_shapes) if group_by_input_shape else None
            key = (e.key, shapes)
            if key not in groups:
                groups[key] = FunctionEventAvg(e.key, e.input_shapes if shapes else None)
            groups[key].add(e)
        return EventList(groups.values())

    @property
    def self_cpu_time_total(self):
        return sum(e.self_cpu_time_total for e in self)

    def table(self, sort_by=None, row_limit=100, max_src_column_width=75,
              max_name_column_width=55, max_shapes_column_width=80, header=None,
              top_level_events_only=False):
        """A text table like torch's: one row per entry, sorted by sort_by (descending)."""
        rows = list(self)
        if sort_by is not None:
            if sort_by not in _SORT_KEYS:
                raise AttributeError(f"'FunctionEventAvg' object has no attribute {sort_by!r}")
            rows.sort(key=lambda e: getattr(e, sort_by), reverse=True)
        if row_limit is not None and row_limit >= 0:
            rows = rows[:row_limit]
        return _format_table(rows, self.self_cpu_time_total, max_name_column_width, header)

    def export_chrome_trace(self, path):
        _write_chrome_trace(self, path)


def _format_time(us):
    if us >= 1e6:
        return f"{us / 1e6:.3f}s"
    if us >= 1e3:
        return f"{us / 1e3:.3f}ms"
    return f"{us:.3f}us"


def _format_table(rows, total_self, name_width, header):
    with_shapes = any(getattr(r, "input_shapes", None) for r in rows)
    cols = ["Name", "Self CPU %", "Self CPU", "CPU total %", "CPU total", "CPU time avg",
            "# of Calls"] + (["Input Shapes"] if with_shapes else [])
    widths = [max(len("Name"), min(name_width, max([len(r.key) for r in rows] + [4])))] + \
        [12] * 6 + ([40] if with_shapes else [])
    lines = []
    rule = "-" * (sum(widths) + 2 * (len(widths) - 1))
    if header:
        lines.append(header)
    lines += [rule, "  ".join(c.rjust(w) if i else c.ljust(w)
                              for i, (c, w) in enumerate(zip(cols, widths))), rule]
    base = total_self or 1.0
    for r in rows:
        cells = [r.key[:widths[0]], f"{100 * r.self_cpu_time_total / base:.2f}%",
                 _format_time(r.self_cpu_time_total), f"{100 * r.cpu_time_total / base:.2f}%",
                 _format_time(r.cpu_time_total), _format_time(r.cpu_time), str(r.count)]
        if with_shapes:
            cells.append(str(r.input_shapes or []))
        lines.append("  ".join(c.rjust(w) if i else c.ljust(w)
                               for i, (c, w) in enumerate(zip(cells, widths))))
    lines += [rule, f"Self CPU time total: {_format_time(total_self)}", ""]
    return "\n".join(lines)


def _write_chrome_trace(events, path):
    trace = {"traceEvents": [
        {"name": e.name, "ph": "X", "ts": e.time_range_start,
         "dur": e.time_range_end - e.time_range_start, "pid": os.getpid(), "tid": e.thread,
         "cat": e.kind, "args": {"Input Dims": e.input_shapes} if e.input_shapes else {}}
        for e in events], "displayTimeUnit": "ms"}
    with open(path, "w") as f:
        json.dump(trace, f)


def _self_times(events):
    """Each event's self time: its time minus that of the events directly inside it (same
    thread, nested ranges)."""
    by_thread = defaultdict(list)
    for e in events:
        by_thread[e.thread].append(e)
    for evs in by_thread.values():
        evs.sort(key=lambda e: (e.time_range_start, -e.time_range_end))
        stack = []
        for e in evs:
            while stack and stack[-1].time_range_end <= e.time_range_start:
                stack.pop()
            if stack and e.time_range_end <= stack[-1].time_range_end:
                stack[-1].self_cpu_time_total -= e.cpu_time_total
            stack.append(e)


# ------------------------------------------------------------------------------ recording
_active = []  # the profiles recording now (innermost last)


def _record(event):
    for p in _active:
        if p._recording:
            p._events.append(event)


class record_function:
    """A named range in the profile (a `with` block or a decorator); no cost beyond a
    clock read when no profile is recording."""

    def __init__(self, name, args=None):
        self.name, self.args = name, args
        self._start = None

    def __enter__(self):
        self._start = _now_us()
        return self

    def __exit__(self, *exc):
        if _active and self._start is not None:
            _record(FunctionEvent(self.name, self._start, _now_us(), threading.get_ident(),
                                  (), "user_annotation"))
        self._start = None
        return False

    def __call__(self, fn):
        def wrapped(*args, **kwargs):
            with record_function(self.name):
                return fn(*args, **kwargs)
        wrapped.__name__ = getattr(fn, "__name__", "wrapped")
        return wrapped


def schedule(*, wait, warmup, active, repeat=0, skip_first=0, skip_first_wait=0):
    """torch.profiler.schedule: step -> ProfilerAction, cycling wait, warmup, active steps
    (repeat cycles, 0: forever) after skip_first steps."""
    if wait < 0 or warmup < 0 or active <= 0 or repeat < 0 or skip_first < 0:
        raise AssertionError("Invalid profiler schedule arguments")
    if warmup == 0:
        warnings.warn("Profiler won't be using warmup, this can skew profiler results",
                      UserWarning, stacklevel=2)

    def action(step):
        if step < skip_first:
            return ProfilerAction.NONE
        step -= skip_first
        if skip_first_wait:  # the first cycle starts without its wait
            step += wait
        cycle = wait + warmup + active
        if repeat > 0 and step // cycle >= repeat:
            return ProfilerAction.NONE
        pos = step % cycle
        if pos < wait:
            return ProfilerAction.NONE
        if pos < wait + warmup:
            return ProfilerAction.WARMUP
        return ProfilerAction.RECORD if pos < cycle - 1 else ProfilerAction.RECORD_AND_SAVE
    return action


def tensorboard_trace_handler(dir_name, worker_name=None, use_gzip=False):
    """An on_trace_ready handler writing a chrome trace into dir_name (gzip not supported)."""
    if use_gzip:
        raise NotImplementedError("cagrad's tensorboard_trace_handler has no use_gzip (see "
                                  "docs/python-api.md)")

    def handler(prof):
        os.makedirs(dir_name, exist_ok=True)
        name = worker_name or f"{os.uname().nodename}_{os.getpid()}"
        prof.export_chrome_trace(os.path.join(
            dir_name, f"{name}.{time.time_ns() // 1000000}.pt.trace.json"))
    return handler


class profile:
    """torch.profiler.profile: records record_function ranges and the library's op calls
    (see the module's docstring for what it does not record) between start() and stop()
    (or in a `with` block), following schedule and step() when given."""

    def __init__(self, *, activities=None, schedule=None, on_trace_ready=None,
                 record_shapes=False, profile_memory=False, with_stack=False,
                 with_flops=False, with_modules=False, experimental_config=None,
                 execution_trace_observer=None, acc_events=False, use_cuda=None,
                 custom_trace_id_callback=None, post_processing_timeout_s=None):
        activities = set(activities) if activities is not None else supported_activities()
        if activities - supported_activities() or use_cuda:
            warnings.warn("cagrad's profiler records CPU activity only (see "
                          "docs/python-api.md)", UserWarning, stacklevel=2)
        self.activities = activities
        self.schedule = schedule
        self.on_trace_ready = on_trace_ready
        self.record_shapes = record_shapes
        self.step_num = 0
        self._events = []
        self._saved = EventList()
        self._recording = False
        self._thread = None
        self._open = {}

    # ------------------------------------------------------------- control
    def __enter__(self):
        self.start()
        return self

    def __exit__(self, *exc):
        self.stop()
        return False

    def start(self):
        _active.append(self)
        self._thread = threading.get_ident()
        self._apply(self._action())

    def stop(self):
        if self._recording:
            self._set_recording(False)
            self._finish_cycle(True)
        if self in _active:
            _active.remove(self)

    def step(self):
        """The next step of the schedule: ends a cycle after its last active step."""
        before = self._action()
        self.step_num += 1
        after = self._action()
        if before is ProfilerAction.RECORD_AND_SAVE:
            self._set_recording(False)
            self._finish_cycle(True)
        self._apply(after)

    def _action(self):
        return self.schedule(self.step_num) if self.schedule else ProfilerAction.RECORD

    def _apply(self, action):
        self._set_recording(action in (ProfilerAction.RECORD, ProfilerAction.RECORD_AND_SAVE))

    def _finish_cycle(self, save):
        if not save:
            return
        events = EventList(self._events)
        self._events = []
        _self_times(events)
        self._saved = events
        if self.on_trace_ready is not None:
            self.on_trace_ready(self)

    def _set_recording(self, on):
        if on == self._recording:
            return
        self._recording = on
        if on:
            self._previous_hook = sys.getprofile()
            sys.setprofile(self._hook)
        else:
            sys.setprofile(self._previous_hook)

    def _hook(self, frame, event, arg):
        # calls into the C library: one event per call, timed from call to return
        if event == "c_call":
            if getattr(arg, "__module__", None) == "cagrad._C" and arg.__name__ not in _SKIP:
                self._open[id(frame), arg.__name__] = _now_us()
        elif event in ("c_return", "c_exception"):
            start = self._open.pop((id(frame), getattr(arg, "__name__", None)), None)
            if start is not None:
                self._events.append(FunctionEvent("cagrad::" + arg.__name__, start, _now_us(),
                                                  self._thread))

    # ------------------------------------------------------------- results
    def events(self):
        if self._recording:  # still recording: what is there so far
            events = EventList(self._events)
            _self_times(events)
            return events
        return self._saved

    def key_averages(self, group_by_input_shape=False, group_by_stack_n=0):
        return self.events().key_averages(group_by_input_shape, group_by_stack_n)

    def export_chrome_trace(self, path):
        _write_chrome_trace(self.events(), path)

    def export_stacks(self, path, metric="self_cpu_time_total"):
        raise NotImplementedError("cagrad's profiler records no stacks (see "
                                  "docs/python-api.md)")
