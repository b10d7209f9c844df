//! A builder for the small plans of the integration tests: the sections every test
//! plan shares ([study], [request], random [prompts], [warmup], [timing], [blocks]),
//! with the values tests vary as fields, then arms, cells and any verbatim tail
//! ([analysis], [[hypotheses]], [qualification], ...). Ports are fresh per arm.

use super::{free_port, toml_array};

pub struct TestPlan {
    pub name: String,
    pub seed: u64,
    pub output_tokens: u32,
    pub prompt_tokens: u32,
    pub documents: u32,
    pub warmup_prompts: u32,
    pub settle_s: f64,
    pub timeout_s: f64,
    pub blocks: u32,
    pub descriptive_blocks: u32,
    pub arm_order: &'static str,
    pub cell_order: &'static str,
    /// `blocks.rounds` (rendered when above 0: interleaved blocks).
    pub rounds: u32,
    /// Rendered sections; add them with the methods below.
    pub arms: Vec<String>,
    pub cells: Vec<String>,
    pub tail: String,
}

impl TestPlan {
    /// Two fixed-order blocks, 6 output tokens, two random 16-token prompts.
    pub fn new(name: &str, seed: u64) -> TestPlan {
        TestPlan {
            name: name.to_string(),
            seed,
            output_tokens: 6,
            prompt_tokens: 16,
            documents: 2,
            warmup_prompts: 2,
            settle_s: 0.0,
            timeout_s: 60.0,
            blocks: 2,
            descriptive_blocks: 0,
            arm_order: "fixed",
            cell_order: "fixed",
            rounds: 0,
            arms: Vec::new(),
            cells: Vec::new(),
            tail: String::new(),
        }
    }

    /// A server the harness starts from `argv`, receipts in `{arm_dir}/receipts.jsonl`.
    pub fn arm(self, name: &str, role: &str, argv: &[String]) -> TestPlan {
        self.arm_with_receipts(name, role, argv, "receipts.jsonl")
    }

    pub fn arm_with_receipts(mut self, name: &str, role: &str, argv: &[String], receipts: &str) -> TestPlan {
        self.arms.push(format!(
            "[[arms]]\nname = {name:?}\nrole = {role:?}\nargv = {}\nport = {}\nstartup_timeout_s = 60.0\n\
             receipts = \"{{arm_dir}}/{receipts}\"\n",
            toml_array(argv),
            free_port()
        ));
        self
    }

    /// A server the harness only checks (`url`), never starts.
    pub fn external_arm(mut self, name: &str, role: &str, url: &str) -> TestPlan {
        self.arms
            .push(format!("[[arms]]\nname = {name:?}\nrole = {role:?}\nurl = {url:?}\nstartup_timeout_s = 60.0\n"));
        self
    }

    pub fn closed(mut self, name: &str, kind: &str, concurrency: u32, count: u32) -> TestPlan {
        self.cells.push(format!(
            "[[cells]]\nname = {name:?}\nkind = {kind:?}\nload = \"closed\"\nconcurrency = {concurrency}\ncount = {count}\n"
        ));
        self
    }

    pub fn open(mut self, name: &str, kind: &str, rate: f64, count: u32) -> TestPlan {
        self.cells.push(format!(
            "[[cells]]\nname = {name:?}\nkind = {kind:?}\nload = \"open\"\nrate = {rate:?}\ncount = {count}\n"
        ));
        self
    }

    /// TOML appended verbatim after the cells.
    pub fn tail(mut self, toml: &str) -> TestPlan {
        self.tail.push_str(toml);
        self
    }

    pub fn render(&self) -> String {
        let mut t = format!(
            "[study]\nname = {:?}\nseed = {}\n\n[request]\nmodel = \"synth\"\noutput_tokens = {}\n\n\
             [prompts]\nsource = \"random\"\nmin_token_id = 0\nmax_token_id = 255\nlengths = [{}]\ndocuments = {}\n\n\
             [warmup]\nprompts = {}\n\n[timing]\nsettle_s = {:?}\nrequest_timeout_s = {:?}\ndrain_timeout_s = {:?}\n\n\
             [blocks]\ncount = {}\n",
            self.name,
            self.seed,
            self.output_tokens,
            self.prompt_tokens,
            self.documents,
            self.warmup_prompts,
            self.settle_s,
            self.timeout_s,
            self.timeout_s,
            self.blocks,
        );
        if self.descriptive_blocks > 0 {
            t.push_str(&format!("descriptive = {}\n", self.descriptive_blocks));
        }
        t.push_str(&format!("arm_order = {:?}\ncell_order = {:?}\n", self.arm_order, self.cell_order));
        if self.rounds > 0 {
            t.push_str(&format!("rounds = {}\n", self.rounds));
        }
        for section in self.arms.iter().chain(&self.cells) {
            t.push('\n');
            t.push_str(section);
        }
        if !self.tail.is_empty() {
            t.push('\n');
            t.push_str(&self.tail);
        }
        t
    }
}

/// The binding-comparison plan of the compare tests: candidate `cand` on
/// `cand_model` against reference `ref` on `ref_model` (both f16 engines), two
/// interleaved descriptive rounds over the ladder 1, 2, one noise round, 4 parity
/// prompts.
pub fn compare_plan(name: &str, cand_model: &std::path::Path, ref_model: &std::path::Path) -> String {
    let cand = super::serve_argv(cand_model, &["--kv-format", "f16"], &[]);
    let reference = super::serve_argv(ref_model, &["--kv-format", "f16"], &[]);
    let plan = TestPlan {
        output_tokens: 8,
        prompt_tokens: 24,
        documents: 4,
        blocks: 0,
        descriptive_blocks: 2,
        arm_order: "alternate",
        ..TestPlan::new(name, 11)
    };
    plan.arm("cand", "candidate", &cand)
        .arm("ref", "control", &reference)
        .closed("c1", "descriptive", 1, 2)
        .closed("c2", "descriptive", 2, 4)
        .tail("[compare]\nparity_prompts = 4\nnoise_rounds = 1\n")
        .render()
}
