// Op determinism: a model loaded twice computes the same bits on the same machine.
//
// Some choices are timed when a plan compiles: threads per step (exec/thread_choice.h), the
// fp32 GEMM backend on AVX2 (kernels/cpu/gemm_backend.h) and Winograd against direct 3x3
// convolution (kernels/cpu/nn_conv_winograd.h). Under load two compiles of one model can
// time differently, and GEMM backends and Winograd round differently (within float error),
// so two loads (two replicas, or the two models `kiln compress` compares) may differ in the
// last bits. With op determinism on, those choices follow fixed rules instead of timings,
// as tf.config.experimental.enable_op_determinism() does for TensorFlow's autotuned ops.
// Explicit overrides (KILN_THREAD_CHOICE=one, KILN_GEMM_BACKEND=..., KILN_CONV_WINOGRAD=1)
// are fixed rules too and still apply.
#pragma once

namespace kiln {

// Turns op determinism on for this process (it cannot be turned off: plans compiled before
// and after would disagree). Call before models are loaded.
void EnableOpDeterminism();

// On after EnableOpDeterminism() or with TF_DETERMINISTIC_OPS=1 (or "true") in the
// environment, TensorFlow's variable for the same switch.
bool OpDeterminismEnabled();

}  // namespace kiln
