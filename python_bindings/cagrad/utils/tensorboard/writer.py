"""SummaryWriter: torch.utils.tensorboard's writer, writing TensorBoard event files itself.

torch's writer needs the `tensorboard` package (for its protobuf classes); cagrad encodes
the few messages it writes by hand (_records.py), so nothing beyond numpy is needed. The
files are the same format (TFRecord framing, Event protobufs) and TensorBoard reads them.
Supported: add_scalar, add_scalars, add_histogram, add_text, add_hparams, flush, close,
the context manager and get_logdir. The rest (images, graphs, embeddings, ...) raises
NotImplementedError naming the method (see docs/python-api.md).
"""

import itertools
import os
import socket
import time
import weakref
from datetime import datetime

import numpy as np

from . import _hparams
from . import _records as rec

__all__ = ["FileWriter", "SummaryWriter"]

_DOCS = "docs/python-api.md"
_FILE_IDS = itertools.count()  # tensorboard numbers the event files of a process


class _EventFile:
    """An open event file and the framed records not yet written to it."""

    def __init__(self, path):
        self.file = open(path, "wb")  # noqa: SIM115 - open until close()
        self.pending = []

    def flush(self):
        if self.file is not None:
            self.file.write(b"".join(self.pending))
            self.file.flush()
            self.pending = []

    def close(self):
        if self.file is not None:
            self.flush()
            self.file.close()
            self.file = None


class FileWriter:
    """Appends Events to one event file in log_dir; flushes after max_queue pending
    events, when an event comes flush_secs after the last flush, on flush() / close(),
    and when the writer is garbage-collected or the interpreter exits (torch flushes
    from a background thread instead)."""

    def __init__(self, log_dir, max_queue=10, flush_secs=120, filename_suffix=""):
        log_dir = str(log_dir)
        os.makedirs(log_dir, exist_ok=True)
        self._log_dir = log_dir
        self._max_queue, self._flush_secs = max_queue, flush_secs
        name = "events.out.tfevents.%010d.%s.%s.%s%s" % (
            time.time(), socket.gethostname(), os.getpid(), next(_FILE_IDS), filename_suffix)
        self._path = os.path.join(log_dir, name)
        self._out = _EventFile(self._path)
        # a program that never calls close() still gets its last events written
        weakref.finalize(self, self._out.close)
        self._last_flush = time.time()
        self.add_event(rec.event(time.time(), file_version="brain.Event:2"))
        self.flush()

    def get_logdir(self):
        return self._log_dir

    def add_event(self, event_bytes):
        if self._out.file is None:
            raise RuntimeError(f"FileWriter for {self._log_dir!r} is closed")
        self._out.pending.append(rec.frame_record(event_bytes))
        if (len(self._out.pending) >= self._max_queue
                or time.time() - self._last_flush >= self._flush_secs):
            self.flush()

    def add_summary(self, summary_bytes, global_step=None, walltime=None):
        walltime = time.time() if walltime is None else walltime
        self.add_event(rec.event(walltime, global_step, summary=summary_bytes))

    def flush(self):
        self._out.flush()
        self._last_flush = time.time()

    def close(self):
        self._out.close()


def _make_np(value):
    """A numpy array of a cagrad / torch tensor, numpy array or number (torch's make_np)."""
    if isinstance(value, np.ndarray):
        return value
    if isinstance(value, (int, float, np.number, bool)):
        return np.array([value])
    if hasattr(value, "detach") and hasattr(value, "numpy"):
        return np.asarray(value.detach().numpy())
    raise NotImplementedError(
        f"Got {type(value)}, but numpy array or torch tensor are expected.")


def _scalar_summary(tag, value):
    array = _make_np(value).squeeze()
    if array.ndim != 0:
        raise AssertionError(f"Tensor should contain one element (0 dimensions). Was given "
                             f"size: {array.size} and {array.ndim} dimensions.")
    return rec.summary_value(tag, simple_value=float(array))


