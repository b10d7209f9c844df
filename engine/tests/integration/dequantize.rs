//! `engine dequantize` on synthetic GGUF models written with `GgufWriter`
//! (block-quantized Q4_1/Q8_0 weights, F32 norms, an F16 head, a byte-level
//! GPT-2 vocabulary, metadata of every value type): the F32 rewrite keeps every
//! metadata key/value and tensor name, shape and order, is aligned, and loads to
//! bit-identical logits (the engine's exact Q4_1/Q8_0 kernels match its dense
//! path bit for bit); the F16 and BF16 rewrites round the same values and load
//! 16-bit, giving their own F32 rewrite's logits bit for bit; bad input exits 2.

use engine::gguf::writer::GgufWriter;
use engine::gguf::{GgmlType, GgufFile, MetaValue};
use engine::model::{LogitsWanted, SeqInput};
use engine::runtime::{Engine, EngineOptions};
use std::path::{Path, PathBuf};
use std::process::Command;

fn engine(args: &[&str]) -> (Option<i32>, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_engine")).args(args).output().expect("run engine");
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(!stderr.contains("panicked"), "engine panicked: {stderr}");
    (out.status.code(), stderr)
}

/// A deterministic pseudo-random stream (xorshift64*).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    /// Uniform in [lo, hi).
    fn uniform(&mut self, lo: f32, hi: f32) -> f32 {
        lo + (hi - lo) * (self.next() >> 40) as f32 / (1u64 << 24) as f32
    }
}

fn f16(x: f32) -> [u8; 2] {
    half::f16::from_f32(x).to_le_bytes()
}

/// `numel` values as Q4_1 blocks: d in [0.01, 0.03), m in [-0.12, -0.08), random nibbles.
fn q4_1(rng: &mut Rng, numel: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(numel / 32 * 20);
    for _ in 0..numel / 32 {
        out.extend(f16(rng.uniform(0.01, 0.03)));
        out.extend(f16(rng.uniform(-0.12, -0.08)));
        out.extend((0..16).map(|_| rng.next() as u8));
    }
    out
}

/// `numel` values as Q8_0 blocks: d in [0.0005, 0.001), random i8 in -127..=127.
fn q8_0(rng: &mut Rng, numel: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(numel / 32 * 34);
    for _ in 0..numel / 32 {
        out.extend(f16(rng.uniform(0.0005, 0.001)));
        out.extend((0..32).map(|_| ((rng.next() % 255) as i32 - 127) as i8 as u8));
    }
    out
}

fn f32s(rng: &mut Rng, numel: usize, lo: f32, hi: f32) -> Vec<u8> {
    (0..numel).flat_map(|_| rng.uniform(lo, hi).to_le_bytes()).collect()
}

fn strings(v: &[&str]) -> MetaValue {
    MetaValue::Array(v.iter().map(|s| MetaValue::String(s.to_string())).collect())
}

/// GPT-2's byte-to-character table: printable bytes map to themselves, the
/// rest to U+0100 onwards.
fn byte_char(b: u8) -> char {
    let printable = |b: u8| matches!(b, b'!'..=b'~' | 0xa1..=0xac | 0xae..=0xff);
    if printable(b) {
        return b as char;
    }
    let n = (0..b).filter(|&x| !printable(x)).count() as u32;
    char::from_u32(256 + n).unwrap()
}

