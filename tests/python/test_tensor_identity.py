"""One Python object per tensor, as in PyTorch: a tensor handed out again (a leaf's
AccumulateGrad.variable, an op that returns its input, an in-place method) is the same
object, while ops that make a new tensor (detach, clone, views) give new objects;
compared with torch 2.13."""

from autograd_port_helpers import parity


def test_accumulate_grad_variable_is_the_leaf():
    def make(L):
        x = L.ones(3, requires_grad=True)
        p = L.nn.Parameter(L.ones(2))
        acc_x = (x * 2).grad_fn.next_functions[0][0]
        acc_p = (p * 2).grad_fn.next_functions[0][0]
        return acc_x.variable is x, acc_p.variable is p, type(acc_p.variable).__name__
    parity(make)


def test_ops_that_return_their_input_give_the_same_object():
    def make(L):
        x = L.ones(2, 3)
        return (x.contiguous() is x, x.to(x.dtype) is x, x.float() is x,
                x.requires_grad_() is x, x.detach() is x, x.clone() is x, x.view(6) is x,
                x[:] is x)
    parity(make)


def test_in_place_methods_return_self():
    def make(L):
        x = L.ones(2, 3)
        return x.add_(1) is x, x.mul_(2) is x, x.zero_() is x, x.clamp_(0, 1) is x
    parity(make)


def test_attributes_set_on_a_tensor_survive_a_round_trip():
    def make(L):
        x = L.ones(3, requires_grad=True)
        x.tag = "weights"
        return (x * 1).grad_fn.next_functions[0][0].variable.tag
    parity(make)
