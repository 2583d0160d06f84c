/* test_version.c - suite `version`: the version macros agree with each other and with the
 * library linked (ca_version).
 */
#include "testutil.h"

#include <stdio.h>
#include <string.h>

Test(version, library_matches_header) {
    cr_assert_str_eq(ca_version(), CA_VERSION);
}

Test(version, string_is_major_minor_patch) {
    char expect[64];
    snprintf(expect, sizeof expect, "%d.%d.%d", CA_VERSION_MAJOR, CA_VERSION_MINOR,
             CA_VERSION_PATCH);
    cr_assert_str_eq(CA_VERSION, expect);
}

Test(version, number_encodes_the_parts) {
    cr_assert_eq(CA_VERSION_NUMBER,
                 CA_VERSION_MAJOR * 1000000 + CA_VERSION_MINOR * 1000 + CA_VERSION_PATCH);
    int major, minor, patch;
    cr_assert_eq(sscanf(ca_version(), "%d.%d.%d", &major, &minor, &patch), 3);
    cr_assert_eq(major * 1000000 + minor * 1000 + patch, CA_VERSION_NUMBER);
}

/* The macros work in #if, as SQLite's SQLITE_VERSION_NUMBER does. */
#if CA_VERSION_NUMBER != CA_VERSION_MAJOR * 1000000 + CA_VERSION_MINOR * 1000 + CA_VERSION_PATCH
#error "CA_VERSION_NUMBER must be an integer constant that #if can compare"
#endif