/// A two-layer model of `arch` (hidden 64, 4 heads of 16, 2 KV heads, ffn 128)
/// over a 261-token byte-level vocabulary: Q4_1 projections, a Q8_0 token
/// embedding, F32 norms; qwen3 adds q/k norms and an untied F16 head. The
/// metadata also holds one key of every value type, an empty string array and
/// a nested array.
fn write_model(path: &Path, arch: &str, alignment: Option<u32>, version: u32) {
    let (hidden, heads, kv, hd, ffn, layers) = (64usize, 4usize, 2usize, 16usize, 128usize, 2usize);
    let mut tokens: Vec<String> = (0..=255u8).map(|b| byte_char(b).to_string()).collect();
    tokens.extend(["12", "Ġh", "Ġhi", "<|im_end|>", "<|im_start|>"].map(String::from));
    let vocab = tokens.len();
    let refs: Vec<&str> = tokens.iter().map(String::as_str).collect();
    let mut types = vec![MetaValue::I32(1); 259];
    types.extend([MetaValue::I32(3), MetaValue::I32(3)]);
    let a = |s: &str| format!("{arch}.{s}");
    let u = MetaValue::U32;
    let mut w = GgufWriter::new();
    w.meta("general.architecture", MetaValue::String(arch.into()));
    if let Some(al) = alignment {
        w.meta("general.alignment", u(al));
    }
    w.meta("general.name", MetaValue::String("dequantize-test ü".into()))
        .meta("general.file_type", u(3))
        .meta("general.quantization_version", u(2))
        .meta(&a("block_count"), u(layers as u32))
        .meta(&a("context_length"), u(256))
        .meta(&a("embedding_length"), u(hidden as u32))
        .meta(&a("feed_forward_length"), u(ffn as u32))
        .meta(&a("attention.head_count"), u(heads as u32))
        .meta(&a("attention.head_count_kv"), u(kv as u32))
        .meta(&a("attention.key_length"), u(hd as u32))
        .meta(&a("rope.freq_base"), MetaValue::F32(10000.0))
        .meta(&a("attention.layer_norm_rms_epsilon"), MetaValue::F32(1e-5))
        .meta("tokenizer.ggml.model", MetaValue::String("gpt2".into()))
        .meta("tokenizer.ggml.pre", MetaValue::String("smollm".into()))
        .meta("tokenizer.ggml.tokens", strings(&refs))
        .meta("tokenizer.ggml.token_type", MetaValue::Array(types))
        .meta("tokenizer.ggml.merges", strings(&["1 2", "Ġ h", "Ġh i"]))
        .meta("tokenizer.ggml.bos_token_id", u(260))
        .meta("tokenizer.ggml.eos_token_id", u(259))
        .meta("tokenizer.ggml.add_bos_token", MetaValue::Bool(false))
        .meta(
            "tokenizer.chat_template",
            MetaValue::String("{% for m in messages %}{{ m['content'] }}{% endfor %}".into()),
        )
        .meta("test.u8", MetaValue::U8(200))
        .meta("test.i8", MetaValue::I8(-5))
        .meta("test.u16", MetaValue::U16(60000))
        .meta("test.i16", MetaValue::I16(-30000))
        .meta("test.i32", MetaValue::I32(-7))
        .meta("test.f32", MetaValue::F32(-1.25e-3))
        .meta("test.u64", MetaValue::U64(u64::MAX))
        .meta("test.i64", MetaValue::I64(i64::MIN))
        .meta("test.f64", MetaValue::F64(std::f64::consts::PI))
        .meta("test.nested", MetaValue::Array(vec![MetaValue::Array(vec![MetaValue::I16(1), MetaValue::I16(-2)])]))
        .meta_array("test.empty_strings", 8, vec![])
        .meta("test.f32s", MetaValue::Array(vec![MetaValue::F32(0.5), MetaValue::F32(-1e-30)]));
    let mut rng = Rng(0x5eed_0000 ^ arch.len() as u64);
    w.tensor("token_embd.weight", &[hidden, vocab], 8, q8_0(&mut rng, hidden * vocab));
    for l in 0..layers {
        let b = |s: &str| format!("blk.{l}.{s}.weight");
        w.tensor(&b("attn_norm"), &[hidden], 0, f32s(&mut rng, hidden, 0.8, 1.2))
            .tensor(&b("attn_q"), &[hidden, heads * hd], 3, q4_1(&mut rng, hidden * heads * hd))
            .tensor(&b("attn_k"), &[hidden, kv * hd], 3, q4_1(&mut rng, hidden * kv * hd))
            .tensor(&b("attn_v"), &[hidden, kv * hd], 3, q4_1(&mut rng, hidden * kv * hd))
            .tensor(&b("attn_output"), &[heads * hd, hidden], 3, q4_1(&mut rng, hidden * heads * hd));
        if arch == "qwen3" {
            w.tensor(&b("attn_q_norm"), &[hd], 0, f32s(&mut rng, hd, 0.8, 1.2)).tensor(
                &b("attn_k_norm"),
                &[hd],
                0,
                f32s(&mut rng, hd, 0.8, 1.2),
            );
        }
        w.tensor(&b("ffn_norm"), &[hidden], 0, f32s(&mut rng, hidden, 0.8, 1.2))
            .tensor(&b("ffn_gate"), &[hidden, ffn], 3, q4_1(&mut rng, hidden * ffn))
            .tensor(&b("ffn_up"), &[hidden, ffn], 3, q4_1(&mut rng, hidden * ffn))
            .tensor(&b("ffn_down"), &[ffn, hidden], 3, q4_1(&mut rng, hidden * ffn));
    }
    w.tensor("output_norm.weight", &[hidden], 0, f32s(&mut rng, hidden, 0.8, 1.2));
    if arch == "qwen3" {
        let head: Vec<u8> = (0..hidden * vocab).flat_map(|_| f16(rng.uniform(-0.2, 0.2))).collect();
        w.tensor("output.weight", &[hidden, vocab], 1, head);
    }
    std::fs::write(path, w.to_bytes(version)).unwrap();
}

