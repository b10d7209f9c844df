//! The forward pass on a synthetic Qwen3 model: logits against the independent
//! numpy reference, batch invariance (alone vs batched vs chunked vs decode),
//! and proof that unwritten KV slots are never read.

use crate::common;

use engine::kv::{KvCache, KvFormat, ValueScales};
use engine::model::{LogitsWanted, Model, SeqInput, load};
use engine::runtime::{Engine, EngineOptions};
use engine::synth::{SynthSpec, SynthTokenizer, write_model};

fn synth_dir(arch: engine::model::Arch) -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("tempdir");
    let spec = SynthSpec { arch, tokenizer: SynthTokenizer::ByteLevel, seed: 7, ..SynthSpec::default() };
    write_model(&spec, dir.path()).expect("synth");
    dir
}

fn cache_for(model: &Model, format: KvFormat, blocks: usize) -> KvCache {
    let c = &model.config;
    let scales = ValueScales { rule: "test".into(), scales: vec![0.01; c.num_hidden_layers] };
    KvCache::new_poisoned(format, c.num_hidden_layers, c.num_key_value_heads, c.head_dim, blocks, Some(&scales))
        .unwrap()
}

fn prompt(n: usize, salt: u32) -> Vec<u32> {
    (0..n as u32).map(|i| 3 + (i * 37 + salt * 11) % 250).collect()
}

/// Logits of every position of `ids`, computed in one prefill.
fn all_logits(model: &Model, cache: &mut KvCache, ids: &[u32]) -> Vec<Vec<f32>> {
    let mut t = cache.new_table();
    assert!(t.reserve(ids.len()));
    let mut out =
        model.forward(cache, &mut [SeqInput { tokens: ids, table: &mut t, logits: LogitsWanted::All }], None).unwrap();
    out.remove(0)
}

#[test]
fn qwen3_logits_match_numpy_reference() {
    let dir = synth_dir(engine::model::Arch::Qwen3);
    let model = load(dir.path()).unwrap().model;
    let ids = prompt(45, 1); // crosses two page boundaries (16, 32)
    let mut cache = cache_for(&model, KvFormat::F16, 8);
    let ours = all_logits(&model, &mut cache, &ids);
    let reference = common::python_json(
        "forward.py",
        &[
            "--hf-dir".into(),
            dir.path().display().to_string(),
            "--ids".into(),
            common::ids_arg(&ids),
            "--logits".into(),
            "all".into(),
        ],
    );
    let rows = reference["logits"].as_array().expect("logits");
    assert_eq!(rows.len(), ids.len());
    let mut max_err = 0.0f64;
    let mut max_abs = 0.0f64;
    for (p, row) in rows.iter().enumerate() {
        let want = common::f64s(row);
        for (v, &w) in want.iter().enumerate() {
            max_err = max_err.max((ours[p][v] as f64 - w).abs());
            max_abs = max_abs.max(w.abs());
        }
        let argmax_ref = want.iter().enumerate().max_by(|a, b| a.1.total_cmp(b.1)).unwrap().0;
        let ours_row = &ours[p];
        let argmax_ours = ours_row.iter().enumerate().max_by(|a, b| a.1.total_cmp(b.1)).unwrap().0;
        assert_eq!(argmax_ours, argmax_ref, "argmax differs at position {p}");
    }
    // Tolerance: the reference is float64 with unrounded K/V; the engine computes
    // in f32 and stores K/V as f16 (relative rounding 2^-11). The random model's
    // logits are large (tens), so the bound is relative to the largest logit:
    // 5e-4 of it, about four times the difference observed.
    eprintln!("max |logit diff| = {max_err:.3e} (max |logit| {max_abs:.3})");
    assert!(max_err < 5e-4 * max_abs, "max logit difference {max_err} exceeds 5e-4 x {max_abs}");
}

#[test]
fn llama_logits_match_numpy_reference() {
    let dir = synth_dir(engine::model::Arch::Llama);
    let model = load(dir.path()).unwrap().model;
    let ids = prompt(40, 2);
    let mut cache = cache_for(&model, KvFormat::F16, 8);
    let ours = all_logits(&model, &mut cache, &ids);
    let reference = common::python_json(
        "forward.py",
        &[
            "--hf-dir".into(),
            dir.path().display().to_string(),
            "--ids".into(),
            common::ids_arg(&ids),
            "--logits".into(),
            "last".into(),
        ],
    );
    let want = common::f64s(&reference["logits_last"]);
    let last = ours.last().unwrap();
    let max_err = want.iter().zip(last).map(|(w, &o)| (o as f64 - w).abs()).fold(0.0, f64::max);
    let max_abs = want.iter().fold(0.0f64, |a, w| a.max(w.abs()));
    eprintln!("llama max |logit diff| = {max_err:.3e} (max |logit| {max_abs:.3})");
    assert!(max_err < 5e-4 * max_abs, "max logit difference {max_err} exceeds 5e-4 x {max_abs}");
}

