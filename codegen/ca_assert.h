/* ca_assert.h - CA_ASSERT(cond): a check of an internal invariant, for every layer
 * (codegen/, graph/ and autograd/ include it; it sits here, at the bottom).
 *
 * For broken invariants only, that is for bugs in cagrad: an index within its table, a
 * register written before it is read, a buffer inside its arena. Never for bad input from
 * a user, which is an error code and a message like everywhere else.
 *
 * The sanitizer build (CMake option CAGRAD_SANITIZE=ON, which defines
 * CAGRAD_DEBUG_ASSERTS) checks every one: a failure prints file:line and the condition to
 * stderr and aborts. Every other build compiles CA_ASSERT to nothing: cond is still
 * type-checked, so it cannot rot, but never evaluated, so it may be as costly as it needs
 * to be and must have no side effects.
 */
#ifndef CAGRAD_CA_ASSERT_H
#define CAGRAD_CA_ASSERT_H

#ifdef CAGRAD_DEBUG_ASSERTS
#include <stdio.h>
#include <stdlib.h>

_Noreturn static inline void ca_assert_fail(const char *file, int line, const char *cond) {
    fprintf(stderr, "%s:%d: internal invariant broken: CA_ASSERT(%s)\n", file, line, cond);
    abort();
}

#define CA_ASSERT(cond) ((cond) ? (void)0 : ca_assert_fail(__FILE__, __LINE__, #cond))
#else
#define CA_ASSERT(cond) ((void)sizeof(!(cond)))
#endif

#endif /* CAGRAD_CA_ASSERT_H */
