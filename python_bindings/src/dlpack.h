/* dlpack.h - the DLPack ABI (https://dmlc.github.io/dlpack/), written from the
 * specification: the structs a producer and a consumer exchange in a PyCapsule.
 *
 * Capsule names: "dltensor" holds a DLManagedTensor, "dltensor_versioned" (DLPack >= 1.0) a
 * DLManagedTensorVersioned. A consumer renames the capsule it consumes to "used_dltensor"
 * or "used_dltensor_versioned" and later calls the struct's deleter; a capsule destroyed
 * under its original name was never consumed, so its destructor calls the deleter.
 */
#ifndef CAGRAD_DLPACK_H
#define CAGRAD_DLPACK_H

#include <stdint.h>

/* The version cagrad produces; the struct layout is the same for every 1.x. */
#define DLPACK_MAJOR_VERSION 1
#define DLPACK_MINOR_VERSION 0

typedef enum {
    kDLCPU = 1,
    kDLCUDA = 2,
    kDLCUDAHost = 3,
} DLDeviceType; /* only the values cagrad names; others exist */

typedef struct {
    DLDeviceType device_type;
    int32_t device_id;
} DLDevice;

typedef enum {
    kDLInt = 0,
    kDLUInt = 1,
    kDLFloat = 2,
    kDLOpaqueHandle = 3,
    kDLBfloat = 4,
    kDLComplex = 5,
    kDLBool = 6,
} DLDataTypeCode;

typedef struct {
    uint8_t code; /* a DLDataTypeCode */
    uint8_t bits;
    uint16_t lanes;
} DLDataType;

typedef struct {
    void *data; /* element (0, ..., 0) is at data + byte_offset */
    DLDevice device;
    int32_t ndim;
    DLDataType dtype;
    int64_t *shape;
    int64_t *strides; /* in elements; NULL means compact row-major */
    uint64_t byte_offset;
} DLTensor;

typedef struct DLManagedTensor {
    DLTensor dl_tensor;
    void *manager_ctx;
    void (*deleter)(struct DLManagedTensor *self); /* may be NULL */
} DLManagedTensor;

typedef struct {
    uint32_t major;
    uint32_t minor;
} DLPackVersion;

#define DLPACK_FLAG_BITMASK_READ_ONLY (1ULL << 0)
#define DLPACK_FLAG_BITMASK_IS_COPIED (1ULL << 1)

typedef struct DLManagedTensorVersioned {
    DLPackVersion version;
    void *manager_ctx;
    void (*deleter)(struct DLManagedTensorVersioned *self); /* may be NULL */
    uint64_t flags;
    DLTensor dl_tensor;
} DLManagedTensorVersioned;

_Static_assert(sizeof(DLDevice) == 8, "DLDevice is two 32-bit ints");
_Static_assert(sizeof(DLDataType) == 4, "DLDataType is packed into 32 bits");

#endif /* CAGRAD_DLPACK_H */
