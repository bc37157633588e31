// ZB_HOST_DEVICE marks small functions that both host code and CUDA kernels call.
#pragma once

#if defined(__CUDACC__)
#define ZB_HOST_DEVICE __host__ __device__
#else
#define ZB_HOST_DEVICE
#endif
