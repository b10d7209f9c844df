//! GGUF tensor names to Hugging Face names, and the inverse of llama.cpp's
//! Q/K row permutation for arch `llama`. Owns nothing else: no I/O, no decoding.

/// The Hugging Face name of a GGUF tensor (`blk.3.attn_q.weight` →
/// `model.layers.3.self_attn.q_proj.weight`), or `None` for a name this
/// engine does not map (such tensors keep their GGUF name).
pub fn hf_name(gguf: &str) -> Option<String> {
    match gguf {
        "token_embd.weight" => return Some("model.embed_tokens.weight".into()),
        "output_norm.weight" => return Some("model.norm.weight".into()),
        "output.weight" => return Some("lm_head.weight".into()),
        _ => {}
    }
    let rest = gguf.strip_prefix("blk.")?;
    let (layer, rest) = rest.split_once('.')?;
    if layer.is_empty() || !layer.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let (module, suffix) = rest.rsplit_once('.')?;
    if suffix != "weight" && suffix != "bias" {
        return None;
    }
    let hf = match module {
        "attn_q" => "self_attn.q_proj",
        "attn_k" => "self_attn.k_proj",
        "attn_v" => "self_attn.v_proj",
        "attn_output" => "self_attn.o_proj",
        "attn_q_norm" => "self_attn.q_norm",
        "attn_k_norm" => "self_attn.k_norm",
        "ffn_gate" => "mlp.gate_proj",
        "ffn_up" => "mlp.up_proj",
        "ffn_down" => "mlp.down_proj",
        "attn_norm" => "input_layernorm",
        "ffn_norm" => "post_attention_layernorm",
        _ => return None,
    };
    Some(format!("model.layers.{layer}.{hf}.{suffix}"))
}

/// Which llama.cpp permutation a GGUF tensor carries, by name: `Some(true)`
/// for a query projection, `Some(false)` for a key projection.
pub fn qk_kind(gguf: &str) -> Option<bool> {
    let rest = gguf.strip_prefix("blk.")?;
    let (_, rest) = rest.split_once('.')?;
    match rest {
        "attn_q.weight" | "attn_q.bias" => Some(true),
        "attn_k.weight" | "attn_k.bias" => Some(false),
        _ => None,
    }
}

/// Undoes convert_hf_to_gguf's `permute` of a row-major `[rows, cols]` matrix
/// (a bias is `cols == 1`). The converter stores, within each head of
/// `rows / n_head` rows, the HF row `j * half + i` at position `2 * i + j`
/// (`i < half`, `j < 2`): it interleaves the two halves that a split-half
/// (NEOX/HF) RoPE rotates together. `None` if the rows do not divide into
/// heads of even size.
pub fn unpermute_rows<T: Copy + Default>(data: &[T], rows: usize, cols: usize, n_head: usize) -> Option<Vec<T>> {
    if n_head == 0 || !rows.is_multiple_of(n_head) || !(rows / n_head).is_multiple_of(2) || data.len() != rows * cols {
        return None;
    }
    let head_dim = rows / n_head;
    let half = head_dim / 2;
    let mut out = vec![T::default(); data.len()];
    for h in 0..n_head {
        for i in 0..half {
            for j in 0..2 {
                let src = h * head_dim + 2 * i + j;
                let dst = h * head_dim + j * half + i;
                out[dst * cols..(dst + 1) * cols].copy_from_slice(&data[src * cols..(src + 1) * cols]);
            }
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn maps_every_llama_and_qwen3_tensor() {
        let cases = [
            ("token_embd.weight", "model.embed_tokens.weight"),
            ("output_norm.weight", "model.norm.weight"),
            ("output.weight", "lm_head.weight"),
            ("blk.0.attn_q.weight", "model.layers.0.self_attn.q_proj.weight"),
            ("blk.12.attn_k.weight", "model.layers.12.self_attn.k_proj.weight"),
            ("blk.1.attn_v.weight", "model.layers.1.self_attn.v_proj.weight"),
            ("blk.1.attn_output.weight", "model.layers.1.self_attn.o_proj.weight"),
            ("blk.2.attn_q_norm.weight", "model.layers.2.self_attn.q_norm.weight"),
            ("blk.2.attn_k_norm.weight", "model.layers.2.self_attn.k_norm.weight"),
            ("blk.3.ffn_gate.weight", "model.layers.3.mlp.gate_proj.weight"),
            ("blk.3.ffn_up.weight", "model.layers.3.mlp.up_proj.weight"),
            ("blk.3.ffn_down.weight", "model.layers.3.mlp.down_proj.weight"),
            ("blk.4.attn_norm.weight", "model.layers.4.input_layernorm.weight"),
            ("blk.4.ffn_norm.weight", "model.layers.4.post_attention_layernorm.weight"),
            ("blk.5.attn_q.bias", "model.layers.5.self_attn.q_proj.bias"),
        ];
        for (g, h) in cases {
            assert_eq!(hf_name(g).as_deref(), Some(h), "{g}");
        }
        for g in ["rope_freqs.weight", "blk.x.attn_q.weight", "blk.1.attn_q.scale", "blk..attn_q.weight"] {
            assert_eq!(hf_name(g), None, "{g}");
        }
        assert_eq!(qk_kind("blk.7.attn_q.weight"), Some(true));
        assert_eq!(qk_kind("blk.7.attn_k.weight"), Some(false));
        assert_eq!(qk_kind("blk.7.attn_q_norm.weight"), None);
    }

    /// The converter's permute, written as in convert_hf_to_gguf (reshape to
    /// [n_head, 2, half, cols], swap axes 1 and 2), undone by `unpermute_rows`.
    #[test]
    fn unpermute_inverts_the_converter_permute() {
        let (n_head, head_dim, cols) = (3, 8, 2);
        let rows = n_head * head_dim;
        let half = head_dim / 2;
        let hf: Vec<f32> = (0..rows * cols).map(|x| x as f32).collect();
        let mut permuted = vec![0f32; hf.len()];
        // permuted[h, i, j, :] = hf[h, j, i, :]  (shape [n_head, half, 2, cols])
        for h in 0..n_head {
            for i in 0..half {
                for j in 0..2 {
                    for c in 0..cols {
                        permuted[((h * half + i) * 2 + j) * cols + c] = hf[((h * 2 + j) * half + i) * cols + c];
                    }
                }
            }
        }
        assert_ne!(permuted, hf);
        assert_eq!(unpermute_rows(&permuted, rows, cols, n_head), Some(hf));
        assert_eq!(unpermute_rows(&permuted, rows, cols, 5), None);
    }
}
