/* musa_runtime.h (stand-in): the part of the MUSA runtime API the demo compiles against.
 * The real header comes with the MUSA SDK ($MUSA_HOME/include); this one declares what the
 * image's musa-jit gate calls, implemented by the stand-in libmusart.so.5 (../musart.c). */
#ifndef VLLM_MUSA_STANDIN_MUSA_RUNTIME_H
#define VLLM_MUSA_STANDIN_MUSA_RUNTIME_H

#ifdef __cplusplus
extern "C" {
#endif

typedef enum musaError {
    musaSuccess = 0,
    musaErrorNoDevice = 100,
} musaError_t;

musaError_t musaGetDeviceCount(int *count);

#ifdef __cplusplus
}
#endif

#endif
