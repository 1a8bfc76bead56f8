// vllm_musa._C (stand-in): the host functions the module exposes. Upstream's csrc holds the
// MUSA kernels (.mu) and their torch bindings; these are plain C.
#ifndef VLLM_MUSA_KERNELS_H
#define VLLM_MUSA_KERNELS_H

#include <stddef.h>

double vllm_musa_dot(const double *a, const double *b, size_t n);
double vllm_musa_sum_squares(const double *x, size_t n);

#endif
