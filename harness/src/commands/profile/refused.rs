//! AIPerf 0.13's `aiperf profile` flags that `harness profile` refuses, each with
//! the reason it prints (exit 2, nothing sent or written), in `aiperf profile
//! --help`'s groups: the table behind the parser (`bench::refused::RefusedFlags`)
//! and docs/bench.md's AIPerf table (a test holds the docs to it). Every name of a
//! flag (its aliases too) is its own entry. Must not decide anything else: the
//! flags `harness profile` takes are `ProfileArgs` fields.

use crate::commands::bench::refused::{Refusal, RefusalTable};

const fn r(flag: &'static str, why: &'static str) -> Refusal {
    Refusal { flag, why }
}

const KV_RESET: &str =
    "a KV-cache reset request (POST /reset_prefix_cache) between runs: the engine has no such endpoint";
const PROFILER: &str = "the server's profiler endpoints (/start_profile, /stop_profile): the engine has none";
const MM: &str = "multimodal requests (images, audio, video): the harness sends text and token IDs only";
const RANKINGS: &str = "rankings requests: the harness measures text generation only";
const HUB: &str = "for --public-dataset, which is refused (its datasets are downloaded from the Hugging Face hub; this harness never reaches it)";
const AGENTIC: &str = "agentic and session-tree trace replay (weka, tracelab, DAG, baseten traces): not built here; --custom-dataset-type mooncake_trace and single_turn are";
const MULTI_TURN: &str = "multi-turn synthetic sessions: the harness's synthetic prompts are single requests (a plan's sharegpt or requests panel with prompts.max_turns replays sessions)";
const PREFIX: &str = "prefix-prompt pools and system prompts: not built for this front door; a plan's shared_prefix panel (`harness run`) is the harness's prefix-sharing workload";
const SYNTHESIS: &str = "AIPerf's trace synthesis (scaled lengths, speed-ups, prefix trees): not built; a plan's trace cell scales time with time_scale";
const RAMP: &str = "a load that ramps within a run is not a load a plan states (one load per cell): give several --concurrency or --request-rate values";
const WARMUP: &str = "the harness's warmup is one batched call of --warmup-request-count prompts before the cells, not a timed phase with a load of its own";
const USER_CENTRIC: &str =
    "user-centric rate (per-user session pacing): not built; --request-rate and --concurrency are";
const CANCEL: &str =
    "cancelling requests mid-flight: the harness records every request to its end (zero retries, nothing dropped)";
const SCENARIO: &str = "AIPerf's submission scenarios (agentic replay with validation rules): not built";
const OTEL: &str =
    "streaming telemetry to an OpenTelemetry collector: the harness sends nothing but the study's requests";
const MLFLOW: &str =
    "uploading results to MLflow: the harness uploads nothing (the artifact files are there to upload)";
const WANDB: &str =
    "uploading results to Weights & Biases: the harness uploads nothing (the artifact files are there to upload)";
const HTTP_TRACE: &str =
    "per-request connection timings (DNS, connect, send, wait): the harness's recorder does not take them";
const SERVER_METRICS: &str = "AIPerf's Prometheus scraping and its server_metrics_export files: not written";
const NETWORK: &str = "network round-trip calibration: not measured";
const SERVICE: &str = "AIPerf's multi-process services (workers, record processors, ZMQ, its API server): the harness's load generator is one process with none to size";
const MULTI_RUN: &str = "AIPerf's repeated trials, parameter sweeps and SLA searches: not built for this front door; a plan file with blocks and sweep cells (`harness run`) repeats and sweeps";
const READY: &str = "AIPerf's readiness probe: the harness waits for the server's health path (`harness bench --startup-timeout-s`) in its own runs; give a running server";
const API_KEY: &str = "a key on the command line lands in shell history and the study's record: put it in an environment variable and pass --api-key-env VAR";
const SCHEDULE: &str = "switching or windowing the timestamped replay: not built; a --custom-dataset-type mooncake_trace file with timestamps is always replayed at them from its first row (AIPerf's default, auto fixed schedule with auto offset)";
const SAMPLING: &str =
    "the requests use the panel's entries in order, round robin (AIPerf's `sequential`); other sampling is not built";
const ACCURACY: &str = "accuracy benchmarks: `harness qualify` and a plan's [qualification] measure quality";

