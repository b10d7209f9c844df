//! Tests of `harness benchmark`: guidellm 0.8.1's options, in its own `kind=`
//! syntax, onto the engine's plan (through the plan parser), and what is refused.

use std::path::{Path, PathBuf};

use clap::Parser;

use super::*;
use crate::commands::bench::{BenchPlan, prepare, prepare_sweep, resolved};
use crate::plan::Load;

#[derive(Parser)]
pub(super) struct Cli {
    #[command(flatten)]
    pub(super) args: BenchmarkArgs,
}

#[derive(Parser)]
pub(super) struct Defaults {
    #[command(flatten)]
    pub(super) bench: BenchArgs,
}

const BACKEND: &str = "kind=openai_http,target=http://127.0.0.1:9/v1,model=m";
const DATA: &str = "kind=synthetic_text,prompt_tokens=16,output_tokens=4";

fn translated(flags: &[&str]) -> Result<Translated, BenchError> {
    let mut argv = vec!["benchmark", "run", "--backend", BACKEND, "--data", DATA];
    argv.extend_from_slice(flags);
    let a = Cli::try_parse_from(argv).unwrap_or_else(|e| panic!("{e}")).args;
    translate(&a, Defaults::try_parse_from(["bench"]).unwrap().bench)
}

fn prepared(flags: &[&str]) -> BenchPlan {
    let t = translated(flags).unwrap_or_else(|e| panic!("{e}"));
    prepare(&t.bench, || 18555, 0).unwrap_or_else(|e| panic!("{e}"))
}

fn error(flags: &[&str]) -> String {
    match translated(flags).and_then(|t| prepare(&t.bench, || 1, 0)) {
        Ok(p) => panic!("expected an error, got\n{}", p.text),
        Err(e) => e.to_string(),
    }
}

fn loads(p: &BenchPlan) -> Vec<(String, Load, u64)> {
    let plan = &p.frozen.plan;
    plan.resolved_cells()
        .unwrap()
        .iter()
        .map(|c| (c.name.clone(), plan.cell(&c.name).unwrap().load.clone(), c.count))
        .collect()
}

