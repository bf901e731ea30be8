// The fused softmax and cross-entropy of a language model's loss on the CPU.
// Conventions as every kernel of kernels/cpu (kernels/README.md): forward kernels overwrite their outputs, backward
// kernels add (+=) into every gradient; row counts may be 0.
#pragma once

#include <cstdint>

namespace strata::cpu {

// Fused softmax + cross-entropy over logits[N,V], every target in [0, V):
// losses[i] = -log softmax(logits[i])[targets[i]] (natural log, max-subtracted, sums in double);
// dlogits[i,:] = (softmax(logits[i]) - onehot(targets[i])) * dscale, written (not added). dlogits may equal
// logits (in place), or be null to compute only the losses.
void crossentropy_softmax(float* losses, float* dlogits, const float* logits, const int32_t* targets, int N, int V,
                          float dscale);

}  // namespace strata::cpu
