"""torch.backends.openmp: cagrad runs its threads in its own pool, not OpenMP
(cagrad.set_num_threads sets their number)."""


def is_available():
    return False
