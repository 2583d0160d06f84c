/* test_fuzz_corpus.c - Criterion suite `fuzz_corpus`: every input kept in tests/fuzz/corpus
 * (the seeds, and each crash the libFuzzer target found, once fixed) replayed through
 * tests/fuzz/fuzz_backward.c's LLVMFuzzerTestOneInput, built into this binary: its eager,
 * compiled and cached backwards must agree, and it aborts (failing this test) when they
 * do not. So a crash that `make fuzz-lib` found stays fixed in `make test`.
 */
#include "testutil.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static size_t read_file(const char *path, uint8_t *buf, size_t cap) {
    FILE *f = fopen(path, "rb");
    cr_assert_not_null(f, "cannot open %s", path);
    size_t n = fread(buf, 1, cap, f);
    fclose(f);
    return n;
}

Test(fuzz_corpus, every_kept_input_replays_clean) {
    DIR *d = opendir(CAGRAD_FUZZ_CORPUS);
    cr_assert_not_null(d, "no corpus at %s", CAGRAD_FUZZ_CORPUS);
    int n = 0;
    for (struct dirent *e; (e = readdir(d)) != NULL;) {
        if (e->d_name[0] == '.')
            continue;
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", CAGRAD_FUZZ_CORPUS, e->d_name);
        static uint8_t buf[1 << 16];
        size_t size = read_file(path, buf, sizeof buf);
        cr_assert_eq(LLVMFuzzerTestOneInput(buf, size), 0, "%s", e->d_name);
        n++;
    }
    closedir(d);
    cr_assert_geq(n, 2, "the corpus holds %d inputs", n);
}
