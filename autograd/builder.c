/* builder.c - cai_bx_fail, the one builder helper that is not inline (builder.h): it
 * formats a rule's failure into the builder's sticky status.
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
