"""Flax linen building blocks of the encoder; no training code.

Shape letters in comments and einsum strings: b batch, s sequence, q and k query and key
positions, h heads, d head dim (hidden / heads), m hidden (model width), f MLP width
(intermediate), v vocabulary, p predicted (masked) positions.

Logical axis names, for the mesh strategy's layout (`encoder.train.sharding`): parameters use
`vocab`, `embed`, `heads`, `kv`, `mlp` (`embed_out` for a second hidden axis); activations use
`batch`, `length`, `embed`, `mlp`. Outside a mesh (one device, pmap) the names do nothing.
"""
