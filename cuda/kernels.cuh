// Device kernels of the CUDA backend (included by kernels.cu only; their
// launchers are declared in launch.h). Plain kernels, written for
// correctness first: each is a short loop that can be read against the CPU
// backend (lib/cpu/cpu_backend.cpp), whose semantics they follow. The heavy
// products go to cuBLAS (cuda_backend.cpp); what is here is elementwise
// work, gathers, normalisation and attention.
//
// Launch rules shared by every kernel here: blockDim.x is a multiple of 32
// (warp reductions use full masks), and row or element loops are
// grid-stride, so any grid size is correct.
//
// The kernels are in one header per family, all compiled in kernels.cu's
// one translation unit, in this order (each uses only those above it):
//   kernels_common.cuh          launch constants, the small device helpers
//   kernels_elementwise.cuh     embedding, widening, norms, bias, SwiGLU,
//                               RoPE and the KV writes
//   kernels_topk.cuh            argmax and top-k of rows
//   kernels_merge.cuh           merging partial rows (split problems and
//                               partial attention rows)
//   kernels_products.cuh        few-row products (gemv)
//   kernels_attention.cuh       attention in FP32
//   kernels_attention_mma.cuh   attention on tensor cores (WMMA)
//   kernels_attention_reg.cuh   attention on tensor cores, accumulators in
//                               registers
#pragma once

#include "kernels_common.cuh"
#include "kernels_elementwise.cuh"
#include "kernels_topk.cuh"
#include "kernels_merge.cuh"
#include "kernels_products.cuh"
#include "kernels_attention.cuh"
#include "kernels_attention_mma.cuh"
#include "kernels_attention_reg.cuh"
