"""cagrad.distributed: importable so that code which checks for distributed training runs;
cagrad has no process groups or collective communication yet, so is_available() is False,
is_initialized() False, and init_process_group raises, naming what is missing."""

_NO_GROUP = ("Default process group has not been initialized, please make sure to call "
             "init_process_group.")


def is_available():
    return False


def is_initialized():
    return False


def init_process_group(*args, **kwargs):
    raise RuntimeError("cagrad.distributed.init_process_group: cagrad has no distributed "
                       "support (no process groups, backends or collectives such as "
                       "all_reduce); train in one process. See docs/python-api.md")


def get_rank(group=None):
    raise ValueError(_NO_GROUP)  # as PyTorch without a process group


def get_world_size(group=None):
    raise ValueError(_NO_GROUP)
