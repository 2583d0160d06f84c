/* shared_mem.c - tensors in memory that other processes map: torch.Tensor.share_memory_()
 * and the file-descriptor strategy of torch.multiprocessing, as Hogwild training uses them.
 *
 * ca_tensor_share_memory_ moves a storage's bytes into an anonymous memory file (memfd)
 * mapped MAP_SHARED: a process forked afterwards writes the very same memory, and the
 * file's descriptor, passed to another process (over a Unix socket, as multiprocessing
 * does), maps it there (ca_tensor_from_shared_fd). The storage owns the mapping and the
 * descriptor, through the deleter that external storages already have.
 */
#include "autograd/internal.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

typedef struct {
    void *addr;
    size_t len;
    int fd;
} shared_map;

static void shared_unmap(void *ctx) {
    shared_map *m = ctx;
    munmap(m->addr, m->len);
    close(m->fd);
    cai_mem_free(m);
}

/* A mapping of len bytes of fd (taken by the mapping on success). */
static ca_status shared_map_fd(int fd, size_t len, const char *fn, shared_map **out) {
    *out = NULL;
    shared_map *m = cai_mem_calloc(1, sizeof *m);
    if (!m)
        return err_nomem("a shared memory mapping");
    m->addr = mmap(NULL, len ? len : 1, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (m->addr == MAP_FAILED) {
        int e = errno;
        cai_mem_free(m);
        return err_set(CA_STATUS_NOMEM, "%s: mapping %zu bytes of shared memory failed: %s", fn,
                       len, strerror(e));
    }
    m->len = len ? len : 1;
    m->fd = fd;
    *out = m;
    return CA_OK;
}

static const shared_map *storage_shared(const ca_storage *s) {
    return s->external && s->deleter == shared_unmap ? s->deleter_ctx : NULL;
}

bool ca_tensor_is_shared(const ca_tensor *t) {
    return t && storage_shared(t->storage);
}

ca_status ca_tensor_share_memory_(ca_tensor *t) {
    static const char fn[] = "ca_tensor_share_memory_";
    CA_CHECK(ca_init());
    CA_ARG_NOT_NULL(t, fn);
    ca_storage *s = t->storage;
    if (storage_shared(s))
        return CA_OK;
    int fd = memfd_create("cagrad", MFD_CLOEXEC);
    if (fd < 0 || ftruncate(fd, (off_t)(s->nbytes ? s->nbytes : 1)) != 0) {
        int e = errno;
        if (fd >= 0)
            close(fd);
        return err_set(CA_STATUS_NOMEM, "%s: making %zu bytes of shared memory failed: %s", fn,
                       s->nbytes, strerror(e));
    }
    shared_map *m = NULL;
    ca_status st = shared_map_fd(fd, s->nbytes, fn, &m);
    if (st != CA_OK) {
        close(fd);
        return st;
    }
    if (s->nbytes)
        memcpy(m->addr, s->data, s->nbytes);
    if (!s->external) /* the old bytes go back where they came from */
        cai_mem_data_free(s->data);
    else if (s->deleter)
        s->deleter(s->deleter_ctx);
    s->data = m->addr;
    s->external = true;
    s->deleter = shared_unmap;
    s->deleter_ctx = m;
    return CA_OK;
}

int ca_tensor_shared_fd(const ca_tensor *t, size_t *map_bytes, size_t *elem0_offset) {
    const shared_map *m = t ? storage_shared(t->storage) : NULL;
    if (!m)
        return -1;
    if (map_bytes)
        *map_bytes = m->len;
    if (elem0_offset)
        *elem0_offset = (size_t)((const char *)cai_tensor_ptr(t) - (const char *)m->addr);
    return m->fd;
}

ca_status ca_tensor_from_shared_fd(int fd, size_t map_bytes, size_t elem0_offset, ca_dtype dtype,
                                   int ndim, const int64_t *shape, const int64_t *strides,
                                   ca_tensor **out) {
    static const char fn[] = "ca_tensor_from_shared_fd";
    CA_ARG_NOT_NULL(out, fn);
    *out = NULL;
    CA_CHECK(ca_init());
    if (fd < 0 || elem0_offset > map_bytes)
        return err_set(CA_STATUS_INVALID,
                       "%s: descriptor %d with element 0 at byte %zu of %zu: pass the values "
                       "ca_tensor_shared_fd gave",
                       fn, fd, elem0_offset, map_bytes);
    int own = fcntl(fd, F_DUPFD_CLOEXEC, 0);
    if (own < 0)
        return err_set(CA_STATUS_INVALID, "%s: descriptor %d cannot be duplicated: %s", fn, fd,
                       strerror(errno));
    shared_map *m = NULL;
    ca_status st = shared_map_fd(own, map_bytes, fn, &m);
    if (st != CA_OK) {
        close(own);
        return st;
    }
    st = ca_tensor_from_blob(dtype, ndim, shape, strides, (char *)m->addr + elem0_offset,
                             shared_unmap, m, out);
    if (st != CA_OK) {
        shared_unmap(m);
        return st;
    }
    size_t need = (*out)->storage->nbytes; /* the view must lie inside the mapping */
    if (elem0_offset + need > m->len) {
        ca_tensor_release(*out);
        *out = NULL;
        return err_set(CA_STATUS_SHAPE,
                       "%s: a tensor of %zu bytes from byte %zu does not fit the %zu bytes "
                       "shared",
                       fn, need, elem0_offset, map_bytes);
    }
    return CA_OK;
}
