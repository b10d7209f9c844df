//! `results/report.html`: report.md as one self-contained HTML page, the same content
//! with the claims section first (right after the title and its opening paragraph),
//! then the rest in report.md's order (power, tuning, what ran, per-cell tables,
//! observer effect, failures, figures, definitions), with every figure inlined as its
//! SVG. The claims table carries `class="claims"` (its own header colour, so that it
//! stands out, and so that a screenshot can find it). No script, no stylesheet or
//! font or image from anywhere: the page opens offline. Owns the conversion of the
//! Markdown subset `markdown` writes (headings, paragraphs, nested `-` lists, pipe
//! tables, fenced code, inline code, bold, links, one image per line). Must not add
//! or drop content: anything it does not recognise is kept as escaped text.

use std::fmt::Write;
use std::path::Path;

const STYLE: &str = "body{font-family:sans-serif;max-width:1200px;margin:2em auto;padding:0 1em;line-height:1.45}\
table{border-collapse:collapse;margin:1em 0}th,td{border:1px solid #bbb;padding:3px 8px;text-align:left}\
th{background:#eee}code{background:#f4f4f4;padding:0 2px}pre{background:#f4f4f4;padding:8px;overflow-x:auto}\
figure{margin:1em 0}figure svg{max-width:100%;height:auto}table.claims th{background:#dce9f7}";

/// The heading of report.md's claims section.
const CLAIMS: &str = "## Claims";

fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            c => out.push(c),
        }
    }
    out
}

/// Inline markup: `code`, **bold**, [text](target); everything else escaped.
fn inline(s: &str) -> String {
    let mut out = String::new();
    let mut rest = s;
    while let Some(c) = rest.chars().next() {
        if c == '`'
            && let Some(end) = rest[1..].find('`')
        {
            let _ = write!(out, "<code>{}</code>", escape(&rest[1..1 + end]));
            rest = &rest[end + 2..];
        } else if rest.starts_with("**")
            && let Some(end) = rest[2..].find("**")
        {
            let _ = write!(out, "<strong>{}</strong>", inline(&rest[2..2 + end]));
            rest = &rest[end + 4..];
        } else if c == '['
            && let Some(mid) = rest.find(']')
            && rest[mid + 1..].starts_with('(')
            && let Some(end) = rest[mid..].find(')')
        {
            let (text, target) = (&rest[1..mid], &rest[mid + 2..mid + end]);
            let _ = write!(out, "<a href=\"{}\">{}</a>", escape(target), inline(text));
            rest = &rest[mid + end + 1..];
        } else {
            out.push_str(&escape(&rest[..c.len_utf8()]));
            rest = &rest[c.len_utf8()..];
        }
    }
    out
}

/// `![alt](figures/name.svg)` alone on a line: the figure's SVG, inline.
fn figure(line: &str, results: &Path) -> Option<String> {
    let inner = line.strip_prefix("![")?.strip_suffix(')')?;
    let (alt, target) = inner.split_once("](")?;
    let svg = std::fs::read_to_string(results.join(target)).ok()?;
    let start = svg.find("<svg")?;
    Some(format!("<figure>{}<figcaption>{}</figcaption></figure>\n", &svg[start..], escape(alt)))
}

/// The cells of a pipe-table row; `\|` is a literal bar inside a cell.
fn cells(row: &str) -> Vec<String> {
    let row = row.trim();
    let row = row.strip_prefix('|').unwrap_or(row);
    let row = if row.ends_with('|') && !row.ends_with("\\|") { &row[..row.len() - 1] } else { row };
    let mut out = vec![String::new()];
    let mut chars = row.chars().peekable();
    while let Some(c) = chars.next() {
        let c = match c {
            '\\' if chars.peek() == Some(&'|') => chars.next().unwrap_or('|'),
            '|' => {
                out.push(String::new());
                continue;
            }
            c => c,
        };
        if let Some(cell) = out.last_mut() {
            cell.push(c);
        }
    }
    out.iter().map(|s| s.trim().to_string()).collect()
}

fn table(o: &mut String, rows: &[&str], class: Option<&str>) {
    match class {
        Some(c) => {
            let _ = writeln!(o, "<table class=\"{c}\">");
        }
        None => o.push_str("<table>\n"),
    }
    for (i, row) in rows.iter().enumerate() {
        if i == 1 && cells(row).iter().all(|c| !c.is_empty() && c.chars().all(|ch| matches!(ch, '-' | ':'))) {
            continue;
        }
        let tag = if i == 0 { "th" } else { "td" };
        o.push_str("<tr>");
        for c in cells(row) {
            let _ = write!(o, "<{tag}>{}</{tag}>", inline(&c));
        }
        o.push_str("</tr>\n");
    }
    o.push_str("</table>\n");
}

