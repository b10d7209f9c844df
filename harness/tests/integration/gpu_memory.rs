//! GPU memory as the sampler records it, with a stand-in `nvidia-smi` first on PATH
//! (this machine has no GPU): the compute apps it lists belong to PIDs outside the
//! server's process group, as inside a container without the host PID namespace,
//! so the server's GPU memory is an error and not 0; every device's used and total
//! memory is still recorded, and report.md says both.

use crate::common;

use std::os::unix::fs::PermissionsExt;
use std::process::Command;

use common::*;

#[test]
fn unmatched_compute_apps_are_an_error_and_every_device_is_still_recorded() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let model = synth_model(tmp.path());
    let bin = tmp.path().join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    let smi = bin.join("nvidia-smi");
    std::fs::write(
        &smi,
        "#!/bin/sh\ncase \"$1\" in\n  --query-compute-apps=*) echo '4242, 70000' ;;\n  \
         --query-gpu=*) echo '0, 70123, 81559'; echo '1, 0, 81559' ;;\n  *) exit 9 ;;\nesac\n",
    )
    .unwrap();
    std::fs::set_permissions(&smi, std::fs::Permissions::from_mode(0o755)).unwrap();
    let argv = serve_argv(&model, &["--kv-format", "f16"], &[]);
    let plan = TestPlan { warmup_prompts: 0, blocks: 1, ..TestPlan::new("gpu-mem", 3) }
        .arm("f16", "control", &argv)
        .closed("c", "confirmation", 2, 6)
        .render();
    let plan_path = tmp.path().join("plan.toml");
    std::fs::write(&plan_path, plan).unwrap();
    let out = tmp.path().join("evidence");
    let path = format!("{}:{}", bin.display(), std::env::var("PATH").unwrap_or_default());
    let run = Command::new(harness_bin())
        .args(["run", "--quiet", "--out"])
        .arg(&out)
        .arg(&plan_path)
        .env("PATH", path)
        .current_dir(workspace())
        .output()
        .expect("harness run");
    assert!(run.status.success(), "{}", String::from_utf8_lossy(&run.stderr));
    let text = std::fs::read_to_string(out.join("raw/b0/f16/memory.jsonl")).unwrap();
    let lines: Vec<serde_json::Value> = text.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert!(!lines.is_empty());
    for l in &lines {
        assert!(l["gpu"].is_null(), "no matched process means unknown, not []: {l}");
        let err = l["gpu_error"].as_str().unwrap_or_default();
        assert!(err.contains("lists 1 compute app(s), none in the server's process group"), "{l}");
        let devices = l["gpu_devices"].as_array().expect("every device recorded");
        assert_eq!(devices.len(), 2, "{l}");
        assert_eq!((devices[0]["used_mib"].as_u64(), devices[0]["total_mib"].as_u64()), (Some(70123), Some(81559)));
    }
    assert_eq!(read_json(&out.join("run.json"))["nvidia_smi"].as_str(), Some(smi.to_str().unwrap()));
    // report.md says the server's GPU memory is unknown, and what the devices held.
    let md = std::fs::read_to_string(out.join("results/report.md")).unwrap();
    let line = md.lines().find(|l| l.contains("- memory (block 0):")).expect("a memory line");
    assert!(line.contains("GPU memory of the server unknown (nvidia-smi lists 1 compute app(s)"), "{line}");
    assert!(line.contains("device 0 peak 70123 of 81559 MiB, device 1 peak 0 of 81559 MiB"), "{line}");
}
