/* builder.c - the builder helpers that are not inline (builder.h): cai_bx_fail formats a
 * rule's failure into the builder's sticky status; cai_rule_once_differentiable is the rule
 * of the backward-only helpers that a double backward cannot differentiate.
 */
#include "autograd/builder.h"

#include <stdio.h>
#include <string.h>

ca_bval cai_bx_fail(ca_builder *b, ca_status st, const char *fmt, ...) {
    if (b->status != CA_OK)
        return NULL;
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    b->status = err_set(st, "%s", msg);
    return NULL;
}

void cai_rule_once_differentiable(ca_builder *b, const ca_node *n, ca_bval g, ca_bval *gin) {
    (void)g, (void)gin;
    const ca_op_def *row = cai_op_def(n->op);
    cai_bx_fail(b, CA_STATUS_AUTOGRAD,
                "the derivative for '%s' is not implemented: cagrad cannot differentiate its "
                "gradient again (double backward, create_graph=True; see docs/python-api.md)",
                row ? row->name : "?");
}
