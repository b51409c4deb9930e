//! The keel-proxy binary (wiring over the library; the reflectors and flags come with the live watch).

fn main() {
    eprintln!("keel-proxy: the API watch is not wired yet; see docs/architecture.md");
    std::process::exit(2);
}