/// Nested `-` lists by indentation (two spaces a level).
fn list(o: &mut String, items: &[&str]) {
    let mut depth = 0usize;
    for item in items {
        let level = (item.len() - item.trim_start().len()) / 2 + 1;
        while depth < level {
            o.push_str("<ul>\n");
            depth += 1;
        }
        while depth > level {
            o.push_str("</ul>\n");
            depth -= 1;
        }
        let text = item.trim_start().strip_prefix("- ").unwrap_or(item.trim_start());
        let _ = writeln!(o, "<li>{}</li>", inline(text));
    }
    for _ in 0..depth {
        o.push_str("</ul>\n");
    }
}

fn is_item(line: &str) -> bool {
    line.trim_start().starts_with("- ")
}

/// report.md's lines with the claims section (its heading up to the next `## `)
/// moved before the first other `## ` section; unchanged without one.
fn claims_first(markdown: &str) -> Vec<&str> {
    let lines: Vec<&str> = markdown.lines().collect();
    let Some(start) = lines.iter().position(|l| *l == CLAIMS) else { return lines };
    let end = lines[start + 1..].iter().position(|l| l.starts_with("## ")).map_or(lines.len(), |p| start + 1 + p);
    let first = lines.iter().position(|l| l.starts_with("## ")).unwrap_or(start);
    let mut out: Vec<&str> = lines[..first].to_vec();
    out.extend(&lines[start..end]);
    out.extend(lines[first..start].iter().chain(&lines[end..]));
    out
}

/// The page for `markdown` (report.md's text); figures are read from `results`.
pub fn render(markdown: &str, results: &Path) -> String {
    let lines = claims_first(markdown);
    let mut in_claims = false;
    let title = lines.iter().find_map(|l| l.strip_prefix("# ")).unwrap_or("study report");
    let mut o = format!(
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>{}</title>\n\
         <style>{STYLE}</style>\n</head>\n<body>\n",
        escape(title)
    );
    let mut i = 0;
    while i < lines.len() {
        let line = lines[i];
        let take = |i: &mut usize, pred: &dyn Fn(&str) -> bool| {
            let start = *i;
            while *i < lines.len() && pred(lines[*i]) {
                *i += 1;
            }
            &lines[start..*i]
        };
        if line.trim().is_empty() {
            i += 1;
        } else if line.starts_with("```") {
            let end = lines[i + 1..].iter().position(|l| l.starts_with("```")).map_or(lines.len(), |p| i + 1 + p);
            let _ = writeln!(o, "<pre>{}</pre>", escape(&lines[i + 1..end].join("\n")));
            i = end + 1;
        } else if let Some(level) = (1..=6).find(|&n| line.starts_with(&format!("{} ", "#".repeat(n)))) {
            let _ = writeln!(o, "<h{level}>{}</h{level}>", inline(&line[level + 1..]));
            if level <= 2 {
                in_claims = line == CLAIMS;
            }
            i += 1;
        } else if line.trim_start().starts_with('|') {
            let rows = take(&mut i, &|l| l.trim_start().starts_with('|'));
            // The claims section's first table is the claims table.
            table(&mut o, rows, in_claims.then_some("claims"));
            in_claims = false;
        } else if is_item(line) {
            let items = take(&mut i, &|l| is_item(l));
            list(&mut o, items);
        } else if let Some(fig) = figure(line.trim(), results) {
            o.push_str(&fig);
            i += 1;
        } else {
            let start = i;
            i += 1;
            let plain = |l: &str| {
                !l.trim().is_empty()
                    && !l.starts_with('#')
                    && !l.starts_with("```")
                    && !is_item(l)
                    && !l.starts_with('|')
            };
            while i < lines.len() && plain(lines[i]) {
                i += 1;
            }
            let _ = writeln!(o, "<p>{}</p>", inline(&lines[start..i].join("\n")));
        }
    }
    o.push_str("</body>\n</html>\n");
    o
}

#[cfg(test)]
mod tests {
    use super::*;

    const MD: &str = "# s: study report\n\nA paragraph with `code <b>` and **bold** and [a link](evidence.json).\n\n\
                      ## Claims\n\n| hypothesis | p |\n| --- | --- |\n| h1 | 0.25 |\n| a \\| b | 1 |\n\n- one\n  - nested `x`\n- two\n\n\
                      ```\nraw <table> text\n```\n\n![fig one](figures/one.svg)\n\n(PNG: [figures/one.png](figures/one.png))\n";

