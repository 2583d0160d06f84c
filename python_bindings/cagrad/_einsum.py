"""cagrad.einsum: Einstein summation built from permute, reshape, expand, sum and matmul.

Every step is a recorded differentiable op, so autograd (eager and compiled) handles
einsum with no kernel of its own. The plan, per call:

1. parse the equation into one label list per operand (ellipsis dims get private labels)
   and the output labels (implicit: the labels seen once, sorted, after the ellipsis);
2. per operand, take diagonals of repeated labels and sum out labels no one else needs;
3. fold the operands left to right: each pair becomes one batched matmul over
   [shared-and-kept, left-only, contracted] x [shared-and-kept, contracted, right-only];
4. sum out what remains and permute to the output order.
"""

import string

from . import _C
from ._functions import matmul

__all__ = ["einsum"]

_LETTERS = string.ascii_uppercase + string.ascii_lowercase  # the labels torch accepts


def _error(text):
    return RuntimeError(f"einsum(): {text}")


def _split_args(equation, operands):
    """(equation, operands) from einsum's three call forms: (eq, *ops), (eq, [ops]) and the
    sublist form (op, [labels], op, [labels], ..., [out labels])."""
    if isinstance(equation, _C.TensorBase):
        return _from_sublists((equation,) + tuple(operands))
    if not isinstance(equation, str):
        raise TypeError(f"einsum(): argument 'equation' must be str, not "
                        f"{type(equation).__name__}")
    if len(operands) == 1 and isinstance(operands[0], (list, tuple)):
        operands = tuple(operands[0])
    for op in operands:
        if not isinstance(op, _C.TensorBase):
            raise TypeError(f"einsum(): operands must be Tensors, not {type(op).__name__}")
    return equation, operands


def _sublist_labels(sublist):
    out = []
    for item in sublist:
        if item is Ellipsis:
            out.append("...")
        elif isinstance(item, int) and 0 <= item < len(_LETTERS):
            out.append(_LETTERS[item])
        else:
            raise ValueError(f"einsum(): expected subscript to be within the range [0, 52), "
                             f"but got {item}")
    return "".join(out)


def _from_sublists(args):
    pairs = len(args) // 2
    operands = tuple(args[2 * i] for i in range(pairs))
    inputs = [_sublist_labels(args[2 * i + 1]) for i in range(pairs)]
    equation = ",".join(inputs)
    if len(args) % 2:
        equation += "->" + _sublist_labels(args[-1])
    return equation, operands


def _parse_term(term, ndim, ell_labels, where):
    """The label list of one operand's subscripts, its ellipsis expanded to ell_labels'
    trailing entries (one per dim the ellipsis covers)."""
    term = term.replace(" ", "")
    if term.count("...") > 1 or "." in term.replace("...", ""):
        raise _error(f"found '.' for {where} that is not part of any ellipsis")
    for ch in term.replace("...", ""):
        if ch not in _LETTERS:
            raise _error(f"invalid subscript given at index {term.index(ch)} in the equation "
                         f"string, subscripts must be in [a-zA-Z]")
    if "..." not in term:
        if len(term) != ndim:
            raise _error(f"the number of subscripts in the equation ({len(term)}) does not "
                         f"match the number of dimensions ({ndim}) for {where} and no ellipsis "
                         f"was given")
        return list(term)
    head, tail = term.split("...")
    covered = ndim - len(head) - len(tail)
    if covered < 0:
        raise _error(f"the number of subscripts in the equation ({len(head) + len(tail)}) is "
                     f"more than the number of dimensions ({ndim}) for {where}")
    return list(head) + ell_labels[len(ell_labels) - covered:] + list(tail)


def _parse(equation, operands):
    """([labels of each operand], output labels); ellipsis dims are labelled '0', '1', ..."""
    lhs, arrow, rhs = equation.partition("->")
    terms = lhs.split(",")
    if len(terms) > len(operands):
        raise _error("fewer operands were provided than specified in the equation")
    if len(terms) < len(operands):
        raise _error("more operands were provided than specified in the equation")
    ell_dims = max((op.ndim - len(t.replace("...", "").replace(" ", ""))
                    for t, op in zip(terms, operands) if "..." in t), default=0)
    ell_labels = [str(i) for i in range(ell_dims)]
    inputs = [_parse_term(t, op.ndim, ell_labels, f"operand {i}")
              for i, (t, op) in enumerate(zip(terms, operands))]
    if arrow:
        output = _parse_output(rhs, ell_labels, inputs)
    else:
        counts = {}
        for labels in inputs:
            for label in labels:
                counts[label] = counts.get(label, 0) + 1
        output = ell_labels + sorted(lb for lb, n in counts.items()
                                     if n == 1 and not lb.isdigit())
    return inputs, output