/// Every refused flag of `aiperf profile` (AIPerf 0.13.0).
pub const AIPERF_REFUSED: &[Refusal] = &[
    // Endpoint
    r("--reset-kv-cache", KV_RESET),
    r("--reset-kv-cache-timeout-seconds", KV_RESET),
    r("--reset-kv-cache-path", KV_RESET),
    r("--server-profiler", PROFILER),
    r("--server-profiler-timeout-seconds", PROFILER),
    r("--server-profiler-start-path", PROFILER),
    r("--server-profiler-stop-path", PROFILER),
    r("--download-video-content", "video generation: the harness measures text generation only"),
    r(
        "--session-header",
        "per-session affinity headers: the harness sends no session identifiers (one server per arm, nothing between)",
    ),
    r("--uuid-and-strip", MM),
    // Tokenizer
    r(
        "--apply-chat-template",
        "the harness renders no chat template client-side; --endpoint-type chat lets the server render it",
    ),
    // Input
    r(
        "--public-dataset",
        "its datasets are downloaded from the Hugging Face hub, which this harness never reaches (offline): save the rows as a file and pass --input-file",
    ),
    r("--hf-subset", HUB),
    r("--hf-weka-dataset", HUB),
    r("--dataset-filter", HUB),
    r("--use-think-time-only", AGENTIC),
    r("--max-context-length", AGENTIC),
    r("--allow-dataset-wrap", AGENTIC),
    r("--no-allow-dataset-wrap", AGENTIC),
    r("--trace-session-sample-ratio", AGENTIC),
    r(
        "--config",
        "AIPerf's YAML configuration files: give the flags themselves (the harness's own plan files run with `harness run PLAN`)",
    ),
    r(
        "-f",
        "AIPerf's YAML configuration files: give the flags themselves (the harness's own plan files run with `harness run PLAN`)",
    ),
    // Conversation input
    r("--conversation-turn-delay-mean", MULTI_TURN),
    r("--session-turn-delay-mean", MULTI_TURN),
    r("--conversation-turn-delay-stddev", MULTI_TURN),
    r("--session-turn-delay-stddev", MULTI_TURN),
    r("--conversation-turn-delay-ratio", MULTI_TURN),
    r("--session-delay-ratio", MULTI_TURN),
    r("--inter-turn-delay-cap-seconds", AGENTIC),
    r("--max-idle-gap-cap-seconds", AGENTIC),
    r("--replay-speedup", AGENTIC),
    r("--open-loop-replay", AGENTIC),
    r("--no-open-loop-replay", AGENTIC),
    r("--open-loop-strict", AGENTIC),
    r("--omit-kv-hints", AGENTIC),
    r("--force-min-tokens", AGENTIC),
    r("--no-force-min-tokens", AGENTIC),
    // Prompt, prefix prompt, cache bust
    r("--cache-bust", "cache-bust markers spliced into prompts: not built (every prompt is the plan's panel, frozen)"),
    r("--system-prompt", PREFIX),
    r("--system-prompt-file", PREFIX),
    r("--prompt-prefix-pool-size", PREFIX),
    r("--prefix-prompt-pool-size", PREFIX),
    r("--num-prefix-prompts", PREFIX),
    r("--prompt-prefix-length", PREFIX),
    r("--prefix-prompt-length", PREFIX),
    r("--shared-system-prompt-length", PREFIX),
    r("--user-context-prompt-length", PREFIX),
    // ISL
    r(
        "--seq-dist",
        "mixtures of (ISL, OSL) pairs: not built; a plan's synthetic panel draws each length from its own distribution",
    ),
    r(
        "--sequence-distribution",
        "mixtures of (ISL, OSL) pairs: not built; a plan's synthetic panel draws each length from its own distribution",
    ),
    // Audio, image, video
    r("--audio-batch-size", MM),
    r("--batch-size-audio", MM),
    r("--audio-length-mean", MM),
    r("--audio-length-stddev", MM),
    r("--audio-format", MM),
    r("--audio-depths", MM),
    r("--audio-sample-rates", MM),
    r("--audio-num-channels", MM),
    r("--image-width-mean", MM),
    r("--image-width-stddev", MM),
    r("--image-height-mean", MM),
    r("--image-height-stddev", MM),
    r("--image-batch-size", MM),
    r("--batch-size-image", MM),
    r("--image-format", MM),
    r("--image-source", MM),
    r("--image-source-sampling", MM),
    r("--video-batch-size", MM),
    r("--batch-size-video", MM),
    r("--video-duration", MM),
    r("--video-fps", MM),
    r("--video-width", MM),
    r("--video-height", MM),
    r("--video-synth-type", MM),
    r("--video-format", MM),
    r("--video-codec", MM),
    r("--video-audio-sample-rate", MM),
    r("--video-audio-num-channels", MM),
    r("--video-audio-codec", MM),
    r("--video-audio-depth", MM),
    // Rankings
    r("--rankings-passages-mean", RANKINGS),
    r("--rankings-passages-stddev", RANKINGS),
    r("--rankings-passages-prompt-token-mean", RANKINGS),
    r("--rankings-passages-prompt-token-stddev", RANKINGS),
    r("--rankings-query-prompt-token-mean", RANKINGS),
    r("--rankings-query-prompt-token-stddev", RANKINGS),
    // Synthesis
    r("--synthesis-speedup-ratio", SYNTHESIS),
    r("--synthesis-prefix-len-multiplier", SYNTHESIS),
    r("--synthesis-prefix-root-multiplier", SYNTHESIS),
    r("--synthesis-prompt-len-multiplier", SYNTHESIS),
    r("--synthesis-output-len-multiplier", SYNTHESIS),
    r("--synthesis-max-isl", SYNTHESIS),
    r("--synthesis-max-osl", SYNTHESIS),
    // Load generator
    r(
        "--prefill-concurrency",
        "a separate cap on requests in prefill: the harness's loads cap requests in flight only",
    ),
    r("--concurrency-ramp-duration", RAMP),
    r("--prefill-concurrency-ramp-duration", RAMP),
    r("--request-rate-ramp-duration", RAMP),
    r("--request-rate-series", RAMP),
    r("--failed-request-threshold", SCENARIO),
    r("--trajectory-start-min-ratio", SCENARIO),
    r("--trajectory-start-max-ratio", SCENARIO),
    r("--burst-phase-starts", SCENARIO),
    r("--trace-idle-gap-cap-seconds", AGENTIC),
    r("--system-idle-gap-cap-seconds", SCENARIO),
    // Scenario
    r("--scenario", SCENARIO),
    r("--unsafe-override", SCENARIO),
    // Warmup
    r("--warmup-duration", WARMUP),
    r("--agentic-cache-warmup-duration", WARMUP),
    r("--agentic-warmup-grace-period", WARMUP),
    r("--num-warmup-sessions", WARMUP),
    r("--warmup-concurrency", WARMUP),
    r("--warmup-prefill-concurrency", WARMUP),
    r("--warmup-request-rate", WARMUP),
    r("--warmup-arrival-pattern", WARMUP),
    r("--warmup-grace-period", WARMUP),
    r("--warmup-concurrency-ramp-duration", WARMUP),
    r("--warmup-prefill-concurrency-ramp-duration", WARMUP),
    r("--warmup-request-rate-ramp-duration", WARMUP),
    // User-centric rate, cancellation
    r("--user-centric-rate", USER_CENTRIC),
    r("--num-users", USER_CENTRIC),
    r("--request-cancellation-rate", CANCEL),
    r("--request-cancellation-delay", CANCEL),
    // Output
    r(
        "--slice-duration",
        "time-sliced exports (profile_export_aiperf_timeslices.*): not written; the evidence's report shows each cell over time",
    ),
    r("--auto-plot", "AIPerf's plots: the evidence's results/report.html holds the study's figures"),
    r("--export-outputs-json", "the generated text is not recorded (its token IDs and timings are)"),
    r("--otel-url", OTEL),
    r("--stream", OTEL),
    r("--otel-resource-attributes", OTEL),
    r("--gen-ai-provider", OTEL),
    r("--mlflow-tracking-uri", MLFLOW),
    r("--mlflow-experiment", MLFLOW),
    r("--mlflow-run-name", MLFLOW),
    r("--mlflow-tag", MLFLOW),
    r("--mlflow-parent-run-id", MLFLOW),
    r("--mlflow-artifact-glob", MLFLOW),
    r("--wandb-project", WANDB),
    r("--wandb-entity", WANDB),
    r("--wandb-run-name", WANDB),
    r("--wandb-tag", WANDB),
    // HTTP trace, server metrics, network latency, GPU telemetry
    r("--export-http-trace", HTTP_TRACE),
    r("--show-trace-timing", HTTP_TRACE),
    r("--server-metrics", SERVER_METRICS),
    r("--server-metrics-formats", SERVER_METRICS),
    r("--network-latency-automatic", NETWORK),
    r("--network-latency-mean", NETWORK),
    r("--network-latency-ping-interval", NETWORK),
    r("--gpu-telemetry", "GPU telemetry (DCGM and vendor exporters): not collected"),
    // Service, workers, ZMQ
    r("--record-processor-service-count", SERVICE),
    r("--record-processors", SERVICE),
    r("--api-port", SERVICE),
    r("--api-host", SERVICE),
    r("--stats-interval", SERVICE),
    r("--workers-max", SERVICE),
    r("--max-workers", SERVICE),
    r("--zmq-host", SERVICE),
    r("--zmq-ipc-path", SERVICE),
    r("--zmq-dual-bind", SERVICE),
    // Multi-run
    r("--profile-run-cooldown-seconds", MULTI_RUN),
    r("--confidence-level", MULTI_RUN),
    r("--profile-run-disable-warmup-after-first", MULTI_RUN),
    r("--no-profile-run-disable-warmup-after-first", MULTI_RUN),
    r("--set-consistent-seed", MULTI_RUN),
    r("--no-set-consistent-seed", MULTI_RUN),
    r("--vary-seed-per-trial", MULTI_RUN),
    r("--no-vary-seed-per-trial", MULTI_RUN),
    r("--convergence-metric", MULTI_RUN),
    r("--convergence-stat", MULTI_RUN),
    r("--convergence-threshold", MULTI_RUN),
    r("--convergence-mode", MULTI_RUN),
    r("--parameter-sweep-cooldown-seconds", MULTI_RUN),
    r("--parameter-sweep-same-seed", MULTI_RUN),
    r("--no-parameter-sweep-same-seed", MULTI_RUN),
    r("--parameter-sweep-mode", MULTI_RUN),
    r("--sweep-type", MULTI_RUN),
    r("--no-sweep-table", MULTI_RUN),
    r("--search-space", MULTI_RUN),
    r("--search-metric", MULTI_RUN),
    r("--search-stat", MULTI_RUN),
    r("--search-direction", MULTI_RUN),
    r("--search-max-iterations", MULTI_RUN),
    r("--search-initial-points", MULTI_RUN),
    r("--search-random-seed", MULTI_RUN),
    r("--search-planner", MULTI_RUN),
    r("--optuna-sampler", MULTI_RUN),
    r("--optuna-acquisition", MULTI_RUN),
    r("--optuna-terminator", MULTI_RUN),
    r("--search-percentile-pooling", MULTI_RUN),
    r("--bo-constraint-mode", MULTI_RUN),
    r("--variant", MULTI_RUN),
    r("--sweep-variant", MULTI_RUN),
    r("--search-sla", MULTI_RUN),
    r("--search-sla-tier", MULTI_RUN),
    r("--search-recipe", MULTI_RUN),
    r("--ttft-sla-ms", MULTI_RUN),
    r("--isl-osl-pairs", MULTI_RUN),
    r("--itl-sla-ms", MULTI_RUN),
    r("--tpot-sla-ms", MULTI_RUN),
    r("--e2e-sla-ms", MULTI_RUN),
    r("--error-rate-sla", MULTI_RUN),
    r("--slo-attainment-fraction", MULTI_RUN),
    r("--search-style", MULTI_RUN),
    r("--degradation-threshold", MULTI_RUN),
    r("--degradation-metric-tag", MULTI_RUN),
    r("--degradation-stat", MULTI_RUN),
    r("--isl-min", MULTI_RUN),
    r("--isl-max", MULTI_RUN),
    r("--isl-steps", MULTI_RUN),
    r("--concurrency-min", MULTI_RUN),
    r("--concurrency-max", MULTI_RUN),
    r("--concurrency-steps", MULTI_RUN),
    r("--osl-min", MULTI_RUN),
    r("--osl-max", MULTI_RUN),
    r("--osl-steps", MULTI_RUN),
    // Not built here: endpoint, input, output, loadgen details
    r("--wait-for-model-timeout", READY),
    r("--wait-for-model-mode", READY),
    r("--wait-for-model-interval", READY),
    r("--api-key", API_KEY),
    r(
        "--use-legacy-max-tokens",
        "the harness always sends `max_tokens` (AIPerf's legacy field); AIPerf's default field `max_completion_tokens` is not sent",
    ),
    r(
        "--connection-reuse-strategy",
        "the harness's client pools connections (AIPerf's default `pooled`); other strategies are not built",
    ),
    r("--request-content-type", "the bodies are JSON always (multipart forms are for video generation)"),
    r("--ignore-trace-delays", SCHEDULE),
    r("--dataset-sampling-strategy", SAMPLING),
    r("--fixed-schedule", SCHEDULE),
    r("--no-fixed-schedule", SCHEDULE),
    r("--fixed-schedule-auto-offset", SCHEDULE),
    r("--fixed-schedule-start-offset", SCHEDULE),
    r("--fixed-schedule-end-offset", SCHEDULE),
    r(
        "--export-level",
        "the three summary and record files are always written; raw request/response files are not (the generated text is not recorded)",
    ),
    r(
        "--profile-export-level",
        "the three summary and record files are always written; raw request/response files are not (the generated text is not recorded)",
    ),
    r("--plot-required", "AIPerf's plots: the evidence's results/report.html holds the study's figures"),
    r("--no-auto-plot", "AIPerf's plots: the evidence's results/report.html holds the study's figures"),
    r(
        "--benchmark-grace-period",
        "a duration-bound run here is a request count (rate x --benchmark-duration), and every request is recorded to its end",
    ),
    r("--conversation-turn-mean", MULTI_TURN),
    r("--session-turns-mean", MULTI_TURN),
    r("--conversation-turn-stddev", MULTI_TURN),
    r("--session-turns-stddev", MULTI_TURN),
    r("--prompt-input-tokens-block-size", "hash-block-aligned synthetic prompts (KV-cache block reuse): not built"),
    r("--synthetic-input-tokens-block-size", "hash-block-aligned synthetic prompts (KV-cache block reuse): not built"),
    r("--isl-block-size", "hash-block-aligned synthetic prompts (KV-cache block reuse): not built"),
    r(
        "--random-range-ratio",
        "AIPerf's uniform length windows: not built for this front door; --isl-stddev/--osl-stddev are (`harness bench --random-range-ratio` is vLLM's)",
    ),
    r("--random-corpus-style", "AIPerf's corpus styles: the synthetic prompts are cut from --texts"),
    r(
        "--prompt-corpus",
        "AIPerf's bundled corpora: the synthetic prompts are cut from --texts (Shakespeare by default)",
    ),
    r(
        "--prompt-batch-size",
        "batched inputs are for embeddings and rankings endpoints: the harness measures text generation",
    ),
    r(
        "--batch-size-text",
        "batched inputs are for embeddings and rankings endpoints: the harness measures text generation",
    ),
    r("--batch-size", "batched inputs are for embeddings and rankings endpoints: the harness measures text generation"),
    r("-b", "batched inputs are for embeddings and rankings endpoints: the harness measures text generation"),
    r("--num-profile-runs", MULTI_RUN),
    // Accuracy
    r("--accuracy-benchmark", ACCURACY),
    r("--accuracy-tasks", ACCURACY),
    r("--accuracy-n-shots", ACCURACY),
    r("--accuracy-enable-cot", ACCURACY),
    r("--accuracy-no-enable-cot", ACCURACY),
    r("--accuracy-grader", ACCURACY),
    r("--accuracy-system-prompt", ACCURACY),
    r("--accuracy-verbose", ACCURACY),
];

/// AIPerf 0.13's `aiperf profile` flags refused by `harness profile`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Aiperf;

impl RefusalTable for Aiperf {
    const TABLE: &'static [Refusal] = AIPERF_REFUSED;
    const HEADING: &'static str = "AIPerf flags refused here (exit 2)";
}