fn dequantize(input: &Path, out: &Path, dtype: &str) {
    let (code, err) =
        engine(&["dequantize", "--model", input.to_str().unwrap(), "--out", out.to_str().unwrap(), "--dtype", dtype]);
    assert_eq!(code, Some(0), "{err}");
    assert!(err.contains("wrote") && err.contains(out.to_str().unwrap()), "{err}");
}

/// Logits at every position of `ids`, from the engine's library API, on the
/// exact quantized matmul (`--exact-quant-matmul`).
fn logits(path: &Path, ids: &[u32]) -> Vec<Vec<f32>> {
    let mut e = Engine::load(path, &EngineOptions { threads: 2, ..EngineOptions::default() }).unwrap();
    let exact = e.model.kernels().with_quant_matmul(engine::kernels::QuantMatmul::Exact);
    e.model.set_kernels(exact);
    let (model, cache, pool) = e.parts();
    let mut table = cache.new_table();
    assert!(table.reserve(ids.len()));
    let seq = SeqInput { tokens: ids, table: &mut table, logits: LogitsWanted::All };
    let mut out = pool.install(|| model.forward(cache, &mut [seq], None)).unwrap();
    out.remove(0)
}

fn bits(rows: &[Vec<f32>]) -> Vec<u32> {
    rows.iter().flatten().map(|x| x.to_bits()).collect()
}

/// Same metadata in the same order, except general.file_type; same tensor names,
/// dims and order; every offset aligned.
fn assert_same_layout(q: &GgufFile, d: &GgufFile, file_type: u32) {
    assert_eq!(d.version(), q.version());
    assert_eq!(d.alignment(), q.alignment());
    let keys = |g: &GgufFile| g.metadata().iter().map(|(k, _)| k.clone()).collect::<Vec<_>>();
    assert_eq!(keys(d), keys(q));
    for (k, v) in q.metadata() {
        if k == "general.file_type" {
            assert_eq!(d.get(k), Some(&MetaValue::U32(file_type)));
        } else {
            assert_eq!(d.get(k), Some(v), "{k}");
            assert_eq!(d.array_elem_type(k), q.array_elem_type(k), "{k}");
        }
    }
    assert_eq!(d.array_elem_type("test.empty_strings"), Some(8));
    assert_eq!(d.tensors().len(), q.tensors().len());
    for (a, b) in q.tensors().iter().zip(d.tensors()) {
        assert_eq!((&a.name, &a.dims), (&b.name, &b.dims));
        assert_eq!(b.offset % d.alignment(), 0, "{}", b.name);
    }
    assert_eq!(d.data_offset() % d.alignment(), 0);
}

