//! The "Sequential gate" section of `report.md`: how a `[sequential]` study
//! stopped, and each look's verdict per hypothesis (estimated change with its
//! alarm interval, the margin, the verdict). Renders `sequential.json` only; the
//! rule lives in `stats::sequential`, the looks in `crate::analysis::sequential`.

use std::fmt::Write;

use crate::analysis::sequential::{SequentialRecord, StopReason};
use crate::analysis::study::Loaded;

fn pct(log: f64) -> String {
    if log.is_finite() { format!("{:+.2}%", log.exp_m1() * 100.0) } else { "n/a".into() }
}

fn stop_line(r: &SequentialRecord, planned: Option<u32>) -> String {
    let cap = planned.map_or(String::new(), |c| format!(" of at most {c}"));
    let why = match r.reason {
        StopReason::Decided => "every hypothesis was decided (or one regressed) at this look",
        StopReason::Cap => "the last look came with hypotheses undecided",
        StopReason::Time => "sequential.max_minutes passed: the block that crossed it was the last look",
    };
    format!("**{}** after {} blocks{cap}: {why}.", r.state.as_str(), r.blocks)
}

/// Appends the section when the study is sequential and has stopped.
pub fn section(o: &mut String, l: &Loaded) {
    let Some(r) = &l.sequential else { return };
    let planned = l.frozen.plan.sequential.as_ref().and_then(|s| s.looks.last().copied());
    let _ = writeln!(o, "## Sequential gate\n");
    let _ = writeln!(o, "{}\n", stop_line(r, planned));
    let _ = writeln!(
        o,
        "Per look, each hypothesis's paired log-ratio per block, oriented so that positive means the \
         candidate is worse (slower throughput, higher latency). **regressed**: the alarm interval \
         (one-sided level {:.4} per bound = alpha {} / ({} hypotheses x {} looks)) lies above 0 and the \
         estimate is nearer the margin than none; **improved**: the mirror image; **within**: the within \
         interval (one-sided level {:.4} = beta {} / {} looks) lies inside +-margin. No true change is called \
         regressed with probability at most alpha; a true slowdown of the margin is called within with \
         probability at most beta (`docs/gate.md`).\n",
        r.alarm_level,
        r.rule.alpha,
        r.rule.family,
        r.rule.looks.len(),
        r.miss_level,
        r.rule.beta,
        r.rule.looks.len()
    );
    let _ = writeln!(
        o,
        "| look (blocks) | hypothesis | pairs | change (candidate worse +) | alarm interval | within interval | margin | verdict |"
    );
    let _ = writeln!(o, "|---|---|---|---|---|---|---|---|");
    for look in &r.looks {
        for h in &look.hypotheses {
            let _ = writeln!(
                o,
                "| {} | {} | {} | {} | [{}, {}] | [{}, {}] | +-{:.1}% | {} |",
                look.blocks,
                h.name,
                h.look.n,
                pct(h.look.mean),
                pct(h.look.alarm_lower),
                pct(h.look.alarm_upper),
                pct(h.look.within_lower),
                pct(h.look.within_upper),
                h.margin * 100.0,
                h.look.verdict.as_str()
            );
        }
        let _ = writeln!(o, "| {} | **gate** | | | | | | **{}** |", look.blocks, look.state.as_str());
    }
    o.push('\n');
}
