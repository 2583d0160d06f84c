"""Graph breaks: cagrad.graph_break() and the implicit breaks of item(), bool(), ...

A break closes the current forward graph in the C core (_C.graph_break). While explain()
runs on this thread, each break is also recorded with its reason and the user's stack, and
every op is counted through the C op observer.
"""

import os
import sys
import threading
from collections import namedtuple

from . import _C

# Frames whose file lies in this directory belong to cagrad and are left out of user stacks.
# co_filename and __file__ come from the same import, so no path normalisation is needed.
_PACKAGE_DIR = os.path.dirname(__file__) + os.sep

Frame = namedtuple("Frame", ["filename", "lineno", "name"])
Frame.__str__ = lambda f: f'File "{f.filename}", line {f.lineno}, in {f.name}'


class BreakReason:
    """One graph break seen by explain(): why it happened and where in the user's code."""

    __slots__ = ("reason", "user_stack")

    def __init__(self, reason, user_stack):
        self.reason = reason
        self.user_stack = user_stack  # list of Frame, outermost first, the break site last

    def __repr__(self):
        where = f" at {self.user_stack[-1]}" if self.user_stack else ""
        return f"BreakReason({self.reason!r}{where})"


class Recorder:
    """What one explain() call collects: ops per forward graph id, and the breaks."""

    def __init__(self, stop_code):
        self.stop_code = stop_code  # code object of the explain frame: user stacks end there
        self.ops = {}  # forward graph id -> [op name, ...]
        self.breaks = []


_local = threading.local()


def _recorders():
    recs = getattr(_local, "recorders", None)
    if recs is None:
        recs = _local.recorders = []
    return recs


def _observe(op, graph):
    for rec in _local.recorders:
        rec.ops.setdefault(graph, []).append(op)


def push_recorder(rec):
    recs = _recorders()
    if not recs:
        _C.set_op_observer(_observe)
    recs.append(rec)


def pop_recorder(rec):
    recs = _local.recorders
    recs.remove(rec)
    if not recs:
        _C.set_op_observer(None)


def _user_stack(stop_code):
    """The user's frames (outside cagrad) from the explain() call down to the caller."""
    frames = []
    f = sys._getframe(2)  # skip _user_stack and break_graph
    while f is not None and f.f_code is not stop_code:
        filename = f.f_code.co_filename
        if not filename.startswith(_PACKAGE_DIR):
            frames.append(Frame(filename, f.f_lineno, f.f_code.co_name))
        f = f.f_back
    frames.reverse()
    return frames


def break_graph(reason):
    """Close the current forward graph; explain() calls on this thread record the break."""
    _C.graph_break(reason)
    recs = getattr(_local, "recorders", None)
    if recs:
        for rec in recs:
            rec.breaks.append(BreakReason(reason, _user_stack(rec.stop_code)))


def graph_break():
    """End the current forward graph here, like torch._dynamo.graph_break(). Inside a
    custom backward that compiled autograd records, the backward runs as a call-out."""
    if _C.custom_tracing():
        _C.custom_refuse_tracing("it calls graph_break()")
    break_graph("explicit graph_break()")
