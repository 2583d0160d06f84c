/* registry.c - one builtin per op of libcagrad's op registry (ca_op_count and friends).
 *
 * At module init every registry op becomes _C.ops[name] = (function, schema, flags), and the
 * flags' values become _C.OP_PY_TORCH, ... The
 * function takes the schema's arguments by position or by name, Tensors as Tensors and
 * every other argument as a number (a str{...} choice as its index), and calls ca_op_apply
 * with the GIL released. The Python package (cagrad/_ops.py) builds the PyTorch-facing
 * functions from the schema: defaults, choices given as strings, inplace=.
 */
#include "glue.h"

#include <string.h>

#define REG_MAX_OPS  256
#define REG_SPEC_LEN 160

typedef struct {
    int index; /* in the library's registry */
    int n_args;
    char spec[REG_SPEC_LEN]; /* "input:t alpha:f" for glue_parse */
    bool tensor[GLUE_MAX_ARGS];
} reg_op;

static reg_op reg_ops[REG_MAX_OPS];
static PyMethodDef reg_defs[REG_MAX_OPS];

/* The op's arguments as a glue spec: "input:t alpha:f" (names from the registry). */
static int spec_from_info(const ca_op_info *info, reg_op *r) {
    size_t used = 0;
    if (info->n_args > GLUE_MAX_ARGS)
        return -1;
    r->n_args = info->n_args;
    for (int k = 0; k < info->n_args; k++) {
        int w = snprintf(r->spec + used, sizeof r->spec - used, "%s%s:%c", k ? " " : "",
                         info->arg_names[k], info->arg_is_tensor[k] ? 't' : 'f');
        if (w < 0 || (size_t)w >= sizeof r->spec - used)
            return -1;
        used += (size_t)w;
        r->tensor[k] = info->arg_is_tensor[k];
    }
    return 0;
}

static PyObject *py_registry_op(PyObject *self, PyObject *const *args, Py_ssize_t nargs,
                                PyObject *kwnames) {
    const reg_op *r = &reg_ops[PyLong_AsLong(self)];
    const char *fname = reg_defs[r - reg_ops].ml_name;
    glue_args p;
    if (glue_parse(fname, r->spec, args, nargs, kwnames, &p) < 0)
        return NULL;
    ca_tensor *tensors[GLUE_MAX_ARGS];
    double scalars[GLUE_MAX_ARGS];
    int nt = 0, ns = 0;
    for (int k = 0; k < r->n_args; k++) {
        if (r->tensor[k])
            tensors[nt++] = p.a[k].t;
        else
            scalars[ns++] = p.a[k].f;
    }
    ca_tensor *out = NULL;
    ca_status st;
    GLUE_CALL(st = ca_op_apply(r->index, nt, tensors, ns, scalars, &out));
    PyObject *result = st ? glue_raise(st) : glue_wrap(out);
    glue_args_done(&p);
    return result;
}

static int add_op(PyObject *ops, PyObject *module_name, int index) {
    ca_op_info info;
    reg_op *r = &reg_ops[index];
    if (ca_op_describe(index, &info) != CA_OK || spec_from_info(&info, r) < 0) {
        PyErr_Format(PyExc_ImportError,
                     "cagrad._C: op %d of the registry has a schema the "
                     "bindings cannot read",
                     index);
        return -1;
    }
    r->index = index;
    reg_defs[index] = (PyMethodDef){info.name, (PyCFunction)(void (*)(void))py_registry_op,
                                    METH_FASTCALL | METH_KEYWORDS, info.schema};
    PyObject *self = PyLong_FromLong(index);
    PyObject *fn = self ? PyCFunction_NewEx(&reg_defs[index], self, module_name) : NULL;
    Py_XDECREF(self);
    PyObject *entry =
        fn ? Py_BuildValue("(Nsk)", fn, info.schema, (unsigned long)info.flags) : NULL;
    int rc = entry ? PyDict_SetItemString(ops, info.name, entry) : -1;
    Py_XDECREF(entry);
    return rc;
}

int glue_add_registry(PyObject *module) {
    int n = ca_op_count();
    if (n > REG_MAX_OPS) {
        PyErr_Format(PyExc_ImportError, "cagrad._C: %d ops in the registry, at most %d", n,
                     REG_MAX_OPS);
        return -1;
    }
    PyObject *ops = PyDict_New();
    PyObject *module_name = PyUnicode_FromString("cagrad._C");
    int rc = ops && module_name ? 0 : -1;
    for (int k = 0; k < n && rc == 0; k++)
        rc = add_op(ops, module_name, k);
    if (rc == 0)
        rc = PyModule_AddObjectRef(module, "ops", ops);
    /* the flags' values, so that Python never keeps a copy of cagrad.h's enum */
    static const struct {
        const char *name;
        long value;
    } flags[] = {{"OP_PY_TORCH", CA_OP_PY_TORCH}, {"OP_PY_TENSOR", CA_OP_PY_TENSOR},
                 {"OP_PY_NN", CA_OP_PY_NN},       {"OP_PY_INPLACE", CA_OP_PY_INPLACE},
                 {"OP_PY_OUT", CA_OP_PY_OUT},     {"OP_POSITIVE", CA_OP_POSITIVE},
                 {"OP_UNIT", CA_OP_UNIT},         {"OP_ABOVE_1", CA_OP_ABOVE_1},
                 {"OP_ABOVE_M1", CA_OP_ABOVE_M1}, {"OP_PROB", CA_OP_PROB}};
    for (size_t k = 0; rc == 0 && k < sizeof flags / sizeof flags[0]; k++)
        rc = PyModule_AddIntConstant(module, flags[k].name, flags[k].value);
    Py_XDECREF(ops);
    Py_XDECREF(module_name);
    return rc;
}
