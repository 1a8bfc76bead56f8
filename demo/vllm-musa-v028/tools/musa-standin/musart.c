/* libmusart (stand-in): the MUSA runtime with no device. setup.py builds it as
 * lib/libmusart.so.5 (soname libmusart.so.5) with the link name lib/libmusart.so. */
#include "musa_runtime.h"

musaError_t musaGetDeviceCount(int *count) {
    *count = 0;
    return musaErrorNoDevice;
}
