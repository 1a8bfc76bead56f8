//! Demo stand-in for vLLM's Rust frontend (vllm-rs): prints what it is and its version.

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some("--version") {
        println!("vllm-rs {}", env!("CARGO_PKG_VERSION"));
        return;
    }
    println!("{{\"frontend\": \"vllm-rs\", \"version\": \"{}\"}}", env!("CARGO_PKG_VERSION"));
}
