fn main() {
    eprintln!("harness: not built yet; see README.md");
    std::process::exit(2);
}
