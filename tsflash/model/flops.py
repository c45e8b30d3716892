"""FLOPs of training the causal transformer: the one rule behind the engine's TFLOP/s per cell and
`tsflash bench`'s TFLOP/s and MFU.

What is counted: model FLOPs, the matrix products the model needs (as in PaLM's model FLOPs
utilisation, Chowdhery et al. 2022, appendix B). One multiply-add is 2 FLOPs. Softmax, masking,
norms and activations are not matrix products and are left out. Per token, with P parameters,
L layers, width d = d_model (all heads together, d = heads * head_dim) and context N:

Weights. Each parameter is one multiply-add per token in the forward pass (2 FLOPs) and two in
the backward (the gradient with respect to the input and the one with respect to the weight,
4 FLOPs): 6 P per token, forward + backward.

Attention (per layer). A query at position t meets the t + 1 keys at or before it (causal mask);
averaged over a window of N positions that is N/2 keys, which is also what fused causal kernels
compute (they skip the masked blocks)::

    scores  Q K^T   2 * d * (N/2)     one d-long dot product per visible key
    values  P V     2 * d * (N/2)     one d-long weighted sum per visible key
    forward         4 * d * (N/2) = 2 * d * N
    backward        2 x forward       (dQ = dS K, dK = dS^T Q, dP = dO V^T, dV = P^T dO: two
                                       products per forward product, each the same size)
    fwd + bwd       3 x forward = 6 * d * N

So ``flops_per_token = 6 P + 6 L d N`` (= 6 P + 12 L d (N/2)).

Fused kernels (FlashAttention, cuDNN) recompute Q K^T in the backward pass instead of storing
the N x N scores, and so execute 3.5 x forward ("hardware FLOPs"; FlashAttention's own
benchmark counts its backward as 2.5 x forward). That recomputation is the kernel's way of
saving memory, not work the model needs, so it is not counted: with it, a kernel that recomputed
more would look faster. Bench files whose settings say "fwd+bwd = 3.5x fwd" (or
"L*3.5*2*B*N^2*d_model") were written with the older 6 P + 7 L d N: their TFLOP/s and MFU are up
to 7/6 of this rule's (the ratio at long N). The engine's per-cell TFLOP/s always used this rule.

Standard library only.
"""

from __future__ import annotations

FWD_BWD = 3.0  # forward + backward FLOPs / forward FLOPs of a matrix product (backward = 2 x forward)


def attention_forward_flops(batch: int, heads: int, n: int, head_dim: int) -> float:
    """Causal attention forward FLOPs: 2 * B * H * N^2 * head_dim (half of the dense 4 * B * H * N^2 * hd).

    Forward + backward is `FWD_BWD` times this.
    """
    return 2.0 * batch * heads * n * n * head_dim


def flops_per_token(n_params: int, n_layers: int, d_model: int, n: int, patch: int = 1) -> float:
    """Training FLOPs (forward + backward) per token at context length n: 6 P + 6 L d N (module doc).

    With patch tokens (`patch` = p > 1) n counts bars and the quantity is per bar: the model's own
    tokens are n / p a window, so it is the rule at context n / p, divided by p."""
    tokens = n // patch
    attention = FWD_BWD * n_layers * attention_forward_flops(1, 1, tokens, d_model) / tokens  # 6 * L * d * N
    return (6.0 * n_params + attention) / patch
