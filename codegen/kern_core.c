/* kern_core.c - run-time ISA choice, dtype sizes and the scratch allocator.
 *
 * The ISA is detected once (lazily) and capped by CAGRAD_ISA; every kernel family asks
 * cai_kern_simd_for() for the table of the path in use, so the AVX files are never entered on
 * a CPU (or under valgrind) that lacks their instructions.
 */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "kern_internal.h"

size_t cai_kern_dtype_size(kern_dtype dt) {
    switch (dt) {
    case KERN_F32: return 4;
    case KERN_F64:
    case KERN_I64: return 8;
    case KERN_BOOL: return 1;
    }
    return 0;
}

/* ------------------------------------------------------------------ ISA */

static atomic_int kern_isa_cur = -1;

/* The 512 file is compiled with F, DQ, VL and BW, so the compiler may use any of them. */
kern_isa_level cai_kern_isa_cpu(void) {
    __builtin_cpu_init();
    bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    if (avx2 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq") &&
        __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512bw"))
        return KERN_ISA_AVX512;
    return avx2 ? KERN_ISA_AVX2 : KERN_ISA_SCALAR;
}

static kern_isa_level kern_isa_env_cap(kern_isa_level isa) {
    const char *e = getenv("CAGRAD_ISA");
    if (!e)
        return isa;
    for (int l = KERN_ISA_SCALAR; l <= KERN_ISA_AVX512; l++)
        if (strcmp(e, cai_kern_isa_name((kern_isa_level)l)) == 0)
            return l < (int)isa ? (kern_isa_level)l : isa;
    return isa; /* unknown names leave the path alone */
}

kern_isa_level cai_kern_isa(void) {
    int v = atomic_load_explicit(&kern_isa_cur, memory_order_relaxed);
    if (v < 0) {
        v = (int)kern_isa_env_cap(cai_kern_isa_cpu());
        atomic_store(&kern_isa_cur, v);
    }
    return (kern_isa_level)v;
}

kern_isa_level cai_kern_isa_set(kern_isa_level want) {
    kern_isa_level cpu = cai_kern_isa_cpu();
    if ((int)want < KERN_ISA_SCALAR)
        want = KERN_ISA_SCALAR;
    if (want > cpu)
        want = cpu;
    atomic_store(&kern_isa_cur, (int)want);
    return want;
}

const char *cai_kern_isa_name(kern_isa_level isa) {
    switch (isa) {
    case KERN_ISA_SCALAR: return "scalar";
    case KERN_ISA_AVX2: return "avx2";
    case KERN_ISA_AVX512: return "avx512";
    }
    return "unknown";
}

const kern_simd *cai_kern_simd_for(kern_dtype dt) {
    static const kern_simd *const tables[3][2] = {
        {&cai_kern_scalar_f32_table, &cai_kern_scalar_f64_table},
        {&cai_kern_avx2_f32_table, &cai_kern_avx2_f64_table},
        {&cai_kern_avx512_f32_table, &cai_kern_avx512_f64_table},
    };
    if (dt != KERN_F32 && dt != KERN_F64)
        return NULL;
    return tables[cai_kern_isa()][dt];
}

/* ------------------------------------------------------------------ scratch memory */

void *cai_kern_default_alloc(size_t nbytes) {
    size_t n = (nbytes + 63) & ~(size_t)63; /* aligned_alloc wants a multiple of 64 */
    return aligned_alloc(64, n ? n : 64);
}

kern_allocator cai_kern_default_allocator(void) {
    return (kern_allocator){cai_kern_default_alloc, free};
}

static kern_allocator kern_alloc_cur = {cai_kern_default_alloc, free};

void cai_kern_set_allocator(kern_allocator a) {
    kern_alloc_cur = a.alloc && a.free ? a : cai_kern_default_allocator();
}

void *cai_kern_scratch_alloc(size_t nbytes) {
    return kern_alloc_cur.alloc(nbytes);
}

void cai_kern_scratch_free(void *p) {
    if (p)
        kern_alloc_cur.free(p);
}