/// guidellm's README options map onto the engine's loads, counts and panel.
#[test]
fn guidellm_profiles_constraints_and_data_map_onto_cells() {
    let max = |n: &str| format!("kind=max_requests,count={n}");
    let sync = prepared(&["--profile", "kind=synchronous", "--constraint", &max("20")]);
    assert!(matches!(loads(&sync)[..], [(ref n, Load::Closed { concurrency: 1 }, 20)] if n == "closed-c1"));
    let plan = &sync.frozen.plan;
    assert_eq!(plan.arms[0].server, crate::plan::Server::External { url: "http://127.0.0.1:9".into() });
    assert_eq!((plan.prompts.lengths.as_slice(), plan.request.output_tokens), (&[16][..], 4));
    let thr = prepared(&["--profile", "kind=throughput", "--constraint", &max("30")]);
    assert!(matches!(loads(&thr)[..], [(_, Load::Closed { concurrency: 30 }, 30)]));
    let capped = prepared(&["--profile", "kind=throughput,max_concurrency=8", "--constraint", &max("30")]);
    assert!(matches!(loads(&capped)[..], [(_, Load::Closed { concurrency: 8 }, 30)]));
    let conc = prepared(&["--profile", "kind=concurrent,streams=[2,4]"]);
    let names: Vec<String> = loads(&conc).into_iter().map(|c| c.0).collect();
    assert_eq!(names, ["closed-c2", "closed-c4"]);
    // max_duration: each rate its own count (rate x seconds), capped by max_requests.
    let cons = prepared(&[
        "--profile",
        "kind=constant,rate=[1.5,10]",
        "--constraint",
        "kind=max_duration,seconds=20",
        "--constraint",
        &max("100"),
    ]);
    let l = loads(&cons);
    assert_eq!(
        l.iter().map(|c| (c.0.as_str(), c.2)).collect::<Vec<_>>(),
        [("constant-r1.5", 30), ("constant-r10", 100)]
    );
    assert!(l.iter().all(|c| matches!(c.1, Load::Open { arrival: crate::plan::Arrival::Constant, .. })));
    let poisson = prepared(&["--profile", "kind=poisson,rate=2"]);
    assert!(matches!(loads(&poisson)[..], [(_, Load::Open { arrival: crate::plan::Arrival::Poisson, .. }, _)]));
    // JSON is the same option.
    let json = prepared(&["--profile", r#"{"kind": "poisson", "rate": 2}"#]);
    assert_eq!(json.text, poisson.text);
    let t = translated(&["--seed", "kind=static,value=42", "--output", "kind=yaml,path=out/b.yaml"]).unwrap();
    assert_eq!(t.bench.seed, 42);
    assert_eq!(t.outputs, [Output { kind: OutputKind::Yaml, path: PathBuf::from("out/b.yaml") }]);
}

/// guidellm's outputs: without `--output`, its default JSON and CSV in the working
/// directory; each `--output kind=` its own file, guidellm's name by default.
#[test]
fn outputs_are_guidellms_kinds_and_default_files() {
    let out = |kind, path: &str| Output { kind, path: PathBuf::from(path) };
    assert_eq!(
        translated(&[]).unwrap().outputs,
        [out(OutputKind::Json, "benchmarks.json"), out(OutputKind::Csv, "benchmarks.csv")]
    );
    let t = translated(&["--output", "kind=csv", "--output", "kind=html,path=r/x.html", "--outputs", "kind=json"]);
    assert_eq!(
        t.unwrap().outputs,
        [
            out(OutputKind::Csv, "benchmarks.csv"),
            out(OutputKind::Html, "r/x.html"),
            out(OutputKind::Json, "benchmarks.json")
        ]
    );
    // A directory gets guidellm's file name inside it.
    let dir = tempfile::tempdir().unwrap();
    let o = out(OutputKind::Html, dir.path().to_str().unwrap());
    assert_eq!(destination(&o), dir.path().join("benchmarks.html"));
    assert_eq!(destination(&out(OutputKind::Csv, "x/y.csv")), PathBuf::from("x/y.csv"));
}

/// guidellm's default profile is a sweep: the anchors' plan, then the sweep plan
/// with the anchors' rates in [derive] and evenly spaced constant-rate points.
#[test]
fn the_default_sweep_is_anchors_then_constant_rates_between_them_through_the_derive_formula() {
    let flags = [
        "--profile",
        "kind=sweep,sweep_size=5",
        "--constraint",
        "kind=max_requests,count=40",
        "--constraint",
        "kind=max_duration,seconds=4",
    ];
    let anchors = prepared(&flags);
    let names: Vec<String> = anchors.frozen.plan.cells.iter().map(|c| c.name.clone()).collect();
    assert_eq!(names, ["closed-c1", "closed-c40"]);
    assert_eq!(resolved(&translated(&[]).unwrap().bench).unwrap().sweep, Some(10), "guidellm's default: sweep of 10");
    let a = resolved(&translated(&flags).unwrap().bench).unwrap();
    assert_eq!(a.sweep, Some(5));
    let summaries = crate::commands::bench::tests_support::anchors(2.0, 8.0, 40);
    let sweep = prepare_sweep(&a, &summaries, Path::new("reports/x-anchors"), || 18555, 0).unwrap();
    let plan = &sweep.frozen.plan;
    assert_eq!(plan.derive.as_ref().expect("[derive]").pilot_rates, [8.0]);
    let cells = plan.resolved_cells().unwrap();
    let points: Vec<(String, u64)> =
        cells.iter().filter(|c| c.name.starts_with("constant-")).map(|c| (c.name.clone(), c.count)).collect();
    // 5 benchmarks: the two anchors and 3 points at 3.5, 5 and 6.5 req/s, 4 s each.
    assert_eq!(points, [("constant-s01".to_string(), 14), ("constant-s02".into(), 20), ("constant-s03".into(), 26)]);
    assert!(sweep.text.contains("sweep anchors measured by harness bench in reports/x-anchors"), "{}", sweep.text);
    let flat = crate::commands::bench::tests_support::anchors(2.0, 2.0, 40);
    let e = prepare_sweep(&a, &flat, Path::new("x"), || 1, 0).unwrap_err().to_string();
    assert!(e.contains("nothing to sweep"), "{e}");
}

/// Every refused option exits with its reason, in guidellm's terms.
#[test]
fn refused_options_and_bad_values_name_the_option_and_why() {
    for (flags, want) in [
        (&["--profile", "kind=sweep,sweep_size=2.5"][..], "sweep_size is the number of benchmarks"),
        (&["--profile", "kind=synchronous", "--constraint", "kind=max_duration,seconds=5"], "a closed loop is bounded"),
        (&["--profile", "kind=concurrent,streams=1.5"], "streams are whole numbers, got 1.5"),
        (&["--profile", "kind=constant"], "--profile kind=constant: give rate="),
        (&["--profile", "kind=constant,rate=2,warmup=0.1"], "key \"warmup\" is refused"),
        (&["--profile", "kind=replay"], "--profile kind=replay: refused"),
        (&["--profile", "kind=sweep,strategy_type=poisson"], "strategy_type=poisson: refused"),
        (&["--constraint", "kind=over_saturation"], "--constraint kind=over_saturation: refused"),
        (
            &["--constraint", "kind=max_duration,seconds=0", "--profile", "kind=constant,rate=1"],
            "seconds must be positive",
        ),
        (&["--output", "kind=plot"], "--output kind=plot: refused"),
        (&["--output", "kind=console"], "--output kind=console: refused"),
        (&["--output", "kind=csv,path=1"], "path must be a path"),
        (&["--output", "kind=csv,sep=;"], "key \"sep\" is refused"),
        (&["--seed", "kind=random"], "--seed kind=random: refused"),
        (&["--config", "chat"], "--config: refused"),
        (&["--label", "env=ci"], "--label: refused"),
        (&["--tokenizer", "kind=huggingface_auto"], "--tokenizer: refused"),
        (&["--data-loader", "kind=pytorch"], "--data-loader: refused"),
        (&["--metrics", "kind=generative"], "--metrics: refused"),
        (&["--override", "profile.streams", "1,2"], "--override: refused"),
        (&["--profile", "rate=2"], "missing required key 'kind'"),
    ] {
        let e = error(flags);
        assert!(e.contains(want), "{flags:?}: want {want:?} in {e}");
    }
    let other = |backend: &str| {
        let a = Cli::try_parse_from(["benchmark", "--backend", backend, "--data", DATA]).unwrap().args;
        translate(&a, Defaults::try_parse_from(["bench"]).unwrap().bench).unwrap_err().to_string()
    };
    assert!(other("kind=vllm_python").contains("only openai_http"));
    assert!(other("kind=openai_http,target=http://x,api_key=sk").contains("key \"api_key\" is refused"));
    assert!(other("kind=openai_http,target=http://x,request_format=/v1/embeddings").contains("refused"));
    let a = Cli::try_parse_from(["benchmark", "--backend", BACKEND, "--data", "kind=hf,path=org/set"]).unwrap();
    let e = translate(&a.args, Defaults::try_parse_from(["bench"]).unwrap().bench).unwrap_err().to_string();
    assert!(e.contains("--data kind=hf: refused: a Hugging Face dataset needs the hub"), "{e}");
}