def _parse_output(rhs, ell_labels, inputs):
    rhs = rhs.replace(" ", "")
    seen = {label for labels in inputs for label in labels}
    output = []
    ndim = len(rhs.replace("...", "")) + (len(ell_labels) if "..." in rhs else 0)
    for label in _parse_term(rhs, ndim, ell_labels, "the output"):
        if label in output:
            raise _error(f"output subscript {label} appears more than once in the output")
        if label not in seen and not label.isdigit():
            raise _error(f"output subscript {label} does not appear in the equation for any "
                         f"input operand")
        output.append(label)
    return output


def _diagonal(t, labels):
    """Take the diagonal of each label repeated within one operand (e.g. 'ii' -> 'i')."""
    while len(set(labels)) != len(labels):
        label = next(lb for lb in labels if labels.count(lb) > 1)
        first = labels.index(label)
        second = labels.index(label, first + 1)
        rest = [i for i in range(t.ndim) if i not in (first, second)]
        n = t.shape[first]
        # with the two dims last and contiguous, the diagonal is every (n+1)-th entry
        flat = t.permute(*rest, first, second).reshape(*[t.shape[i] for i in rest], n * n)
        t = flat[..., ::n + 1]
        labels = [labels[i] for i in rest] + [label]
    return t, labels


def _sum_out(t, labels, keep):
    """Sum away the dims whose labels are not in keep."""
    drop = [i for i, lb in enumerate(labels) if lb not in keep]
    if not drop:
        return t, labels
    return t.sum(tuple(drop)), [lb for lb in labels if lb in keep]


def _check_repeated(t, labels, index):
    """A label repeated within one operand (a diagonal) needs equal sizes."""
    first_size = {}
    for label, n in zip(labels, t.shape):
        if label in first_size and first_size[label] != n:
            raise _error(f"subscript {label} is repeated for operand {index} but the sizes "
                         f"don't match, {n} != {first_size[label]}")
        first_size.setdefault(label, n)


def _sizes(operands, inputs):
    """label -> size, checking that sizes agree or broadcast (size 1)."""
    sizes = {}
    for index, (t, labels) in enumerate(zip(operands, inputs)):
        _check_repeated(t, labels, index)
        for label, n in zip(labels, t.shape):
            old = sizes.get(label, 1)
            if old != 1 and n != 1 and old != n:
                name = "..." if label.isdigit() else label
                raise _error(f"subscript {name} has size {n} for operand {index} which does "
                             f"not broadcast with previously seen size {old}")
            sizes[label] = max(old, n)
    return sizes


def _arrange(t, labels, order, sizes):
    """t permuted to the label order, size-1 dims broadcast to the full size."""
    t = t.permute(*[labels.index(lb) for lb in order]) if order != labels else t
    full = tuple(sizes[lb] for lb in order)
    return t.expand(*full) if tuple(t.shape) != full else t


def _contract(a, a_labels, b, b_labels, needed_after, sizes):
    """One pairwise step: a batched matmul of a and b, summing their shared labels that
    no later operand or the output needs."""
    batch = [lb for lb in a_labels if lb in b_labels and lb in needed_after]
    summed = [lb for lb in a_labels if lb in b_labels and lb not in needed_after]
    a_only = [lb for lb in a_labels if lb not in b_labels]
    b_only = [lb for lb in b_labels if lb not in a_labels]

    def prod(labels):
        out = 1
        for lb in labels:
            out *= sizes[lb]
        return out

    a = _arrange(a, a_labels, batch + a_only + summed, sizes)
    b = _arrange(b, b_labels, batch + summed + b_only, sizes)
    a = a.reshape(prod(batch), prod(a_only), prod(summed))
    b = b.reshape(prod(batch), prod(summed), prod(b_only))
    out = matmul(a, b).reshape(*[sizes[lb] for lb in batch + a_only + b_only])
    return out, batch + a_only + b_only


def einsum(*args):
    """torch.einsum(equation, *operands): see the module docstring for the method."""
    if not args:
        raise TypeError("einsum(): must specify the equation string and at least one operand, "
                        "or at least one operand and its subscripts list")
    equation, operands = _split_args(args[0], args[1:])
    if not operands:
        raise _error("must provide at least one operand")
    inputs, output = _parse(equation, operands)
    sizes = _sizes(operands, inputs)
    prepared = []
    for i, (t, labels) in enumerate(zip(operands, inputs)):
        t, labels = _diagonal(t, labels)
        others = {lb for j, lbs in enumerate(inputs) if j != i for lb in lbs}
        prepared.append(_sum_out(t, labels, others | set(output)))
    t, labels = prepared[0]
    for i in range(1, len(prepared)):
        later = {lb for _, lbs in prepared[i + 1:] for lb in lbs} | set(output)
        t, labels = _contract(t, labels, *prepared[i], later, sizes)
    t, labels = _sum_out(t, labels, set(output))
    return _arrange(t, labels, output, sizes)
