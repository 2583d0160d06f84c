/* op_registry.c - the op registry: every op-table row with a schema, callable by index.
 *
 * A schema is the op's Python signature with PyTorch's names and defaults, for example
 *     "elu(Tensor input, float alpha=1.0)"     "gelu(Tensor input, str{none|tanh}
 * approximate='none')" Its parameters are Tensor (an input), float, int, bool, or str{a|b|...} (one
 * of the choices, passed as its index). Only scalars take defaults, and once one has, every later
 * one has. The registry parses every schema once, at start-up, and a malformed one is a
 * start-up error. ca_op_apply passes the tensors as the op's inputs and
 * the other arguments, as doubles in schema order, to the row's args function, or by
 * default maps them in order: floats to attrs.s[], the others to attrs.i[].
 */
#include "autograd/internal.h"

#include <ctype.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define REG_MAX_SCALARS CA_OP_MAX_SCALARS

typedef enum { ARG_FLOAT, ARG_INT, ARG_BOOL, ARG_CHOICE } reg_arg_kind;

typedef struct {
    int op;
    int n_tensors, n_scalars;
    reg_arg_kind kind[REG_MAX_SCALARS];
    int n_choices[REG_MAX_SCALARS];       /* ARG_CHOICE: how many */
    const char *choices[REG_MAX_SCALARS]; /* ARG_CHOICE: "none|tanh}..." in the schema */
    double defaults[REG_MAX_SCALARS];
    int n_defaults; /* the scalars from the first one with a default on */
    int n_args;     /* every argument, in schema order: its name and whether a Tensor */
    char arg_name[CA_OP_MAX_ARGS][CA_OP_ARG_NAME];
    bool arg_is_tensor[CA_OP_MAX_ARGS];
} reg_entry;

static struct {
    int n;
    reg_entry e[CA_OP__COUNT];
    int index_of[CA_OP__COUNT]; /* an op id's registry index, or -1 */
} registry;

/* ---------------------------------------------------------------------------------------
 * Schema parsing: "name(type param[=default], ...)"
 */
static const char *skip_space(const char *s) {
    while (*s == ' ')
        s++;
    return s;
}

static bool has_prefix(const char *s, const char *prefix) {
    return strncmp(s, prefix, strlen(prefix)) == 0;
}

/* One parameter's type at *s; advances *s past it. False when it is not one we know. */
static bool parse_type(const char **s, reg_entry *e) {
    const char *p = *s;
    if (has_prefix(p, "Tensor ")) {
        e->n_tensors++;
        *s = p + 6;
        return true;
    }
    if (e->n_scalars == REG_MAX_SCALARS)
        return false;
    int k = e->n_scalars++;
    static const struct {
        const char *word;
        reg_arg_kind kind;
    } words[] = {{"float ", ARG_FLOAT},
                 {"float? ", ARG_FLOAT}, /* None (NaN here) allowed: logit's eps */
                 {"int ", ARG_INT},
                 {"bool ", ARG_BOOL}};
    for (size_t w = 0; w < sizeof words / sizeof words[0]; w++)
        if (has_prefix(p, words[w].word)) {
            e->kind[k] = words[w].kind;
            *s = p + strlen(words[w].word) - 1;
            return true;
        }
    if (!has_prefix(p, "str{"))
        return false;
    const char *end = strchr(p, '}');
    if (!end || end == p + 4)
        return false;
    e->kind[k] = ARG_CHOICE;
    e->choices[k] = p + 4;
    e->n_choices[k] = 1;
    for (const char *q = p + 4; q < end; q++)
        e->n_choices[k] += *q == '|';
    *s = end + 1;
    return true;
}

/* The index of the quoted choice at p ("'tanh'") among the choices "none|tanh}", or -1. */
static int choice_index(const char *choices, const char *p, const char **end) {
    const char *close = strchr(p + 1, '\'');
    if (*p != '\'' || !close)
        return -1;
    *end = close + 1;
    size_t len = (size_t)(close - p - 1);
    int k = 0;
    for (const char *c = choices; *c && *c != '}'; k++) {
        size_t n = strcspn(c, "|}");
        if (n == len && strncmp(c, p + 1, len) == 0)
            return k;
        c += n + (c[n] == '|');
    }
    return -1;
}

