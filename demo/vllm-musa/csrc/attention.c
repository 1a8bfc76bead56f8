#include "kernels.h"

double vllm_musa_softmax_max(const double *x, size_t n) {
    double best = n ? x[0] : 0.0;
    for (size_t i = 1; i < n; i++) {
        if (x[i] > best) {
            best = x[i];
        }
    }
    return best;
}
