//! A peer's flags that a front door refuses, each with the reason it prints (exit 2,
//! nothing sent or written): one table per peer drives the parser (each flag is
//! accepted by clap, with any values, and shown under its own heading of `--help`
//! with its reason as help) and docs/bench.md's table (a test holds the docs to
//! it). Here: the `vllm bench serve` flags (vLLM 0.34) that `harness bench`
//! refuses; `harness profile` brings AIPerf's table (`profile::refused`). Must not
//! decide anything else: flags a front door does take are its args' fields.

use std::marker::PhantomData;

use clap::{Arg, ArgAction, ArgMatches, Command, FromArgMatches, parser::ValueSource};

/// A refused flag and why.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Refusal {
    pub flag: &'static str,
    pub why: &'static str,
}

const fn r(flag: &'static str, why: &'static str) -> Refusal {
    Refusal { flag, why }
}

const HF: &str = "for --dataset-name hf, which is refused (offline)";
const MM: &str = "multimodal requests: the harness sends text and token IDs only";

/// Every refused flag of `vllm bench serve` (serve.py and the dataset parser).
pub const VLLM_REFUSED: &[Refusal] = &[
    r("--use-beam-search", "beam search: the harness sends sampling requests only, and the engine has no beam search"),
    r(
        "--logprobs",
        "timed requests ask for no logprobs (they change the server's work); if you mean it, send them with --extra-body '{\"logprobs\": N}'",
    ),
    r("--probe-request-rate", "a side load of probe requests: a cell has one load; measure it as its own cell"),
    r(
        "--profile",
        "vLLM's torch profiler (POST /start_profile, /stop_profile): the engine has no profiler endpoints; guidellm's --profile is `harness benchmark --profile`",
    ),
    r("--self-timed", "only with --dataset-name timed_trace, which is refused"),
    r("--lora-modules", "LoRA adapters: the engine serves none"),
    r("--lora-assignment", "LoRA adapters: the engine serves none"),
    r(
        "--ramp-up-strategy",
        "a rate that ramps during a cell is not a load a plan states (one rate per cell): give several --request-rate values",
    ),
    r("--ramp-up-start-rps", "see --ramp-up-strategy"),
    r("--ramp-up-end-rps", "see --ramp-up-strategy"),
    r(
        "--chat-template-kwargs",
        "the harness renders no chat template client-side; send them to the server with --extra-body '{\"chat_template_kwargs\": {..}}'",
    ),
    r("--skip-tokenizer-init", "the harness reads the tokenizer the dataset needs, and needs none otherwise"),
    r("--insecure", "TLS certificate checks cannot be turned off"),
    r("--plot-timeline", "vLLM's plots: the evidence's results/report.html holds the study's figures"),
    r("--timeline-itl-thresholds", "see --plot-timeline"),
    r("--plot-dataset-stats", "see --plot-timeline"),
    r("--no-stream", HF),
    r("--enable-multimodal-chat", MM),
    r("--custom-ensure-client-side-data", "for --dataset-name custom_image, which is refused (multimodal)"),
    r("--spec-bench-output-len", "for --dataset-name spec_bench, which is refused"),
    r("--spec-bench-category", "for --dataset-name spec_bench, which is refused"),
    r("--timed-trace-chunk-hash-size", "for --dataset-name timed_trace, which is refused"),
    r("--timed-trace-sec-multiplier", "for --dataset-name timed_trace, which is refused"),
    r("--timed-trace-label-timestamp", "for --dataset-name timed_trace, which is refused"),
    r("--timed-trace-label-input-length", "for --dataset-name timed_trace, which is refused"),
    r("--timed-trace-label-output-length", "for --dataset-name timed_trace, which is refused"),
    r("--timed-trace-label-hash-ids", "for --dataset-name timed_trace, which is refused"),
    r("--blazedit-min-distance", HF),
    r("--blazedit-max-distance", HF),
    r("--asr-max-audio-len-sec", HF),
    r("--asr-min-audio-len-sec", HF),
    r("--hf-subset", HF),
    r("--hf-split", HF),
    r("--hf-name", HF),
    r("--hf-output-len", HF),
    r("--bfcl-categories", HF),
    r("--speed-bench-dataset-subset", "for --dataset-name speed_bench, which is refused"),
    r("--speed-bench-output-len", "for --dataset-name speed_bench, which is refused"),
    r("--speed-bench-category", "for --dataset-name speed_bench, which is refused"),
    r("--no-reranker", "for --dataset-name random-rerank, which is refused"),
    r("--random-mm-base-items-per-request", MM),
    r("--random-mm-num-mm-items-range-ratio", MM),
    r("--random-mm-limit-mm-per-prompt", MM),
    r("--random-mm-bucket-config", MM),
];

/// One peer's table of refused flags and the `--help` heading they go under.
pub trait RefusalTable {
    const TABLE: &'static [Refusal];
    const HEADING: &'static str;
}

/// vLLM 0.34's `vllm bench serve` flags refused by `harness bench`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Vllm;

impl RefusalTable for Vllm {
    const TABLE: &'static [Refusal] = VLLM_REFUSED;
    const HEADING: &'static str = "vLLM flags refused here (exit 2)";
}

/// The refused flags of table `T` given on a command line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RefusedFlags<T = Vllm> {
    pub given: Vec<Refusal>,
    table: PhantomData<T>,
}

impl<T> Default for RefusedFlags<T> {
    fn default() -> Self {
        RefusedFlags { given: Vec::new(), table: PhantomData }
    }
}

impl<T> RefusedFlags<T> {
    /// The first refused flag given, as the message that refuses it.
    pub fn first_message(&self) -> Option<String> {
        self.given.first().map(|r| format!("{}: refused: {}", r.flag, r.why))
    }
}

/// The clap id of a flag: its name without dashes (`--x-y` or the short `-f`).
fn id(r: &Refusal) -> &'static str {
    r.flag.trim_start_matches('-')
}

impl<T: RefusalTable> FromArgMatches for RefusedFlags<T> {
    fn from_arg_matches(m: &ArgMatches) -> Result<Self, clap::Error> {
        let given = T::TABLE
            .iter()
            .filter(|r| {
                m.try_contains_id(id(r)).unwrap_or(false) && m.value_source(id(r)) == Some(ValueSource::CommandLine)
            })
            .copied()
            .collect();
        Ok(RefusedFlags { given, table: PhantomData })
    }

    fn update_from_arg_matches(&mut self, m: &ArgMatches) -> Result<(), clap::Error> {
        *self = Self::from_arg_matches(m)?;
        Ok(())
    }
}

impl<T: RefusalTable> clap::Args for RefusedFlags<T> {
    fn augment_args(cmd: Command) -> Command {
        T::TABLE.iter().fold(cmd, |cmd, r| {
            let arg = Arg::new(id(r))
                .num_args(0..)
                .action(ArgAction::Append)
                .value_name("ANY")
                .help(format!("refused: {}", r.why))
                .help_heading(T::HEADING);
            let arg = match r.flag.strip_prefix("--") {
                Some(long) => arg.long(long),
                None => arg.short(r.flag.trim_start_matches('-').chars().next().unwrap_or('?')),
            };
            cmd.arg(arg)
        })
    }

    fn augment_args_for_update(cmd: Command) -> Command {
        Self::augment_args(cmd)
    }
}
