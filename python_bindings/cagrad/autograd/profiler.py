"""cagrad.autograd.profiler: torch.autograd.profiler's record_function and profile, as the
same recorder as cagrad.profiler (see that module for what it records)."""

from ..profiler import EventList, FunctionEvent, FunctionEventAvg, record_function
from ..profiler import profile as _profile

__all__ = ["profile", "record_function", "EventList", "FunctionEvent", "FunctionEventAvg"]


class profile(_profile):
    """torch.autograd.profiler.profile(enabled=True, *, use_cuda=False, record_shapes=False,
    ...): the legacy form; enabled=False records nothing."""

    def __init__(self, enabled=True, *, use_cuda=False, use_device=None, record_shapes=False,
                 with_flops=False, profile_memory=False, with_stack=False,
                 with_modules=False, use_kineto=False, use_cpu=True,
                 experimental_config=None, acc_events=False, custom_trace_id_callback=None):
        super().__init__(record_shapes=record_shapes, use_cuda=use_cuda or None)
        self.enabled = enabled

    def start(self):
        if self.enabled:
            super().start()

    def table(self, *args, **kwargs):
        return self.events().table(*args, **kwargs)

    @property
    def function_events(self):
        return self.events()
