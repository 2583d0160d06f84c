"""cagrad.explain(fn)(*args, **kwargs): how fn's forward splits into graphs, like
torch._dynamo.explain. fn runs eagerly, exactly once; ops and graph breaks are recorded
on the calling thread while it runs."""

import warnings

from ._graph_break import Recorder, pop_recorder, push_recorder


class ExplainOutput:
    """The result of explain(fn)(...).

    graph_count: forward graphs that recorded at least one op; graph_break_count: breaks
    hit while fn ran; op_count: ops run; break_reasons: BreakReason objects (.reason,
    .user_stack); ops_per_graph: op names per graph; out: what fn returned.
    """

    def __init__(self, recorder, out):
        self.ops_per_graph = [ops for _, ops in sorted(recorder.ops.items())]
        self.graph_count = len(self.ops_per_graph)
        self.op_count = sum(len(ops) for ops in self.ops_per_graph)
        self.break_reasons = recorder.breaks
        self.graph_break_count = len(recorder.breaks)
        self.out = out

    def __str__(self):
        lines = [f"Graph Count: {self.graph_count}",
                 f"Graph Break Count: {self.graph_break_count}",
                 f"Op Count: {self.op_count}",
                 "Break Reasons:"]
        for i, br in enumerate(self.break_reasons, 1):
            lines += [f"  Break Reason {i}:", f"    Reason: {br.reason}", "    User Stack:"]
            lines += [f"      {frame}" for frame in br.user_stack]
        lines.append("Ops per Graph:")
        for i, ops in enumerate(self.ops_per_graph, 1):
            lines.append(f"  Ops {i}:")
            lines += [f"    {op}" for op in ops]
        return "\n".join(lines) + "\n"

    def __repr__(self):
        return (f"ExplainOutput(graph_count={self.graph_count}, "
                f"graph_break_count={self.graph_break_count}, op_count={self.op_count})")


def explain(fn, *extra_args, **extra_kwargs):
    """explain(fn)(*args, **kwargs) runs fn(*args, **kwargs) and returns an ExplainOutput."""
    if not callable(fn):
        raise TypeError(f"explain() takes a callable, not {type(fn).__name__}")

    def run(*args, **kwargs):
        rec = Recorder(run.__code__)
        push_recorder(rec)
        try:
            out = fn(*args, **kwargs)
        finally:
            pop_recorder(rec)
        return ExplainOutput(rec, out)

    if extra_args or extra_kwargs:  # the old torch form explain(fn, *args)
        warnings.warn("explain(fn, *args) is deprecated, as in torch; use explain(fn)(*args)",
                      FutureWarning, stacklevel=2)
        return run(*extra_args, **extra_kwargs)
    return run