def default_bins():
    """TensorBoard's histogram bucket edges: +-1e-12 growing by 10% to 1e20, and 0."""
    edges, v = [], 1e-12
    while v < 1e20:
        edges.append(v)
        v *= 1.1
    return [-e for e in reversed(edges)] + [0] + edges


def _subsample(counts, limits, max_bins):
    # merge runs of `step` neighbouring buckets (zero-padding the last run), as torch does
    step = len(counts) // max_bins
    if len(counts) % step:
        counts = np.pad(counts, (0, step - len(counts) % step))
    counts = counts.reshape(-1, step).sum(axis=-1)
    limits = np.concatenate([limits[:-1:step][:counts.size], limits[-1:]])
    return counts, limits


def histogram_summary(tag, values, bins, max_bins=None):
    values = _make_np(values).astype(float).reshape(-1)
    if values.size == 0:
        raise ValueError("The input has no element.")
    counts, edges = np.histogram(values, bins=bins)
    if max_bins is not None and len(counts) > max_bins:
        counts, edges = _subsample(counts, edges, max_bins)
    nonzero = np.flatnonzero(counts)
    if nonzero.size == 0:
        raise ValueError("The histogram is empty, please file a bug report.")
    first, last = int(nonzero[0]), int(nonzero[-1])
    # TensorBoard buckets are (previous limit, limit]: keep the buckets from the first to
    # the last non-empty one, plus the empty bucket just left of them, by right edges
    left = [counts[first - 1]] if first > 0 else [0]
    kept = np.concatenate([left, counts[first:last + 1]])
    limits = edges[first:last + 2]
    histo = rec.histogram_proto(values.min(), values.max(), values.size, values.sum(),
                                values.dot(values), limits, kept)
    return rec.summary_value(tag, histo=histo)


def _text_summary(tag, text):
    return rec.summary_value(tag + "/text_summary", tensor=rec.string_tensor(text),
                             metadata=rec.plugin_metadata("text"))


def _not_supported(name):
    def method(self, *args, **kwargs):
        raise NotImplementedError(
            f"SummaryWriter.{name} is not supported by cagrad: its writer records scalars, "
            f"histograms, text and hparams only (see {_DOCS}, Everyday names (wave 3))")
    method.__name__ = name
    return method