#[test]
fn results_do_not_depend_on_batch_chunking_or_decode() {
    let dir = synth_dir(engine::model::Arch::Qwen3);
    let model = load(dir.path()).unwrap().model;
    for format in [KvFormat::F16, KvFormat::Bf16, KvFormat::K16v8] {
        let a = prompt(50, 3);
        let b = prompt(23, 4);
        let c = prompt(7, 5);
        let mut cache = cache_for(&model, format, 64);
        let alone = all_logits(&model, &mut cache, &a);
        for row in &alone {
            assert!(row.iter().all(|v| v.is_finite()), "{format}: non-finite logits (an unwritten slot was read?)");
        }

        // Batched with two other sequences.
        let (mut ta, mut tb, mut tc) = (cache.new_table(), cache.new_table(), cache.new_table());
        assert!(ta.reserve(50) && tb.reserve(23) && tc.reserve(7));
        let out = model
            .forward(
                &mut cache,
                &mut [
                    SeqInput { tokens: &b, table: &mut tb, logits: LogitsWanted::Last },
                    SeqInput { tokens: &a, table: &mut ta, logits: LogitsWanted::All },
                    SeqInput { tokens: &c, table: &mut tc, logits: LogitsWanted::None },
                ],
                None,
            )
            .unwrap();
        assert_eq!(out[1], alone, "{format}: batched logits differ from solo");

        // Chunked prefill (17 + 20 tokens) then decode steps, interleaved with others.
        let mut t = cache.new_table();
        assert!(t.reserve(50));
        let mut chunked = model
            .forward(&mut cache, &mut [SeqInput { tokens: &a[..17], table: &mut t, logits: LogitsWanted::All }], None)
            .unwrap()
            .remove(0);
        let mut other = cache.new_table();
        assert!(other.reserve(30));
        let out = model
            .forward(
                &mut cache,
                &mut [
                    SeqInput { tokens: &a[17..37], table: &mut t, logits: LogitsWanted::All },
                    SeqInput { tokens: &b[..20], table: &mut other, logits: LogitsWanted::Last },
                ],
                None,
            )
            .unwrap();
        chunked.extend(out.into_iter().next().unwrap());
        for &tok in &a[37..] {
            let out = model
                .forward(
                    &mut cache,
                    &mut [SeqInput { tokens: &[tok], table: &mut t, logits: LogitsWanted::Last }],
                    None,
                )
                .unwrap();
            chunked.extend(out.into_iter().next().unwrap());
        }
        assert_eq!(chunked, alone, "{format}: chunked/decode logits differ from one prefill");
    }
}

#[test]
fn formats_differ_slightly() {
    let dir = synth_dir(engine::model::Arch::Qwen3);
    let loaded = load(dir.path()).unwrap();
    let ids = prompt(40, 6);
    let opts = EngineOptions { kv_budget_bytes: 8 << 20, ..EngineOptions::default() };
    let mut e = Engine::new(loaded.model, loaded.tokenizer, &opts).unwrap();
    let scales = e.calibrate(&prompt(64, 9)).unwrap();
    let model = &e.model;
    let c = &model.config;
    let f16 = all_logits(model, &mut cache_for(model, KvFormat::F16, 8), &ids);
    let max_abs = f16.iter().flatten().fold(0.0f32, |a, v| a.max(v.abs()));
    for format in [KvFormat::Bf16, KvFormat::K16v8] {
        let mut cache =
            KvCache::new(format, c.num_hidden_layers, c.num_key_value_heads, c.head_dim, 8, Some(&scales)).unwrap();
        let other = all_logits(model, &mut cache, &ids);
        let diff = f16.iter().flatten().zip(other.iter().flatten()).map(|(a, b)| (a - b).abs()).fold(0.0f32, f32::max);
        eprintln!("{format}: max |logit - f16 logit| = {diff} (max |logit| {max_abs})");
        assert!(diff > 0.0 && diff < 0.05 * max_abs, "{format}: max logit difference to f16 is {diff}");
    }
}

#[test]
fn a_table_without_room_is_an_error_not_a_panic() {
    let dir = synth_dir(engine::model::Arch::Qwen3);
    let model = load(dir.path()).unwrap().model;
    let mut cache = cache_for(&model, KvFormat::F16, 4);
    let mut t = cache.new_table();
    assert!(t.reserve(10));
    let ids = prompt(20, 1);
    let e =
        model.forward(&mut cache, &mut [SeqInput { tokens: &ids, table: &mut t, logits: LogitsWanted::Last }], None);
    assert!(e.err().unwrap().to_string().contains("needs 20"));
    let bad = [100_000u32];
    let e =
        model.forward(&mut cache, &mut [SeqInput { tokens: &bad, table: &mut t, logits: LogitsWanted::Last }], None);
    assert!(e.err().unwrap().to_string().contains("outside the vocabulary"));
}

