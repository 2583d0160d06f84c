/* ops_activation.h - the activations: unary pointwise ops whose derivative is one kernel.
 *
 * Each row is a whole op: CA_ACTIVATIONS(X) expands X(ID, NAME, NODE, FWD, BWD, SAVED, NP,
 * S0, S1, CHECK, SCHEMA, PY) for each. From a row come its op id (CA_OP_<ID>), its op-table
 * row and derivative rule, its C function ca_<NAME> (declared in cagrad.h), and its entry
 * in the op registry, from which the Python package builds torch.<NAME>, Tensor.<NAME> and
 * nn.functional.<NAME> (ops_activation.c). Its kernels are rows of codegen/kern_pw_ops.h.
 *
 *   ID      the op id, CA_OP_<ID>
 *   NAME    the op, its C function ca_<NAME> and its Python name
 *   NODE    its node in logs and grad_fn: PyTorch's name
 *   FWD     the forward kernel, KPW_<FWD>, run with p0 = attrs.s[0] and p1 = attrs.s[1]
 *   BWD     the derivative kernel, KPW_<BWD>: the input's gradient is BWD(g, saved) with the
 *           same p0, p1
 *   SAVED   what BWD reads besides g: SELF (the input) or RESULT (the output)
 *   NP      the op's own scalar arguments (0, 1 or 2), a0 and a1 below
 *   S0, S1  attrs.s[0] and attrs.s[1], the kernels' p0 and p1, as expressions of a0, a1
 *   CHECK   NOCHECK, or REQUIRE(condition on a0, a1, status, message) for a bad argument
 *   SCHEMA  the Python signature of the op's arguments, with PyTorch's names and defaults
 *   PY      where PyTorch has it: CA_OP_PY_* flags (cagrad.h)
 */
#ifndef CAGRAD_OPS_ACTIVATION_H
#define CAGRAD_OPS_ACTIVATION_H

#define CA_PY_ALL (CA_OP_PY_TORCH | CA_OP_PY_TENSOR | CA_OP_PY_NN)

/* SELU's constants (Klambauer et al. 2017), as PyTorch spells them */
#define CA_SELU_ALPHA 1.6732632423543772848170429916717
#define CA_SELU_SCALE 1.0507009873554804934193349852946

/* clang-format off */
#define CA_ACTIVATIONS(X)                                                                          \
    X(TANH, tanh, "TanhBackward0", TANH, TANH_BW, RESULT, 0, 0, 0, NOCHECK,                        \
      "tanh(Tensor input)", CA_PY_ALL)                                                             \
    X(SIGMOID, sigmoid, "SigmoidBackward0", SIGMOID, SIGMOID_BW, RESULT, 0, 0, 0, NOCHECK,         \
      "sigmoid(Tensor input)", CA_PY_ALL)                                                          \
    X(RELU, relu, "ReluBackward0", RELU, RELU_BW, RESULT, 0, 0, 0, NOCHECK,                        \
      "relu(Tensor input)", CA_PY_ALL | CA_OP_PY_INPLACE)                                          \
    X(LEAKY_RELU, leaky_relu, "LeakyReluBackward0", LEAKY_RELU, LEAKY_RELU_BW, SELF, 1, a0, 0,     \
      NOCHECK, "leaky_relu(Tensor input, float negative_slope=0.01)", CA_OP_PY_NN | CA_OP_PY_INPLACE) \
    X(SILU, silu, "SiluBackward0", SILU, SILU_BW, SELF, 0, 0, 0, NOCHECK,                          \
      "silu(Tensor input)", CA_OP_PY_NN | CA_OP_PY_INPLACE)                                          \
    X(SOFTPLUS, softplus, "SoftplusBackward0", SOFTPLUS, SOFTPLUS_BW, SELF, 2, a0, a1, NOCHECK,     \
      "softplus(Tensor input, float beta=1.0, float threshold=20.0)", CA_OP_PY_NN)              \
    X(MISH, mish, "MishBackward0", MISH, MISH_BW, SELF, 0, 0, 0, NOCHECK,                          \
      "mish(Tensor input)", CA_OP_PY_NN | CA_OP_PY_INPLACE)                                      \
    X(HARDSWISH, hardswish, "HardswishBackward0", HARDSWISH, HARDSWISH_BW, SELF, 0, 0, 0, NOCHECK, \
      "hardswish(Tensor input)", CA_OP_PY_NN | CA_OP_PY_INPLACE)                                 \
    X(HARDSIGMOID, hardsigmoid, "HardsigmoidBackward0", HARDSIGMOID, HARDSIGMOID_BW, SELF, 0, 0, 0, \
      NOCHECK, "hardsigmoid(Tensor input)", CA_OP_PY_NN | CA_OP_PY_INPLACE)                      \
    X(ELU, elu, "EluBackward0", ELU, ELU_BW, SELF, 1, a0, 1.0, NOCHECK,                            \
      "elu(Tensor input, float alpha=1.0)", CA_OP_PY_NN | CA_OP_PY_INPLACE)                      \
    X(SELU, selu, "EluBackward0", ELU, ELU_BW, SELF, 0, CA_SELU_ALPHA * CA_SELU_SCALE,             \
      CA_SELU_SCALE, NOCHECK, "selu(Tensor input)",                                                \
      CA_OP_PY_TORCH | CA_OP_PY_NN | CA_OP_PY_INPLACE)                                           \
    X(CELU, celu, "CeluBackward0", CELU, CELU_BW, SELF, 1, a0, 1.0 / a0,                           \
      REQUIRE(a0 != 0, CA_STATUS_INVALID, "ZeroDivisionError: alpha cannot be 0 for CELU"),       \
      "celu(Tensor input, float alpha=1.0)", CA_OP_PY_TORCH | CA_OP_PY_NN | CA_OP_PY_INPLACE)    \
    X(LOGSIGMOID, logsigmoid, "LogSigmoidBackward0", LOGSIGMOID, LOGSIGMOID_BW, SELF, 0, 0, 0,     \
      NOCHECK, "logsigmoid(Tensor input)", CA_OP_PY_NN)                                          \
    X(SOFTSIGN, softsign, "SoftsignBackward0", SOFTSIGN, SOFTSIGN_BW, SELF, 0, 0, 0, NOCHECK,      \
      "softsign(Tensor input)", CA_OP_PY_NN)                                                      \
    X(HARDTANH, hardtanh, "HardtanhBackward0", CLAMP, HARDTANH_BW, SELF, 2, a0, a1,                \
      REQUIRE(!(a0 > a1), CA_STATUS_VALUE, "min_val cannot be greater than max_val"),             \
      "hardtanh(Tensor input, float min_val=-1.0, float max_val=1.0)",                             \
      CA_OP_PY_NN | CA_OP_PY_INPLACE)                                                              \
    X(RELU6, relu6, "HardtanhBackward0", CLAMP, HARDTANH_BW, SELF, 0, 0, 6, NOCHECK,               \
      "relu6(Tensor input)", CA_OP_PY_NN | CA_OP_PY_INPLACE)
/* clang-format on */

#endif /* CAGRAD_OPS_ACTIVATION_H */