/* A default at p for scalar k: a number, True or False, or a quoted choice. Advances *end. */
static bool parse_default(const char *p, reg_entry *e, int k, const char **end) {
    if (e->kind[k] == ARG_CHOICE) {
        int c = choice_index(e->choices[k], p, end);
        e->defaults[k] = c;
        return c >= 0;
    }
    if (has_prefix(p, "True") || has_prefix(p, "False")) {
        e->defaults[k] = *p == 'T';
        *end = p + (*p == 'T' ? 4 : 5);
        return e->kind[k] == ARG_BOOL;
    }
    if (has_prefix(p, "None")) { /* only float? has it: None is passed as NaN */
        e->defaults[k] = NAN;
        *end = p + 4;
        return e->kind[k] == ARG_FLOAT;
    }
    char *num_end;
    e->defaults[k] = strtod(p, &num_end);
    *end = num_end;
    return num_end != p;
}

/* One "type name[=default]"; advances *s to the ',' or ')' after it. Defaults must run to
 * the end once they start, as in Python. */
static bool parse_param(const char **s, reg_entry *e) {
    const char *p = skip_space(*s);
    int tensors = e->n_tensors;
    if (!parse_type(&p, e) || *p != ' ')
        return false;
    bool scalar = e->n_tensors == tensors;
    p = skip_space(p);
    if (!isalpha((unsigned char)*p) && *p != '_')
        return false;
    const char *name = p;
    while (isalnum((unsigned char)*p) || *p == '_')
        p++;
    size_t len = (size_t)(p - name);
    if (e->n_args == CA_OP_MAX_ARGS || len >= CA_OP_ARG_NAME)
        return false;
    memcpy(e->arg_name[e->n_args], name, len);
    e->arg_name[e->n_args][len] = '\0';
    e->arg_is_tensor[e->n_args++] = !scalar;
    if (*p == '=') {
        if (!scalar || !parse_default(p + 1, e, e->n_scalars - 1, &p))
            return false;
        e->n_defaults++;
    } else if (e->n_defaults > 0) {
        return false;
    }
    *s = skip_space(p);
    return **s == ',' || **s == ')';
}

static bool parse_schema(const ca_op_def *row, reg_entry *e) {
    size_t len = strlen(row->name);
    const char *s = row->schema;
    if (strncmp(s, row->name, len) != 0 || s[len] != '(')
        return false;
    s += len + 1;
    if (*s != ')')
        for (;;) {
            if (!parse_param(&s, e))
                return false;
            if (*s++ == ')')
                break;
        }
    else
        s++;
    if (*s != '\0' || e->n_tensors < row->n_in_min ||
        (row->n_in_max >= 0 && e->n_tensors > row->n_in_max))
        return false;
    /* the default mapping puts floats in attrs.s[] and the others in attrs.i[]: they must fit */
    int n_float = 0;
    for (int k = 0; k < e->n_scalars; k++)
        n_float += e->kind[k] == ARG_FLOAT;
    ca_attrs room;
    return row->args || (n_float <= (int)(sizeof room.s / sizeof room.s[0]) &&
                         e->n_scalars - n_float <= (int)(sizeof room.i / sizeof room.i[0]));
}

bool cai_op_schema_valid(const ca_op_def *row) {
    reg_entry e = {.op = row->id};
    return row->schema && parse_schema(row, &e);
}

ca_status cai_op_registry_build(void) {
    registry.n = 0;
    for (int id = 0; id < CA_OP__COUNT; id++) {
        registry.index_of[id] = -1;
        const ca_op_def *row = cai_op_def(id);
        if (!row || !row->schema)
            continue;
        reg_entry e = {.op = id};
        if (!parse_schema(row, &e))
            return err_set(CA_STATUS_INTERNAL,
                           "op table: op '%s' has a malformed schema \"%s\"; it must read "
                           "\"%s(Tensor input, float name=default, ...)\"",
                           row->name, row->schema, row->name);
        registry.index_of[id] = registry.n;
        registry.e[registry.n++] = e;
    }
    return CA_OK;
}

/* ---------------------------------------------------------------------------------------
 * Arguments
 */
static const reg_entry *entry_of_op(int op) {
    int k = op >= 0 && op < CA_OP__COUNT ? registry.index_of[op] : -1;
    return k >= 0 ? &registry.e[k] : NULL;
}