#[test]
fn sixteen_bit_checkpoints_keep_their_weights_and_give_the_f32_models_bits() {
    use engine::kernels::{CpuPath, Kernels, QuantMatmul};
    use engine::model::safetensors_dir::{load_tensors, read_config};
    use engine::synth::SynthDtype;
    for (dtype, name) in [(SynthDtype::Bf16, "bf16"), (SynthDtype::F16, "f16")] {
        let dir = tempfile::tempdir().expect("tempdir");
        let spec = SynthSpec { tokenizer: SynthTokenizer::ByteLevel, seed: 11, dtype, ..SynthSpec::default() };
        write_model(&spec, dir.path()).expect("synth");
        let mut kept = load(dir.path()).unwrap().model;
        let mut widened =
            Model::from_tensors(read_config(dir.path()).unwrap(), load_tensors(dir.path()).unwrap()).unwrap();
        // 7 per layer and the tied head, all 16-bit; lookups read the head's rows.
        let layers = kept.config.num_hidden_layers;
        assert_eq!(kept.weight_dtypes().into_iter().collect::<Vec<_>>(), vec![(name, 7 * layers + 1)]);
        assert!(kept.weight_layouts().1, "{name}: embedding lookups should read the tied head");
        assert_eq!(widened.weight_dtypes().into_iter().collect::<Vec<_>>(), vec![("f32", 7 * layers)]);
        let ids = prompt(37, 3);
        for path in CpuPath::supported() {
            let kernels = Kernels::new(path, QuantMatmul::default()).unwrap();
            kept.set_kernels(kernels);
            widened.set_kernels(kernels);
            let a = all_logits(&kept, &mut cache_for(&kept, KvFormat::F16, 8), &ids);
            let b = all_logits(&widened, &mut cache_for(&widened, KvFormat::F16, 8), &ids);
            let same = a.iter().flatten().zip(b.iter().flatten()).all(|(x, y)| x.to_bits() == y.to_bits());
            assert!(same, "{name} on {path}: the 16-bit model's logits differ from the f32 model's");
            eprintln!("{name} on {path}: {} logits bit-identical", a.len() * a[0].len());
        }
    }
}

#[test]
fn a_tied_checkpoint_that_ships_lm_head_keeps_its_head_16_bit_and_looks_up_f32_rows() {
    use engine::model::safetensors_dir::{load_tensors, read_config};
    use safetensors::SafeTensors;
    use safetensors::tensor::TensorView;
    let dir = synth_dir(engine::model::Arch::Qwen3);
    // Add `lm_head.weight` (a copy of the embedding matrix) to a checkpoint whose
    // config still says tie_word_embeddings = true, as some published ones do.
    let path = dir.path().join("model.safetensors");
    let bytes = std::fs::read(&path).unwrap();
    let st = SafeTensors::deserialize(&bytes).unwrap();
    let mut views: Vec<(String, TensorView<'_>)> = st.tensors();
    let embed = st.tensor("model.embed_tokens.weight").unwrap();
    views
        .push(("lm_head.weight".into(), TensorView::new(embed.dtype(), embed.shape().to_vec(), embed.data()).unwrap()));
    let out = dir.path().join("with-head.safetensors");
    safetensors::serialize_to_file(views, None, &out).unwrap();
    std::fs::rename(&out, &path).unwrap();

    let kept = load(dir.path()).expect("a tied config with its own lm_head loads").model;
    let widened = Model::from_tensors(read_config(dir.path()).unwrap(), load_tensors(dir.path()).unwrap()).unwrap();
    let layers = kept.config.num_hidden_layers;
    assert_eq!(kept.weight_dtypes().into_iter().collect::<Vec<_>>(), vec![("bf16", 7 * layers + 1)]);
    assert!(!kept.weight_layouts().1, "lookups should read their own f32 rows, not the head");
    let ids = prompt(21, 5);
    let a = all_logits(&kept, &mut cache_for(&kept, KvFormat::F16, 8), &ids);
    let b = all_logits(&widened, &mut cache_for(&widened, KvFormat::F16, 8), &ids);
    assert!(a.iter().flatten().zip(b.iter().flatten()).all(|(x, y)| x.to_bits() == y.to_bits()));
}

#[test]
fn linear_work_counts_every_linear_layer_and_the_tied_head() {
    use engine::model::safetensors_dir::{load_tensors, read_config};
    let dir = synth_dir(engine::model::Arch::Qwen3);
    let kept = load(dir.path()).unwrap().model;
    let widened = Model::from_tensors(read_config(dir.path()).unwrap(), load_tensors(dir.path()).unwrap()).unwrap();
    let c = &kept.config;
    let (h, q, kv) = (c.hidden_size, c.num_attention_heads * c.head_dim, c.num_key_value_heads * c.head_dim);
    let per_layer = h * q + 2 * h * kv + q * h + 3 * h * c.intermediate_size;
    let head = (c.vocab_size * h) as u64;
    let macs = (c.num_hidden_layers * per_layer) as u64 + head;
    // BF16 weights and the stored tied head: 2 bytes a value.
    let w = kept.linear_work();
    assert_eq!((w.macs, w.weight_bytes, w.lm_head_macs, w.lm_head_weight_bytes), (macs, 2 * macs, head, 2 * head));
    // Widened to f32, the head reads the f32 embedding matrix: 4 bytes a value.
    let w = widened.linear_work();
    assert_eq!((w.macs, w.weight_bytes, w.lm_head_macs, w.lm_head_weight_bytes), (macs, 4 * macs, head, 4 * head));
}
