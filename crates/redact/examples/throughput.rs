//! Prints the redaction throughput (MB/s) of a stream with `N` secrets, for
//! `npm run bench`: `cargo run --release -p sluice-redact --example throughput -- 10`.

use std::time::Instant;

use sluice_redact::{Redactor, StreamRedactor};

/// 64 MiB of output, in the agent's read chunks: enough for a steady figure.
const OUTPUT_BYTES: usize = 64 << 20;
const CHUNK_BYTES: usize = 64 << 10;

fn main() {
    let count: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(10);
    let secrets: Vec<String> = (0..count)
        .map(|i| format!("ghs_{i:04}16C7e42F292c6912E7710c838347Ae178B"))
        .collect();
    let line = b"npm WARN deprecated some-package@1.2.3: this line is ordinary build output\n";
    let chunk: Vec<u8> = line.iter().copied().cycle().take(CHUNK_BYTES).collect();
    let mut stream = StreamRedactor::new(Redactor::new(&secrets));
    let started = Instant::now();
    let mut emitted = 0;
    for _ in 0..OUTPUT_BYTES / CHUNK_BYTES {
        emitted += stream.push(&chunk).len();
    }
    emitted += stream.finish().len();
    let secs = started.elapsed().as_secs_f64();
    assert_eq!(emitted, OUTPUT_BYTES, "ordinary output must pass unchanged");
    println!("{:.1}", OUTPUT_BYTES as f64 / secs / 1e6);
}
