"""The data cache: freed tensor data kept by size for the next allocation of that size.

A training loop frees and re-allocates the same sizes every step; the cache spares those
allocations malloc and fresh pages. The least recently freed blocks go back to the system
once the cache holds more than its limit (512 MiB by default, or the environment variable
CAGRAD_CACHE_LIMIT_MB read at start-up; 0 turns caching off). Like
torch.cuda.empty_cache(), empty_cache() gives back what the cache holds; tensors still in
use keep their memory.
"""

from . import _C

__all__ = ["cache_info", "empty_cache", "set_cache_limit"]


def empty_cache():
    """Give every cached block back to the system."""
    _C.empty_cache()


def set_cache_limit(nbytes):
    """Most bytes the cache may hold; 0 turns caching off. Shrinks the cache now."""
    _C.set_cache_limit(nbytes)


def cache_info():
    """{'limit', 'cached_bytes', 'cached_blocks', 'hits', 'misses'}: hits and misses count
    the allocations of 1 KiB or more served from the cache and from the system."""
    return _C.cache_info()
