//! `results/report.html` in a real browser: a synthetic study's report (written by
//! `report::build`, as for any study) is rendered by headless Chromium (Debian's
//! `chromium`, which scripts/test installs). The DOM after rendering holds the claims
//! table first on the page with every row of report.md's claims table, and the
//! screenshot shows it: the claims table's own header colour is on screen with text
//! on it, and the row borders below it count the table's rows. Fails, never skips,
//! when Chromium is missing.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

/// The claims table's header background (`table.claims th`, report::html).
const CLAIMS_HEADER: [u8; 3] = [0xdc, 0xe9, 0xf7];
/// Table borders (`th, td { border: 1px solid #bbb }`).
const BORDER: [u8; 3] = [0xbb, 0xbb, 0xbb];

fn chromium() -> PathBuf {
    let found = std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).map(|d| d.join("chromium")).find(|c| c.is_file()))
        .unwrap_or_default();
    found.unwrap_or_else(|| {
        panic!(
            "chromium is not installed: this test renders results/report.html in headless Chromium. \
             scripts/test installs it (apt-get update && apt-get install -y chromium)"
        )
    })
}

/// Runs headless Chromium on `page` with `extra` flags and a fresh profile; returns
/// its stdout. Output goes to files (a DOM larger than a pipe's buffer would block a
/// browser whose pipe is read only at the end).
fn headless(page: &Path, extra: &[String]) -> Vec<u8> {
    let profile = tempfile::tempdir().expect("profile dir");
    let (out_path, err_path) = (profile.path().join("stdout"), profile.path().join("stderr"));
    let mut child = Command::new(chromium())
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--force-device-scale-factor=1",
            "--hide-scrollbars",
        ])
        .arg(format!("--user-data-dir={}", profile.path().join("profile").display()))
        .args(extra)
        .arg(format!("file://{}", page.display()))
        .stdout(File::create(&out_path).expect("stdout file"))
        .stderr(File::create(&err_path).expect("stderr file"))
        .spawn()
        .expect("start chromium");
    // A browser that never returns fails the test instead of hanging it.
    let deadline = Instant::now() + Duration::from_secs(180);
    let status = loop {
        if let Some(status) = child.try_wait().expect("try_wait") {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("chromium did not finish rendering {} within 180 s", page.display());
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let stderr = std::fs::read_to_string(&err_path).unwrap_or_default();
    assert!(status.success(), "chromium failed: {stderr}");
    std::fs::read(&out_path).expect("chromium's stdout")
}

/// The hypothesis rows of report.md's claims table (header excluded).
fn claims_rows(md: &str) -> Vec<String> {
    md.lines()
        .skip_while(|l| *l != "## Claims")
        .skip(1)
        .take_while(|l| !l.starts_with("## "))
        .skip_while(|l| !l.starts_with('|'))
        .take_while(|l| l.starts_with('|'))
        .skip(2)
        .map(|l| l.trim_matches('|').split('|').next().unwrap_or("").trim().to_string())
        .collect()
}

struct Image {
    width: usize,
    height: usize,
    rgb: Vec<[u8; 3]>,
}

impl Image {
    fn read(path: &Path) -> Image {
        let mut decoder = png::Decoder::new(std::fs::File::open(path).expect("screenshot"));
        decoder.set_transformations(png::Transformations::normalize_to_color8());
        let mut reader = decoder.read_info().expect("a PNG");
        let mut buf = vec![0; reader.output_buffer_size()];
        let info = reader.next_frame(&mut buf).expect("a frame");
        let channels = info.color_type.samples();
        assert!(channels >= 3, "a colour screenshot, got {:?}", info.color_type);
        let rgb = buf[..info.buffer_size()].chunks(channels).map(|p| [p[0], p[1], p[2]]).collect();
        Image { width: info.width as usize, height: info.height as usize, rgb }
    }

    fn at(&self, x: usize, y: usize) -> [u8; 3] {
        self.rgb[y * self.width + x]
    }
}

fn near(a: [u8; 3], b: [u8; 3]) -> bool {
    a.iter().zip(b).all(|(x, y)| x.abs_diff(y) <= 3)
}

#[test]
fn chromium_shows_the_claims_table_first_with_every_row() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let study = tmp.path().join("study");
    harness::fixtures::synth::generate(&study, &harness::fixtures::synth::SynthSpec::small()).expect("a study");
    let page = study.join("results/report.html");
    let md = std::fs::read_to_string(study.join("results/report.md")).expect("report.md");
    let rows = claims_rows(&md);
    assert!(rows.len() >= 2, "the synthetic study has hypotheses:\n{md}");

    // What the browser built from the page.
    let dom = String::from_utf8(headless(&page, &["--dump-dom".into()])).expect("utf-8 DOM");
    let start = dom.find("<table class=\"claims\">").unwrap_or_else(|| panic!("no claims table in the DOM:\n{dom}"));
    assert!(!dom[..start].contains("<table"), "the claims table is the page's first table");
    let table = &dom[start..start + dom[start..].find("</table>").expect("the table ends")];
    assert_eq!(table.matches("<tr>").count(), rows.len() + 1, "header and every hypothesis:\n{table}");
    for h in &rows {
        assert!(table.contains(&format!("<td>{h}</td>")), "{h} in the claims table:\n{table}");
    }

    // What it shows.
    let png = tmp.path().join("report.png");
    headless(&page, &[format!("--screenshot={}", png.display()), "--window-size=1280,1600".into()]);
    let img = Image::read(&png);
    let header: Vec<(usize, usize)> = (0..img.height)
        .flat_map(|y| (0..img.width).map(move |x| (x, y)))
        .filter(|&(x, y)| img.at(x, y) == CLAIMS_HEADER)
        .collect();
    assert!(header.len() > 500, "the claims table's header is on screen ({} pixels of its colour)", header.len());
    let (left, top) = header.iter().fold((usize::MAX, usize::MAX), |(l, t), &(x, y)| (l.min(x), t.min(y)));
    let (right, bottom) = header.iter().fold((0, 0), |(r, b), &(x, y)| (r.max(x), b.max(y)));
    let dark = (top..=bottom)
        .flat_map(|y| (left..=right).map(move |x| (x, y)))
        .filter(|&(x, y)| img.at(x, y).iter().all(|&c| c < 100))
        .count();
    assert!(dark > 50, "the header row has its column names drawn ({dark} dark pixels)");
    // The table's left border beside its header, then down that border: a horizontal
    // border line (30 px of border colour, which no text draws) above the header and
    // below each row, until the left border ends with the table.
    let mid = (top + bottom) / 2;
    let edge = (left.saturating_sub(3)..=left)
        .rev()
        .find(|&x| near(img.at(x, mid), BORDER))
        .expect("the claims table's left border beside its header");
    let line = |y: usize| (edge + 3..edge + 33).all(|x| near(img.at(x, y), BORDER));
    let (mut borders, mut inside, mut previous) = (0, false, false);
    for y in top.saturating_sub(4)..img.height {
        if !near(img.at(edge, y), BORDER) {
            if inside {
                break;
            }
            continue;
        }
        inside = true;
        let now = line(y);
        if now && !previous {
            borders += 1;
        }
        previous = now;
    }
    assert_eq!(borders, rows.len() + 2, "borders of the header and {} rows in the screenshot", rows.len());
}