class SummaryWriter:
    """Writes scalars, histograms and text to TensorBoard event files in log_dir
    (default runs/<Mon DD_HH-MM-SS>_<host><comment>), as torch.utils.tensorboard."""

    def __init__(self, log_dir=None, comment="", purge_step=None, max_queue=10,
                 flush_secs=120, filename_suffix=""):
        if not log_dir:
            now = datetime.now().strftime("%b%d_%H-%M-%S")
            log_dir = os.path.join("runs", now + "_" + socket.gethostname() + comment)
        self.log_dir = log_dir
        self.purge_step = purge_step
        self.max_queue, self.flush_secs = max_queue, flush_secs
        self.filename_suffix = filename_suffix
        self.file_writer = self.all_writers = None
        self._get_file_writer()
        self.default_bins = default_bins()

    def _get_file_writer(self):
        # (re)opened lazily: after close() the next add_* starts a new event file
        if self.all_writers is None or self.file_writer is None:
            self.file_writer = FileWriter(self.log_dir, self.max_queue, self.flush_secs,
                                          self.filename_suffix)
            self.all_writers = {self.file_writer.get_logdir(): self.file_writer}
            if self.purge_step is not None:
                # TensorBoard drops the events at or after this step from earlier runs
                step, now = self.purge_step, time.time()
                self.file_writer.add_event(rec.event(now, step, file_version="brain.Event:2"))
                self.file_writer.add_event(rec.event(now, step, session_start=True))
                self.purge_step = None
        return self.file_writer

    def get_logdir(self):
        return self.log_dir

    def add_scalar(self, tag, scalar_value, global_step=None, walltime=None,
                   new_style=False, double_precision=False):
        if new_style or double_precision:
            raise NotImplementedError(
                "SummaryWriter.add_scalar(new_style=True / double_precision=True) is not "
                f"supported by cagrad: it writes simple_value scalars (see {_DOCS})")
        self._get_file_writer().add_summary(_scalar_summary(tag, scalar_value),
                                            global_step, walltime)

    def add_scalars(self, main_tag, tag_scalar_dict, global_step=None, walltime=None):
        # one sub-run per tag, in log_dir/<main_tag with / as _>_<tag>, as torch writes them
        walltime = time.time() if walltime is None else walltime
        base = self._get_file_writer().get_logdir()
        for tag, value in tag_scalar_dict.items():
            run = base + "/" + main_tag.replace("/", "_") + "_" + tag
            writer = self.all_writers.get(run)
            if writer is None:
                writer = FileWriter(run, self.max_queue, self.flush_secs,
                                    self.filename_suffix)
                self.all_writers[run] = writer
            writer.add_summary(_scalar_summary(main_tag, value), global_step, walltime)

    def add_histogram(self, tag, values, global_step=None, bins="tensorflow", walltime=None,
                      max_bins=None):
        if isinstance(bins, str) and bins == "tensorflow":
            bins = self.default_bins
        self._get_file_writer().add_summary(histogram_summary(tag, values, bins, max_bins),
                                            global_step, walltime)

    def add_histogram_raw(self, tag, min, max, num, sum, sum_squares,  # noqa: A002
                          bucket_limits, bucket_counts, global_step=None, walltime=None):
        if len(bucket_limits) != len(bucket_counts):
            raise ValueError("len(bucket_limits) != len(bucket_counts), see the document.")
        histo = rec.histogram_proto(min, max, num, sum, sum_squares, bucket_limits,
                                    bucket_counts)
        self._get_file_writer().add_summary(rec.summary_value(tag, histo=histo),
                                            global_step, walltime)

    def add_text(self, tag, text_string, global_step=None, walltime=None):
        self._get_file_writer().add_summary(_text_summary(tag, text_string), global_step,
                                            walltime)

    def add_hparams(self, hparam_dict, metric_dict, hparam_domain_discrete=None,
                    run_name=None, global_step=None):
        """Hyperparameters and their metrics for TensorBoard's HParams tab, written (with
        the metrics as scalars) to the sub-run log_dir/run_name (default: the time)."""
        if type(hparam_dict) is not dict or type(metric_dict) is not dict:
            raise TypeError("hparam_dict and metric_dict should be dictionary.")
        summaries = _hparams.hparams(hparam_dict, metric_dict, hparam_domain_discrete)
        run_name = run_name or str(time.time())
        log_dir = os.path.join(self._get_file_writer().get_logdir(), run_name)
        with SummaryWriter(log_dir=log_dir) as writer:
            for summary in summaries:
                writer.file_writer.add_summary(summary, global_step)
            for tag, value in metric_dict.items():
                writer.add_scalar(tag, value, global_step)

    add_image = _not_supported("add_image")
    add_images = _not_supported("add_images")
    add_image_with_boxes = _not_supported("add_image_with_boxes")
    add_figure = _not_supported("add_figure")
    add_video = _not_supported("add_video")
    add_audio = _not_supported("add_audio")
    add_graph = _not_supported("add_graph")
    add_embedding = _not_supported("add_embedding")
    add_pr_curve = _not_supported("add_pr_curve")
    add_pr_curve_raw = _not_supported("add_pr_curve_raw")
    add_custom_scalars = _not_supported("add_custom_scalars")
    add_custom_scalars_multilinechart = _not_supported("add_custom_scalars_multilinechart")
    add_custom_scalars_marginchart = _not_supported("add_custom_scalars_marginchart")
    add_mesh = _not_supported("add_mesh")
    add_tensor = _not_supported("add_tensor")

    def flush(self):
        if self.all_writers is None:
            return
        for writer in self.all_writers.values():
            writer.flush()

    def close(self):
        if self.all_writers is None:
            return  # a second close is a no-op, as in torch
        for writer in self.all_writers.values():
            writer.close()
        self.file_writer = self.all_writers = None

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc_val, exc_tb):
        self.close()
