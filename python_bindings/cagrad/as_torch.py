"""Run an existing PyTorch program on cagrad, unchanged: `import torch` gets cagrad.

    python -m cagrad.as_torch train.py --its --own --arguments
    python -m cagrad.as_torch -m some.module --args
    python -m cagrad.as_torch --compiled train.py ...   # every backward compiled

or, from Python, before the program's first `import torch`:

    import cagrad.as_torch
    cagrad.as_torch.install()

`install()` puts cagrad in `sys.modules` under the name `torch`, and a finder on
`sys.meta_path` answers every `import torch.<x>.<y>` with `cagrad.<x>.<y>`, so submodules
that exist in cagrad (`torch.nn.functional`, `torch.utils.data`, `torch.optim.lr_scheduler`,
...) import under their torch names, and one that does not fails with an ImportError that
names it and points to docs/python-api.md. A real torch imported before `install()` is
left where it is: installing then raises, since the program would mix the two libraries.

`import cagrad` registers the finder too (`register_finder()`), and it answers only while
`sys.modules["torch"]` is cagrad: so a program that makes the alias itself
(`sys.modules["torch"] = cagrad`) gets cagrad's own submodules for `import torch.nn`,
rather than second copies of them (whose dtypes and classes would not be cagrad's).
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import os
import runpy
import sys

_DOCS = "docs/python-api.md"


class _TorchAsCagrad(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds `torch.<path>` as `cagrad.<path>` and hands back that very module object."""

    def find_spec(self, fullname, path=None, target=None):
        if not fullname.startswith("torch.") or not _torch_is_cagrad():
            return None
        target_name = "cagrad." + fullname[len("torch."):]
        try:
            found = importlib.util.find_spec(target_name)
        except ModuleNotFoundError:
            found = None
        if found is None:
            raise ModuleNotFoundError(
                f"No module named '{fullname}': cagrad, running as torch, has no "
                f"'{target_name}'. See {_DOCS} for what cagrad supports.", name=fullname)
        return importlib.util.spec_from_loader(fullname, self)

    def create_module(self, spec):
        return importlib.import_module("cagrad." + spec.name[len("torch."):])

    def exec_module(self, module):
        pass  # the cagrad module is already imported and run


def _torch_is_cagrad():
    have = sys.modules.get("torch")
    return have is not None and have is sys.modules.get("cagrad")


_finder = _TorchAsCagrad()


def register_finder():
    """Put the finder on sys.meta_path (idempotent); it stays silent unless `torch` is
    cagrad in sys.modules."""
    if _finder not in sys.meta_path:
        sys.meta_path.insert(0, _finder)


def install():
    """Make `import torch` (and `import torch.<sub>`) give cagrad. Idempotent."""
    import cagrad

    have = sys.modules.get("torch")
    if have is not None and have is not cagrad:
        raise RuntimeError("cagrad.as_torch.install(): the real torch is already imported in "
                           "this process; install before the program's first `import torch`")
    sys.modules["torch"] = cagrad
    for name, mod in list(sys.modules.items()):  # cagrad submodules imported so far
        if name.startswith("cagrad.") and mod is not None:
            sys.modules.setdefault("torch." + name[len("cagrad."):], mod)
    register_finder()


def _usage():
    sys.stderr.write("usage: python -m cagrad.as_torch [--compiled] SCRIPT.py [ARGS...]\n"
                     "       python -m cagrad.as_torch [--compiled] -m MODULE [ARGS...]\n"
                     "--compiled runs every backward of the program under\n"
                     "cagrad.compiled_autograd.enable()\n")
    return 2


def main(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    compiled = bool(argv) and argv[0] == "--compiled"
    if compiled:
        argv = argv[1:]
    if not argv or argv[0] in ("-h", "--help"):
        return _usage()
    install()
    if compiled:
        import cagrad

        # entered for the rest of the process: the program's every backward is compiled
        cagrad.compiled_autograd.enable().__enter__()
    if argv[0] == "-m":
        if len(argv) < 2:
            return _usage()
        sys.argv = argv[1:]
        runpy.run_module(argv[1], run_name="__main__", alter_sys=True)
        return 0
    script = argv[0]
    sys.argv = argv
    sys.path.insert(0, os.path.dirname(os.path.abspath(script)))
    runpy.run_path(script, run_name="__main__")
    return 0


if __name__ == "__main__":
    sys.exit(main())
