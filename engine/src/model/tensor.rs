//! A dense, row-major f32 tensor as loaded from a checkpoint (the CPU compute
//! dtype). Shapes follow Hugging Face conventions: a linear weight is
//! `[out_features, in_features]`.

#[derive(Debug, Clone, PartialEq)]
pub struct Tensor {
    pub shape: Vec<usize>,
    pub data: Vec<f32>,
}

impl Tensor {
    pub fn new(shape: Vec<usize>, data: Vec<f32>) -> Self {
        debug_assert_eq!(shape.iter().product::<usize>(), data.len());
        Tensor { shape, data }
    }

    /// A tensor whose values are supplied elsewhere: its shape, no data.
    pub fn deferred(shape: Vec<usize>) -> Self {
        Tensor { shape, data: Vec::new() }
    }

    pub fn numel(&self) -> usize {
        self.data.len()
    }
}

/// Tensors by Hugging Face name (e.g. `model.layers.0.self_attn.q_proj.weight`).
pub type TensorMap = std::collections::HashMap<String, Tensor>;
