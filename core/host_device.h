// ZB_HOST_DEVICE marks small functions that both host code and CUDA kernels call.
#pragma once

#if defined(__CUDACC__)
#define ZB_HOST_DEVICE __host__ __device__
#else
#define ZB_HOST_DEVICE
#endif

// Unrolls the loop that follows, in device code and in GCC's (small arrays indexed by its counter then stay in
// registers); nothing in nvcc's host pass, whose front end knows neither pragma for its host compiler.
#if defined(__CUDA_ARCH__)
#define ZB_UNROLL _Pragma("unroll")
#elif defined(__CUDACC__)
#define ZB_UNROLL
#else
#define ZB_UNROLL _Pragma("GCC unroll 8")
#endif
