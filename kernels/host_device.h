// BATON_HOST_DEVICE marks a function that both the GPU's kernels and plain C++ (host code, the
// CPU tests) call: `__host__ __device__` under nvcc, nothing elsewhere. Headers that use it
// include no CUDA header of their own, so their logic is compiled and tested in every build.
//
// BATON_UNROLL before a loop of constant trip count asks nvcc to unroll it (so that the arrays
// it indexes stay in registers); host compilers see nothing.
#ifndef BATON_KERNELS_HOST_DEVICE_H_
#define BATON_KERNELS_HOST_DEVICE_H_

#if defined(__CUDACC__)
#define BATON_HOST_DEVICE __host__ __device__
#define BATON_UNROLL _Pragma("unroll")
#else
#define BATON_HOST_DEVICE
#define BATON_UNROLL
#endif

#endif  // BATON_KERNELS_HOST_DEVICE_H_
