/* Demo stand-ins for the MUSA kernels: plain C, compiled by the COMPILER parameter via ccache. */
#ifndef VLLM_MUSA_DEMO_KERNELS_H
#define VLLM_MUSA_DEMO_KERNELS_H
#include <stddef.h>
double vllm_musa_dot(const double *a, const double *b, size_t n);
double vllm_musa_softmax_max(const double *x, size_t n);
#endif