fn case(arch: &str, alignment: Option<u32>, version: u32) {
    let dir = tempfile::tempdir().unwrap();
    let (q_path, d_path) = (dir.path().join("m.Q4_1.gguf"), dir.path().join("m.F32.gguf"));
    write_model(&q_path, arch, alignment, version);
    dequantize(&q_path, &d_path, "f32");
    assert!(!dir.path().join("m.F32.gguf.tmp").exists());
    let (q, d) = (GgufFile::open(&q_path).unwrap(), GgufFile::open(&d_path).unwrap());
    assert_same_layout(&q, &d, 0);
    for (a, b) in q.tensors().iter().zip(d.tensors()) {
        assert_eq!(b.ty, GgmlType::F32, "{}", b.name);
        let (x, y) = (q.dequantize_raw(&a.name).unwrap(), d.dequantize_raw(&b.name).unwrap());
        assert_eq!(x.shape, y.shape);
        assert!(x.data.iter().zip(&y.data).all(|(u, v)| u.to_bits() == v.to_bits()), "{}", a.name);
    }
    // The engine's quantized kernels and its dense f32 path agree bit for bit.
    let ids: Vec<u32> = vec![260, 104, 105, 32, 49, 50, 257, 258, 97, 98, 99, 33, 10, 7, 200, 255, 259, 3];
    let (lq, ld) = (logits(&q_path, &ids), logits(&d_path, &ids));
    assert_eq!(lq.len(), ids.len());
    assert!(lq.iter().flatten().all(|x| x.is_finite()));
    assert_eq!(bits(&lq), bits(&ld), "{arch}: logits differ between the Q4_1 file and its F32 rewrite");
}

#[test]
fn f32_rewrite_of_a_llama_model_gives_bit_identical_logits() {
    case("llama", None, 3);
}

#[test]
fn f32_rewrite_of_a_qwen3_model_keeps_alignment_and_version() {
    case("qwen3", Some(64), 2);
}

#[test]
fn sixteen_bit_rewrites_round_the_same_values_and_keep_norms_f32() {
    let f16 = |v: f32| half::f16::from_f32(v).to_f32();
    let bf16 = |v: f32| half::bf16::from_f32(v).to_f32();
    // (dtype, tensor type, general.file_type, the rounding it applies)
    type Case<'a> = (&'a str, GgmlType, u32, &'a dyn Fn(f32) -> f32);
    let cases: [Case; 2] = [("f16", GgmlType::F16, 1, &f16), ("bf16", GgmlType::Bf16, 32, &bf16)];
    for (dtype, ty, file_type, round) in cases {
        let dir = tempfile::tempdir().unwrap();
        let (q_path, h_path) = (dir.path().join("m.gguf"), dir.path().join("m.16.gguf"));
        write_model(&q_path, "qwen3", None, 3);
        dequantize(&q_path, &h_path, dtype);
        let (q, h) = (GgufFile::open(&q_path).unwrap(), GgufFile::open(&h_path).unwrap());
        assert_same_layout(&q, &h, file_type);
        for (a, b) in q.tensors().iter().zip(h.tensors()) {
            let want = if a.dims.len() == 1 { GgmlType::F32 } else { ty };
            assert_eq!(b.ty, want, "{dtype}: {}", b.name);
            let (x, y) = (q.dequantize_raw(&a.name).unwrap(), h.dequantize_raw(&b.name).unwrap());
            let rounded = |v: f32| if want == ty { round(v) } else { v };
            let same = x.data.iter().zip(&y.data).all(|(u, v)| rounded(*u).to_bits() == v.to_bits());
            assert!(same, "{dtype}: {}", a.name);
        }
        let mut e = Engine::load(&h_path, &EngineOptions::default()).unwrap();
        assert_eq!(e.generate_greedy(&[104, 105], 4, true).unwrap().output_ids.len(), 4);
    }
}

