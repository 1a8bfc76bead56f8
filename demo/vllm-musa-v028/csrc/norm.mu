#include "kernels.h"

double vllm_musa_sum_squares(const double *x, size_t n) {
    double acc = 0.0;
    for (size_t i = 0; i < n; i++) {
        acc += x[i] * x[i];
    }
    return acc;
}
