/* version.c - the version of the library linked, for programs to compare against the
 * header they were compiled with (CA_VERSION).
 */
#include "cagrad.h"

_Static_assert(CA_VERSION_NUMBER ==
                   CA_VERSION_MAJOR * 1000000 + CA_VERSION_MINOR * 1000 + CA_VERSION_PATCH,
               "CA_VERSION_NUMBER must be major * 1000000 + minor * 1000 + patch");
_Static_assert(CA_VERSION_MINOR < 1000 && CA_VERSION_PATCH < 1000,
               "minor and patch must each fit in three digits of CA_VERSION_NUMBER");

const char *ca_version(void) {
    return CA_VERSION;
}