    #[test]
    fn the_markdown_subset_becomes_html_and_figures_are_inlined() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("figures")).unwrap();
        std::fs::write(dir.path().join("figures/one.svg"), "<?xml version=\"1.0\"?>\n<svg width=\"10\"><rect/></svg>")
            .unwrap();
        let html = render(MD, dir.path());
        assert!(html.starts_with("<!DOCTYPE html>") && html.contains("<title>s: study report</title>"), "{html}");
        assert!(html.contains("<h2>Claims</h2>"), "{html}");
        assert!(html.contains("<p>A paragraph with <code>code &lt;b&gt;</code> and <strong>bold</strong> and <a href=\"evidence.json\">a link</a>.</p>"), "{html}");
        assert!(html.contains("<tr><th>hypothesis</th><th>p</th></tr>\n<tr><td>h1</td><td>0.25</td></tr>"), "{html}");
        assert!(!html.contains("<td>---</td>") && html.contains("<td>a | b</td><td>1</td>"), "{html}");
        assert!(
            html.contains("<ul>\n<li>one</li>\n<ul>\n<li>nested <code>x</code></li>\n</ul>\n<li>two</li>\n</ul>"),
            "{html}"
        );
        assert!(html.contains("<pre>raw &lt;table&gt; text</pre>"), "{html}");
        assert!(
            html.contains("<figure><svg width=\"10\"><rect/></svg><figcaption>fig one</figcaption></figure>"),
            "{html}"
        );
        assert!(!html.contains("<?xml") && !html.contains("<script") && !html.contains("<img"), "{html}");
        assert!(html.contains("<a href=\"figures/one.png\">figures/one.png</a>"), "{html}");
    }

    #[test]
    fn a_study_with_hypotheses_gets_its_claims_table_and_figures_in_html() {
        let dir = tempfile::tempdir().unwrap();
        crate::fixtures::synth::generate(dir.path(), &crate::fixtures::synth::SynthSpec::small()).unwrap();
        let html = std::fs::read_to_string(dir.path().join("results/report.html")).unwrap();
        let md = std::fs::read_to_string(dir.path().join("results/report.md")).unwrap();
        let claims = html.find("<h2>Claims</h2>").expect("a claims section");
        let table = html[claims..].find("<table class=\"claims\">\n<tr><th>hypothesis</th>").map(|t| claims + t);
        let per_cell = html.find("<h2>Per-cell summary</h2>").expect("a per-cell section");
        assert!(table.is_some_and(|t| t < per_cell), "the claims table comes before the cells");
        let what_ran = html.find("<h2>What was run</h2>").expect("what was run");
        assert!(claims < what_ran, "the claims come first");
        assert_eq!(html.matches("<table class=\"claims\">").count(), 1, "only the claims table is marked");
        let section: Vec<&str> = md
            .lines()
            .skip_while(|l| !l.starts_with("## Claims"))
            .skip(1)
            .take_while(|l| !l.starts_with("## "))
            .filter(|l| l.starts_with("| ") && !l.starts_with("| ---"))
            .collect();
        let rows = section.len();
        assert!(rows >= 2, "the synthetic study has hypotheses:\n{md}");
        let start = table.unwrap_or(claims);
        let end = start + html[start..].find("</table>").expect("the claims table ends");
        let html_rows = html[start..end].matches("<tr>").count();
        assert_eq!(html_rows, rows, "every row of report.md's claims table (header included)");
        assert_eq!(html.matches("<figure><svg").count(), md.matches("![").count(), "every figure inline");
    }

    #[test]
    fn the_claims_section_moves_first_and_nothing_else_moves() {
        let md = "# t\n\nintro\n\n## Power\n\np\n\n## Claims\n\n| h |\n| --- |\n| x |\n\n- note\n\n## Per-cell summary\n\n| c |\n";
        let html = render(md, Path::new("/nonexistent"));
        let at = |s: &str| html.find(s).unwrap_or_else(|| panic!("{s} in {html}"));
        assert!(at("<h1>t</h1>") < at("<p>intro</p>") && at("<p>intro</p>") < at("<h2>Claims</h2>"), "{html}");
        assert!(at("<h2>Claims</h2>") < at("<table class=\"claims\">") && at("<li>note</li>") < at("<h2>Power</h2>"));
        assert!(at("<h2>Power</h2>") < at("<h2>Per-cell summary</h2>") && html.contains("<table>\n<tr><th>c</th>"));
        assert_eq!(claims_first("# t\n\n## A\n"), ["# t", "", "## A"], "no claims section: unchanged");
    }

    #[test]
    fn a_missing_figure_stays_a_link_to_its_file() {
        let html = render("![gone](figures/gone.svg)\n", Path::new("/nonexistent"));
        assert!(html.contains("<a href=\"figures/gone.svg\">gone</a>") && !html.contains("<figure>"), "{html}");
    }
}
