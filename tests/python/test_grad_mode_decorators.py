"""Grad-mode objects as decorators of generator functions and of classes, compared with
torch: a decorated generator runs each of its steps in the mode and the caller's code
between steps in the caller's mode; a decorated class warns (FutureWarning) and is built
in the mode."""

import warnings

import pytest

from autograd_port_helpers import parity, warning_categories

MODES = ["no_grad", "enable_grad", "inference_mode", "set_grad_enabled_false"]


def _mode(L, name):
    if name == "set_grad_enabled_false":
        return L.set_grad_enabled(False)
    return getattr(L, name)()


@pytest.mark.parametrize("name", MODES)
def test_a_generator_runs_each_step_in_the_mode(name):
    def make(L):
        outer = L.is_grad_enabled()

        @_mode(L, name)
        def gen():
            seen = []
            for _ in range(3):
                seen.append(L.is_grad_enabled())
                yield seen[-1]
            return seen

        between = []
        results = []
        for v in gen():
            results.append(v)
            between.append(L.is_grad_enabled())  # the caller's mode between steps
        return outer, results, between, L.is_grad_enabled()
    parity(make)


def test_the_caller_keeps_its_mode_between_steps_when_it_differs():
    def make(L):
        @L.enable_grad()
        def gen():
            yield L.is_grad_enabled()
            yield L.is_grad_enabled()

        with L.no_grad():
            out = []
            for v in gen():
                out.append((v, L.is_grad_enabled()))
        return out
    parity(make)


def test_send_and_the_return_value_pass_through():
    def make(L):
        @L.no_grad()
        def gen():
            total = 0
            while True:
                got = yield (total, L.is_grad_enabled())
                if got is None:
                    return ("done", total)
                total += got

        g = gen()
        first = next(g)
        second = g.send(2)
        third = g.send(5)
        try:
            g.send(None)
            ret = None
        except StopIteration as stop:
            ret = stop.value
        return first, second, third, ret
    parity(make)


def test_throw_reaches_the_generator_in_the_mode():
    def make(L):
        @L.no_grad()
        def gen():
            try:
                yield 1
            except ValueError:
                yield ("caught", L.is_grad_enabled())

        g = gen()
        next(g)
        return g.throw(ValueError("x")), L.is_grad_enabled()
    parity(make)


def test_close_runs_the_generators_cleanup_in_the_mode():
    def make(L):
        seen = []

        @L.no_grad()
        def gen():
            try:
                yield 1
                yield 2
            finally:
                seen.append(L.is_grad_enabled())

        g = gen()
        next(g)
        g.close()
        return seen, L.is_grad_enabled()
    parity(make)


def test_a_tensor_made_inside_a_decorated_generator_has_no_grad():
    def make(L):
        w = L.ones(3, requires_grad=True)

        @L.no_grad()
        def gen():
            yield (w * 2).requires_grad

        outside = (w * 2).requires_grad
        return list(gen()), outside
    parity(make)


@pytest.mark.parametrize("name", ["no_grad", "enable_grad", "inference_mode"])
def test_decorating_a_class_warns_and_builds_it_in_the_mode(name):
    def make(L):
        class Foo:
            def __init__(self):
                self.mode = L.is_grad_enabled()

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            Built = getattr(L, name)()(Foo)
            with L.set_grad_enabled(name == "no_grad"):
                return Built().mode
    parity(make)
    assert "FutureWarning" in warning_categories(lambda: getattr(__import__("cagrad"),
                                                                 name)()(type("C", (), {})))


def test_class_warning_matches_torch():
    def make(L):
        def decorate():
            @L.no_grad()
            class Foo:
                pass
        return warning_categories(decorate)
    parity(make)