#[test]
fn sixteen_bit_weights_stay_16_bit_and_give_the_logits_of_their_f32_rewrite() {
    // llama un-permutes Q/K rows of 2-byte values and ties its head; qwen3 has
    // an untied head.
    for dtype in ["f16", "bf16"] {
        for arch in ["llama", "qwen3"] {
            let dir = tempfile::tempdir().unwrap();
            let (q, h, f) = (dir.path().join("m.gguf"), dir.path().join("m.16.gguf"), dir.path().join("m.16.F32.gguf"));
            write_model(&q, arch, None, 3);
            dequantize(&q, &h, dtype);
            dequantize(&h, &f, "f32");
            let e = Engine::load(&h, &EngineOptions::default()).unwrap();
            let dtypes: Vec<_> = e.model.weight_dtypes().into_iter().collect();
            // 7 per layer and the head: qwen3's own, llama's the tied embedding matrix.
            assert_eq!(dtypes, vec![(dtype, 2 * 7 + 1)], "{dtype} {arch}");
            assert_eq!(e.model.weight_layouts().1, arch == "llama", "{dtype} {arch}: lookups read the tied head");
            let ids: Vec<u32> = vec![260, 104, 105, 32, 49, 50, 257, 258, 97, 98, 99, 33, 10, 7, 200, 255, 259, 3];
            let same = bits(&logits(&h, &ids)) == bits(&logits(&f, &ids));
            assert!(same, "{dtype} {arch}: the 16-bit file's logits differ from its F32 rewrite's");
        }
    }
}

#[test]
fn bad_input_is_a_clear_error_with_exit_2() {
    let dir = tempfile::tempdir().unwrap();
    let d = |n: &str| dir.path().join(n).to_str().unwrap().to_string();
    let out = d("out.gguf");

    let (code, err) = engine(&["dequantize", "--model", "/nonexistent/m.gguf", "--out", &out]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("/nonexistent/m.gguf"), "{err}");

    std::fs::write(d("text.gguf"), "not a gguf file at all").unwrap();
    let (code, err) = engine(&["dequantize", "--model", &d("text.gguf"), "--out", &out]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("not a GGUF file"), "{err}");

    // IQ2_XXS (ggml type 16) is not decoded by the loader: named, nothing written.
    let mut w = GgufWriter::new();
    w.meta("general.architecture", MetaValue::String("llama".into()));
    w.tensor("blk.0.attn_norm.weight", &[256], 0, vec![0; 1024]);
    w.tensor("token_embd.weight", &[256, 4], 16, vec![0; 66 * 4]);
    std::fs::write(d("iq2xxs.gguf"), w.to_bytes(3)).unwrap();
    let (code, err) = engine(&["dequantize", "--model", &d("iq2xxs.gguf"), "--out", &out]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("IQ2_XXS") && err.contains("token_embd.weight"), "{err}");
    assert!(!Path::new(&out).exists() && !PathBuf::from(format!("{out}.tmp")).exists());

    let model = d("m.gguf");
    write_model(Path::new(&model), "llama", None, 3);
    let (code, err) = engine(&["dequantize", "--model", &model, "--out", &model]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("is the input file"), "{err}");

    let (code, err) = engine(&["dequantize", "--model", &model, "--out", "/nonexistent/dir/out.gguf"]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("/nonexistent/dir") && err.contains("does not exist"), "{err}");

    let (code, err) = engine(&["dequantize", "--model", &model, "--out", &out, "--dtype", "q8_0"]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("q8_0") && err.contains("f32, f16 or bf16"), "{err}");
}
