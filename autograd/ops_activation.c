/* ops_activation.c - the activations of ops_activation.h: their op-table rows, their one
 * derivative rule, the argument mapping the op registry uses, and the C functions.
 *
 * Every activation is a row of data, so nothing here names one op: a row's forward is the
 * shared pointwise kernel (op.c) and its derivative is its derivative kernel applied to
 * (g, saved) with the same parameters. That is a single pointwise node, so the compiled
 * backward fuses it with its neighbours like any other.
 */
#include "autograd/builder.h"

/* ---------------------------------------------------------------------------------------
 * The derivative rule: gin = BWD(g, saved) with p0, p1 = attrs.s[0..1]
 */
static void activation_backward(ca_builder *b, const ca_node *n, ca_bval g, ca_bval *gin) {
    if (!node_needs_grad(n, 0))
        return;
    const ca_op_def *row = cai_op_def(n->op);
    ca_bval d = bx_pw(b, row->pw_bw, g, bx_saved(b, n, 0), NULL, n->attrs.s[0], n->attrs.s[1]);
    gin[0] = bx_sum_to(b, d, &n->in_meta[0]);
}

/* ---------------------------------------------------------------------------------------
 * Arguments: a0, a1 (the op's own scalars, from the C function or the registry) checked and
 * turned into the kernels' parameters attrs.s[0..1].
 */
#define NOCHECK ((void)0)
#define REQUIRE(cond, status, msg)                                                                 \
    do {                                                                                           \
        if (!(cond))                                                                               \
            return err_set(status, "%s: %s", name, msg);                                           \
    } while (0)

#define ACT_ARGS(ID, NAME, NODE, FWD, BWD, SAVED, NP, S0, S1, CHECK, SCHEMA, PY)                   \
    static ca_status args_##ID(const double *arg, int n_arg, ca_attrs *a) {                        \
        const char *name = #NAME;                                                                  \
        if (n_arg != (NP))                                                                         \
            return err_set(CA_STATUS_INVALID, "%s: takes %d scalar arguments, got %d", name, NP,   \
                           n_arg);                                                                 \
        double a0 = (NP) > 0 ? arg[0] : 0, a1 = (NP) > 1 ? arg[1] : 0;                             \
        (void)a0, (void)a1;                                                                        \
        CHECK;                                                                                     \
        a->s[0] = (S0);                                                                            \
        a->s[1] = (S1);                                                                            \
        return CA_OK;                                                                              \
    }
CA_ACTIVATIONS(ACT_ARGS)
#undef ACT_ARGS

/* ---------------------------------------------------------------------------------------
 * The rows
 */
#define SAVED_SELF                                                                                 \
    { "self", FIELD_TENSOR, FROM_INPUT, 0 }
#define SAVED_RESULT                                                                               \
    { "result", FIELD_TENSOR, FROM_OUTPUT, 0 }

/* The saved tensor, then the parameters the derivative kernel reads (they are in the key). */
#define ACT_ROW(ID, NAME, NODE, FWD, BWD, SAVED, NP, S0, S1, CHECK, SCHEMA, PY)                    \
    {.id = CA_OP_##ID,                                                                             \
     .name = #NAME,                                                                                \
     .node_name = (NODE),                                                                          \
     .fusion = CA_FUSE_POINTWISE,                                                                  \
     .n_in_min = 1,                                                                                \
     .n_in_max = 1,                                                                                \
     .n_fields = 1 + KPW_NP_##BWD,                                                                 \
     .fields = {SAVED_##SAVED, F_DBL("p0", 0), F_DBL("p1", 1)},                                    \
     .shape = cai_op_pointwise_shape,                                                              \
     .forward = cai_op_pointwise_forward,                                                          \
     .backward = activation_backward,                                                              \
     .pw = KPW_##FWD,                                                                              \
     .pw_bw = KPW_##BWD,                                                                           \
     .schema = (SCHEMA),                                                                           \
     .py = (PY),                                                                                   \
     .args = args_##ID},

static const ca_op_def rows[] = {CA_ACTIVATIONS(ACT_ROW)};
#undef ACT_ROW

const ca_op_group cai_ops_activation = {rows, (int)(sizeof rows / sizeof rows[0])};

/* ---------------------------------------------------------------------------------------
 * The C functions: ca_<NAME>(x, [a0, [a1,]] out)
 */
static ca_status activation_call(int op, const char *fn, ca_tensor *x, const double *arg, int n_arg,
                                 ca_tensor **out) {
    CA_ARG_NOT_NULL(out, fn);
    *out = NULL;
    CA_ARG_NOT_NULL(x, fn);
    CA_CHECK(ca_init()); /* the table cai_op_def_args reads */
    ca_attrs a = {0};
    CA_CHECK(cai_op_def_args(op, arg, n_arg, &a));
    return cai_op_call1(op, x, &a, out);
}

#define ACT_FN_0(ID, NAME)                                                                         \
    ca_status ca_##NAME(ca_tensor *x, ca_tensor **out) {                                           \
        return activation_call(CA_OP_##ID, "ca_" #NAME, x, NULL, 0, out);                          \
    }
#define ACT_FN_1(ID, NAME)                                                                         \
    ca_status ca_##NAME(ca_tensor *x, double a0, ca_tensor **out) {                                \
        double arg[1] = {a0};                                                                      \
        return activation_call(CA_OP_##ID, "ca_" #NAME, x, arg, 1, out);                           \
    }
#define ACT_FN_2(ID, NAME)                                                                         \
    ca_status ca_##NAME(ca_tensor *x, double a0, double a1, ca_tensor **out) {                     \
        double arg[2] = {a0, a1};                                                                  \
        return activation_call(CA_OP_##ID, "ca_" #NAME, x, arg, 2, out);                           \
    }
#define ACT_FN(ID, NAME, NODE, FWD, BWD, SAVED, NP, S0, S1, CHECK, SCHEMA, PY) ACT_FN_##NP(ID, NAME)

CA_ACTIVATIONS(ACT_FN)