static ca_status default_args(const ca_op_def *row, const reg_entry *e, const double *arg,
                              ca_attrs *a) {
    int ns = 0, ni = 0;
    for (int k = 0; k < e->n_scalars; k++) {
        double v = arg[k];
        if (e->kind[k] == ARG_FLOAT) {
            a->s[ns++] = v;
            continue;
        }
        bool whole = isfinite(v) && v == floor(v) && fabs(v) < 9.0e18;
        bool in_range = e->kind[k] != ARG_CHOICE || (v >= 0 && v < e->n_choices[k]);
        if (!whole || !in_range)
            return err_set(
                CA_STATUS_INVALID, "%s: scalar argument %d is %g; it takes %s (schema \"%s\")",
                row->name, k + 1, v,
                e->kind[k] == ARG_CHOICE ? "the index of one of its choices" : "a whole number",
                row->schema);
        a->i[ni++] = (int64_t)v;
    }
    return CA_OK;
}

ca_status cai_op_def_args(int op, const double *arg, int n_arg, ca_attrs *a) {
    const ca_op_def *row = cai_op_def(op);
    if (!row)
        return err_set(CA_STATUS_INTERNAL, "op id %d has no row in the op table", op);
    if (n_arg > 0 && !arg)
        return err_set(CA_STATUS_INVALID, "%s: %d scalar arguments but no array of them", row->name,
                       n_arg);
    if (row->args)
        return row->args(arg, n_arg, a);
    const reg_entry *e = entry_of_op(op);
    if (!e || n_arg != e->n_scalars)
        return err_set(CA_STATUS_INVALID, "%s: takes %d scalar arguments, got %d", row->name,
                       e ? e->n_scalars : 0, n_arg);
    return default_args(row, e, arg, a);
}

/* ---------------------------------------------------------------------------------------
 * The public registry
 */
int ca_op_count(void) {
    return ca_init() == CA_OK ? registry.n : 0;
}

static ca_status entry_at(int index, const reg_entry **out) {
    CA_CHECK(ca_init());
    if (index < 0 || index >= registry.n)
        return err_set(CA_STATUS_INVALID,
                       "op registry: index %d is out of range; there are %d ops (ca_op_count)",
                       index, registry.n);
    *out = &registry.e[index];
    return CA_OK;
}

ca_status ca_op_describe(int index, ca_op_info *out) {
    CA_ARG_NOT_NULL(out, "ca_op_describe");
    const reg_entry *e;
    CA_CHECK(entry_at(index, &e));
    const ca_op_def *row = cai_op_def(e->op);
    *out = (ca_op_info){.name = row->name,
                        .schema = row->schema,
                        .n_tensors = e->n_tensors,
                        .n_scalars = e->n_scalars,
                        .n_defaults = e->n_defaults,
                        .n_args = e->n_args,
                        .flags = row->py};
    memcpy(out->defaults, e->defaults, sizeof out->defaults);
    for (int k = 0; k < e->n_args; k++) {
        out->arg_names[k] = e->arg_name[k];
        out->arg_is_tensor[k] = e->arg_is_tensor[k];
    }
    return CA_OK;
}

ca_status ca_op_find(const char *name, int *index) {
    CA_ARG_NOT_NULL(name, "ca_op_find");
    CA_ARG_NOT_NULL(index, "ca_op_find");
    CA_CHECK(ca_init());
    for (int k = 0; k < registry.n; k++)
        if (strcmp(cai_op_def(registry.e[k].op)->name, name) == 0) {
            *index = k;
            return CA_OK;
        }
    return err_set(CA_STATUS_INVALID, "ca_op_find: there is no op named '%s' in the registry",
                   name);
}

ca_status ca_op_apply(int index, int n_tensors, ca_tensor *const *tensors, int n_scalars,
                      const double *scalars, ca_tensor **out) {
    CA_ARG_NOT_NULL(out, "ca_op_apply");
    *out = NULL;
    const reg_entry *e;
    CA_CHECK(entry_at(index, &e));
    const ca_op_def *row = cai_op_def(e->op);
    if (n_tensors != e->n_tensors || n_scalars != e->n_scalars)
        return err_set(CA_STATUS_INVALID,
                       "ca_op_apply: %s takes %d tensors and %d scalars, got %d and %d (schema "
                       "\"%s\")",
                       row->name, e->n_tensors, e->n_scalars, n_tensors, n_scalars, row->schema);
    ca_attrs a = {0};
    CA_CHECK(cai_op_def_args(e->op, scalars, n_scalars, &a));
    return cai_op_call(e->op, n_tensors, tensors, &a, out, NULL);
}
