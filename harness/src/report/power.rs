//! The power summary at the top of `report.md` for a study with in-study pilots:
//! per hypothesis, the smallest true effect its rule supports with 80% (and 95%)
//! probability at the study's block count, from the noise of the control's repeated
//! pilot runs (`pilot::power_summary`, computed by `crate::power`), with the model's
//! assumptions, so that "not supported" reads against what the study could see.
//! Must not compute anything (it renders `Loaded::power`).

use std::fmt::Write;

use super::Loaded;
use crate::power::{PowerReport, percent};

fn effect(x: Option<f64>) -> String {
    x.map_or_else(|| "no effect within the search".to_string(), percent)
}

/// Appends the section when the study has pilots and hypotheses.
pub fn section(o: &mut String, l: &Loaded) {
    let Some(power) = &l.power else { return };
    let _ = writeln!(o, "## Power of this study (noise from its own pilots)\n");
    match power {
        Err(why) => {
            let _ = writeln!(o, "No power summary: {why}.\n");
        }
        Ok(r) => render(o, r),
    }
}

fn render(o: &mut String, r: &PowerReport) {
    let _ = writeln!(
        o,
        "How large a true effect this study's rule (sign test, Holm over the family of {} at alpha {}, median \
         screen) supports with 80% probability at its {} confirmation blocks, given the fresh-server noise of the \
         control's repeated pilot runs (`pilots/derived.json`, excluded from every test). A claim below that is \
         not supported reads against these figures: an effect smaller than them is likely to be missed.\n",
        r.family, r.alpha, r.blocks
    );
    let _ = writeln!(
        o,
        "| hypothesis | noise: SD of the paired log-ratio (90% upper bound) | pilot runs | supported with 80% probability | with 95% |"
    );
    let _ = writeln!(o, "| --- | --- | --- | --- | --- |");
    for h in &r.hypotheses {
        let d = |sd_upper: bool, p: f64| {
            h.detectable
                .iter()
                .find(|d| (d.sd == h.noise.sd_upper) == sd_upper && d.probability == p)
                .and_then(|d| d.rule_simulated)
        };
        let _ = writeln!(
            o,
            "| {} ({} in {}) | {:.4} ({:.4}) from {} | {} of {} | this study could detect {} with 80% probability at {} \
             blocks ({} at the SD's upper bound) | {} ({}) |",
            h.name,
            h.metric.as_str(),
            h.cell,
            h.noise.sd,
            h.noise.sd_upper,
            h.noise.cell,
            h.noise.blocks.len(),
            h.noise.control,
            effect(d(false, 0.8)),
            r.blocks,
            effect(d(true, 0.8)),
            effect(d(false, 0.95)),
            effect(d(true, 0.95)),
        );
    }
    let _ = writeln!(o, "\nModel and assumptions:\n");
    for a in &r.assumptions {
        let _ = writeln!(o, "- {a}");
    }
    o.push('\n');
}
