//! Loading a Hugging Face model directory: `config.json` plus `model.safetensors`
//! or a sharded `model.safetensors.index.json`, memory-mapped and converted to
//! f32 (from F32, F16 or BF16), except the 2-D F16/BF16 tensors a caller asks
//! to keep as they are stored (`load_tensors_keeping`).

use super::config::ModelConfig;
use super::tensor::{Tensor, TensorMap};
use crate::error::{EngineError, Result};
use crate::kernels::HalfMatrix;
use half::{bf16, f16};
use memmap2::Mmap;
use safetensors::{Dtype, SafeTensors};
use std::collections::BTreeSet;
use std::fs::File;
use std::path::Path;

pub fn read_config(dir: &Path) -> Result<ModelConfig> {
    let path = dir.join("config.json");
    let text = std::fs::read_to_string(&path).map_err(|e| EngineError::io(&path, e))?;
    ModelConfig::from_hf_json(&text)
}

/// The safetensors files of a model directory, in load order.
fn shard_files(dir: &Path) -> Result<Vec<std::path::PathBuf>> {
    let single = dir.join("model.safetensors");
    if single.is_file() {
        return Ok(vec![single]);
    }
    let index = dir.join("model.safetensors.index.json");
    let text = std::fs::read_to_string(&index).map_err(|_| {
        EngineError::Safetensors(format!(
            "{} has neither model.safetensors nor model.safetensors.index.json",
            dir.display()
        ))
    })?;
    let v: serde_json::Value =
        serde_json::from_str(&text).map_err(|e| EngineError::Safetensors(format!("{}: {e}", index.display())))?;
    let map = v
        .get("weight_map")
        .and_then(|m| m.as_object())
        .ok_or_else(|| EngineError::Safetensors(format!("{}: no weight_map", index.display())))?;
    let files: BTreeSet<String> = map.values().filter_map(|f| f.as_str().map(String::from)).collect();
    Ok(files.into_iter().map(|f| dir.join(f)).collect())
}

/// On drop, takes a copied tensor's mapped pages out of this process's
/// resident set, so that loading never holds the file and its copy at once
/// (peak RSS). Only a hint: errors are ignored.
struct Release<'a> {
    map: &'a Mmap,
    bytes: &'a [u8],
}

impl Drop for Release<'_> {
    fn drop(&mut self) {
        let offset = self.bytes.as_ptr() as usize - self.map.as_ptr() as usize;
        // SAFETY: the mapping is read-only and file-backed: MADV_DONTNEED only
        // unmaps its pages from this process, and a later read faults the same
        // file bytes back in, so no live reference (a neighbouring tensor on a
        // shared page) sees a change.
        let _ =
            unsafe { self.map.unchecked_advise_range(memmap2::UncheckedAdvice::DontNeed, offset, self.bytes.len()) };
    }
}

/// Every tensor of the directory, as f32.
pub fn load_tensors(dir: &Path) -> Result<TensorMap> {
    Ok(load_tensors_keeping(dir, &|_| false)?.0)
}

/// The tensors of the directory, as f32, except 2-D F16/BF16 tensors whose name
/// `keep` accepts: those come back as 16-bit matrices (exactly the values the
/// f32 conversion would give), and the map holds a shape-only
/// `Tensor::deferred` in their place.
pub fn load_tensors_keeping(dir: &Path, keep: &dyn Fn(&str) -> bool) -> Result<(TensorMap, Vec<(String, HalfMatrix)>)> {
    let mut out = TensorMap::new();
    let mut kept = Vec::new();
    for path in shard_files(dir)? {
        let file = File::open(&path).map_err(|e| EngineError::io(&path, e))?;
        // SAFETY: the file is opened read-only and not modified while mapped.
        let mmap = unsafe { Mmap::map(&file) }.map_err(|e| EngineError::io(&path, e))?;
        let st = SafeTensors::deserialize(&mmap)
            .map_err(|e| EngineError::Safetensors(format!("{}: {e}", path.display())))?;
        for (name, view) in st.tensors() {
            let bytes = view.data();
            let _release = Release { map: &mmap, bytes };
            let shape = view.shape().to_vec();
            let half = matches!(view.dtype(), Dtype::F16 | Dtype::BF16);
            if half && shape.len() == 2 && keep(&name) {
                let m = HalfMatrix::from_le_bytes(shape[0], shape[1], bytes, view.dtype() == Dtype::BF16).ok_or_else(
                    || EngineError::Safetensors(format!("{}: {name}: size does not match its shape", path.display())),
                )?;
                out.insert(name.clone(), Tensor::deferred(shape));
                kept.push((name, m));
                continue;
            }
            let data: Vec<f32> = match view.dtype() {
                Dtype::F32 => bytes.chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect(),
                Dtype::F16 => bytes.chunks_exact(2).map(|b| f16::from_le_bytes([b[0], b[1]]).to_f32()).collect(),
                Dtype::BF16 => bytes.chunks_exact(2).map(|b| bf16::from_le_bytes([b[0], b[1]]).to_f32()).collect(),
                other => {
                    return Err(EngineError::UnsupportedTensorType { name, ty: format!("{other:?}") });
                }
            };
            out.insert(name, Tensor::new(shape, data));
        }
    }
    Ok((out, kept))
}
