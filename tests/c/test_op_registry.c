/* test_op_registry.c - the op registry (ca_op_count, ca_op_describe, ca_op_find,
 * ca_op_apply), and every op in it checked generically: its gradient against finite
 * differences. A new op with a schema is covered here without editing this file. */
#include <math.h>
#include <string.h>

#include "testutil.h"

static int find(const char *name) {
    int k = -1;
    TU_OK(ca_op_find(name, &k));
    return k;
}

Test(registry, lists_every_op_by_name) {
    int n = ca_op_count();
    cr_assert_gt(n, 0);
    for (int k = 0; k < n; k++) {
        ca_op_info info;
        TU_OK(ca_op_describe(k, &info));
        size_t len = strlen(info.name);
        cr_assert(strncmp(info.schema, info.name, len) == 0 && info.schema[len] == '(',
                  "schema \"%s\" does not name %s", info.schema, info.name);
        cr_assert_geq(info.n_tensors, 1);
        cr_assert(info.n_defaults >= 0 && info.n_defaults <= info.n_scalars);
        cr_assert_eq(find(info.name), k);
        cr_assert_eq(info.n_args, info.n_tensors + info.n_scalars);
        for (int a = 0, t = 0; a < info.n_args; a++) {
            cr_assert(info.arg_names[a] && info.arg_names[a][0], "%s: argument %d unnamed",
                      info.name, a);
            t += info.arg_is_tensor[a];
            cr_assert(t <= info.n_tensors);
        }
        cr_assert(info.flags != 0, "%s: PyTorch has it nowhere?", info.name);
    }
    TU_FAILS(ca_op_find("no_such_op", &(int){0}), CA_STATUS_INVALID, "no op named 'no_such_op'");
    TU_FAILS(ca_op_describe(n, &(ca_op_info){0}), CA_STATUS_INVALID, "out of range");
    TU_FAILS(ca_op_describe(-1, &(ca_op_info){0}), CA_STATUS_INVALID, "out of range");
}

Test(registry, defaults_are_parsed) {
    ca_op_info info;
    TU_OK(ca_op_describe(find("softplus"), &info));
    cr_assert_eq(info.n_scalars, 2);
    cr_assert_eq(info.n_defaults, 2);
    cr_assert_eq(info.defaults[0], 1.0);
    cr_assert_eq(info.defaults[1], 20.0);
    cr_assert_eq(info.n_args, 3);
    cr_assert_str_eq(info.arg_names[0], "input");
    cr_assert(info.arg_is_tensor[0]);
    cr_assert_str_eq(info.arg_names[1], "beta");
    cr_assert_str_eq(info.arg_names[2], "threshold");
    cr_assert(!info.arg_is_tensor[1] && !info.arg_is_tensor[2]);
    TU_OK(ca_op_describe(find("gelu"), &info));
    cr_assert_eq(info.n_defaults, 1);
    cr_assert_eq(info.defaults[0], 0.0); /* 'none' is choice 0 */
}

/* ca_op_apply gives what the op's own function gives, bit for bit. */
Test(registry, apply_matches_the_named_function) {
    ca_tensor *x = tu_randn(CA_FLOAT32, TU_SHAPE(4, 5), false), *a = NULL, *b = NULL;
    TU_OK(ca_op_apply(find("softplus"), 1, &x, 2, (double[]){2.0, 1.5}, &a));
    TU_OK(ca_softplus(x, 2.0, 1.5, &b));
    tu_assert_close(a, b, 0, 0);
    tu_release_n((ca_tensor *[]){a, b}, 2);
    TU_OK(ca_op_apply(find("gelu"), 1, &x, 1, (double[]){1.0}, &a));
    TU_OK(ca_gelu(x, CA_GELU_TANH, &b));
    tu_assert_close(a, b, 0, 0);
    tu_release_n((ca_tensor *[]){a, b, x}, 3);
}

Test(registry, apply_refuses_bad_arguments) {
    ca_tensor *x = tu_randn(CA_FLOAT32, TU_SHAPE(3), false), *out = NULL;
    int gelu = find("gelu"), relu = find("relu");
    TU_FAILS(ca_op_apply(relu, 1, &x, 1, (double[]){1.0}, &out), CA_STATUS_INVALID,
             "takes 1 tensors and 0 scalars, got 1 and 1");
    TU_FAILS(ca_op_apply(relu, 2, (ca_tensor *[]){x, x}, 0, NULL, &out), CA_STATUS_INVALID,
             "relu takes 1 tensors");
    TU_FAILS(ca_op_apply(relu, 1, (ca_tensor *[]){NULL}, 0, NULL, &out), CA_STATUS_INVALID, "NULL");
    TU_FAILS(ca_op_apply(gelu, 1, &x, 1, (double[]){2.0}, &out), CA_STATUS_INVALID,
             "index of one of its choices");
    TU_FAILS(ca_op_apply(gelu, 1, &x, 1, (double[]){0.5}, &out), CA_STATUS_INVALID,
             "index of one of its choices");
    TU_FAILS(ca_op_apply(ca_op_count(), 1, &x, 0, NULL, &out), CA_STATUS_INVALID, "out of range");
    TU_FAILS(ca_op_apply(relu, 1, &x, 0, NULL, NULL), CA_STATUS_INVALID, "out");
    cr_assert_null(out);
    ca_tensor_release(x);
}

/* ---------------------------------------------------------------------------------------
 * Every op of the registry with one tensor input, at its default arguments: float64
 * gradients against central differences, on a [2, 4] input.
 */
typedef struct {
    int index;
    ca_op_info info;
} reg_case;

static ca_status call_op(ca_tensor *const *in, ca_tensor **out, void *ctx) {
    const reg_case *c = ctx;
    return ca_op_apply(c->index, 1, in, c->info.n_scalars, c->info.defaults, out);
}

Test(registry, every_unary_op_gradchecks) {
    int checked = 0;
    for (int k = 0; k < ca_op_count(); k++) {
        reg_case c = {.index = k};
        TU_OK(ca_op_describe(k, &c.info));
        if (c.info.n_tensors != 1 || c.info.n_defaults != c.info.n_scalars)
            continue;
        /* values away from 0 and from the kinks at +-1, +-3 and 6 of the piecewise ops;
         * positive ones for the ops defined only there */
        static const double any[8] = {-4.7, -2.2, -0.6, -0.05, 0.3, 1.7, 4.1, 7.3};
        static const double pos[8] = {0.05, 0.3, 0.6, 1.2, 1.7, 2.2, 4.1, 7.3};
        static const double unit[8] = {-0.9, -0.6, -0.3, -0.05, 0.2, 0.45, 0.7, 0.85};
        static const double above_1[8] = {1.05, 1.3, 1.7, 2.2, 3.1, 4.1, 5.5, 7.3};
        unsigned fl = c.info.flags;
        static const double prob[8] = {0.05, 0.2, 0.3, 0.45, 0.55, 0.7, 0.8, 0.95};
        const double *v = fl & (CA_OP_POSITIVE | CA_OP_ABOVE_M1) ? pos
                          : fl & CA_OP_PROB                      ? prob
                          : fl & CA_OP_UNIT                      ? unit
                          : fl & CA_OP_ABOVE_1                   ? above_1
                                                                 : any;
        /* 2-D, so that ops on matrices (tril, triu) take it too */
        ca_tensor *x = tu_from(CA_FLOAT64, TU_SHAPE(2, 4), v, true);
        tu_gradcheck(call_op, 1, &x, &c, 1e-6, 1e-5);
        ca_tensor_release(x);
        checked++;
    }
    cr_assert_geq(checked, 25);
}
